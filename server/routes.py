"""HTTP routes (STYLE.md rule 2): parse, call a service, return. Bodies are
fedldp.protocol.core.wire models."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response, status

from fedldp.protocol.core import wire
from fedldp.server import participants, studies
from fedldp.server.auth import check_admin
from fedldp.server.bodies import documented, json_body
from fedldp.server.context import Context
from fedldp.server.grouping import ReportGrouper

__all__ = ["router"]

router = APIRouter()

MAX_HOLD_S = 10.0
"""Longest a task batch may be held back (well below the clients' read timeout)."""

_ERROR = {"model": wire.ErrorBody}
_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: _ERROR,
    403: _ERROR,
    404: _ERROR,
    409: _ERROR,
    422: _ERROR,
}


def context(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


Ctx = Annotated[Context, Depends(context)]
AdminKey = Annotated[str | None, Header(alias="x-admin-key", description="the admin key")]
Authorization = Annotated[
    str | None, Header(description="Bearer <the participant's token from enrollment>")
]


def _admin(ctx: Context, key: str | None) -> None:
    check_admin(ctx.settings.admin_key, key)


def _bearer(value: str | None) -> str | None:
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


@router.get("/health", tags=["service"])
def health(ctx: Ctx) -> wire.Health:
    from fedldp.server import __version__

    return wire.Health(status="ok", version=__version__, database=ctx.db.dialect)


@router.get("/v1/protocols", tags=["catalogue"])
def protocols(
    epsilon: Annotated[
        float,
        Query(
            ge=wire.EPSILON_MIN,
            le=wire.EPSILON_MAX,
            description="the ε of every participant, for each protocol's minimum population",
        ),
    ] = 1.0,
) -> wire.ProtocolList:
    """The protocol catalogue: each protocol's parameter JSON schema, its broadcast fields and
    the smallest population it plans for at ``epsilon``."""
    return studies.catalogue(epsilon)


@router.post(
    "/v1/studies", status_code=status.HTTP_201_CREATED, responses=_RESPONSES, tags=["studies"]
)
def create_study(body: wire.StudyCreate, ctx: Ctx, x_admin_key: AdminKey = None) -> wire.StudyView:
    """Create a study (admin key needed when the server has one)."""
    _admin(ctx, x_admin_key)
    return studies.create(ctx, body)


@router.get("/v1/studies", tags=["studies"])
def list_studies(ctx: Ctx) -> wire.StudyList:
    return wire.StudyList(studies=studies.list_all(ctx))


@router.get("/v1/studies/{study_id}", responses=_RESPONSES, tags=["studies"])
def get_study(study_id: str, ctx: Ctx) -> wire.StudyView:
    """Phase and per-round progress (expected and received reports, time left)."""
    return studies.get(ctx, study_id)


@router.post("/v1/studies/{study_id}/start", responses=_RESPONSES, tags=["studies"])
def start_study(study_id: str, ctx: Ctx, x_admin_key: AdminKey = None) -> wire.StudyView:
    """Close enrollment, fix the plan and open the first round."""
    _admin(ctx, x_admin_key)
    return studies.start(ctx, study_id)


@router.post("/v1/studies/{study_id}/cancel", responses=_RESPONSES, tags=["studies"])
def cancel_study(study_id: str, ctx: Ctx, x_admin_key: AdminKey = None) -> wire.StudyView:
    _admin(ctx, x_admin_key)
    return studies.cancel(ctx, study_id)


@router.post(
    "/v1/studies/{study_id}/participants",
    status_code=status.HTTP_201_CREATED,
    responses=_RESPONSES,
    tags=["participants"],
)
def enroll(study_id: str, body: wire.EnrollRequest, ctx: Ctx) -> wire.Enrollment:
    """Enroll one participant with its declared ε: its id and secret token."""
    enrolled = studies.enroll(ctx, study_id, [body.epsilon], [body.metadata], [body.participant_id])
    return enrolled.enrollments[0]


@router.post(
    "/v1/studies/{study_id}/participants/batch",
    status_code=status.HTTP_201_CREATED,
    responses=_RESPONSES,
    tags=["participants"],
    openapi_extra=documented(wire.EnrollBatch),
)
def enroll_batch(
    study_id: str, body: Annotated[wire.EnrollBatch, Depends(json_body(wire.EnrollBatch))], ctx: Ctx
) -> wire.EnrollmentBatch:
    """Enroll many participants: their ids and tokens, and, when the ids are consecutive, the
    block token that stands for all of them on the batch endpoints (``block_only``: that alone)."""
    return studies.enroll(ctx, study_id, *body.rows(), block_only=body.block_only)


@router.post(
    "/v1/studies/{study_id}/leases",
    status_code=status.HTTP_201_CREATED,
    responses=_RESPONSES,
    tags=["participants"],
)
def lease(
    study_id: str, body: wire.LeaseRequest, ctx: Ctx, x_admin_key: AdminKey = None
) -> wire.Lease:
    """Reserve the next block of participant ids for one swarm (studies with an enrollment
    target; swarms then enroll their block with explicit participant ids). Needs the admin key
    when the server has one: a lease holds ids until the enrollment deadline."""
    _admin(ctx, x_admin_key)
    return studies.lease(ctx, study_id, body.size)


@router.get(
    "/v1/studies/{study_id}/participants/{participant_id}/task",
    response_model=wire.Task,
    responses=_RESPONSES,
    tags=["participants"],
)
def get_task(
    study_id: str, participant_id: int, ctx: Ctx, authorization: Authorization = None
) -> wire.Task:
    """What the participant should do now: wait, report (round, broadcast, ε), or nothing."""
    return participants.task(ctx, study_id, participant_id, _bearer(authorization))


@router.post(
    "/v1/studies/{study_id}/tasks",
    responses=_RESPONSES,
    tags=["participants"],
    openapi_extra=documented(wire.TaskBatchRequest),
)
async def get_tasks(
    study_id: str,
    body: Annotated[wire.TaskBatchRequest, Depends(json_body(wire.TaskBatchRequest))],
    ctx: Ctx,
    hold: Annotated[float, Query(ge=0, le=MAX_HOLD_S)] = 0.0,
) -> wire.TaskBatch:
    """The tasks of many participants (with each one's token, or block tokens covering them).
    ``hold=S`` (seconds) holds the answer while none of them has a report task and some would
    wait, and answers as soon as the study moves on."""
    return await participants.tasks_when_ready(ctx, study_id, body.participant_ids, body, hold)


@router.post("/v1/studies/{study_id}/reports", responses=_RESPONSES, tags=["reports"])
async def submit_report(
    study_id: str, body: wire.ReportSubmit, request: Request, response: Response
) -> wire.Receipt:
    """One privatized report (idempotent: resending it returns the same receipt). Concurrent
    reports are stored together, one transaction per group (fedldp.server.grouping)."""
    grouper: ReportGrouper = request.app.state.grouper
    receipt = await grouper.submit(study_id, body)
    response.status_code = status.HTTP_200_OK if receipt.duplicate else status.HTTP_201_CREATED
    return receipt


@router.post(
    "/v1/studies/{study_id}/reports/batch",
    responses=_RESPONSES,
    tags=["reports"],
    openapi_extra=documented(wire.ReportBatch),
)
def submit_reports(
    study_id: str, body: Annotated[wire.ReportBatch, Depends(json_body(wire.ReportBatch))], ctx: Ctx
) -> wire.BatchReceipt:
    """Many participants' privatized reports for one round (with each one's token, or block
    tokens covering them); rejected items are listed."""
    return participants.submit_batch(ctx, study_id, body)


@router.get("/v1/studies/{study_id}/rounds", responses=_RESPONSES, tags=["results"])
def get_rounds(study_id: str, ctx: Ctx) -> wire.RoundsView:
    return studies.rounds_of(ctx, study_id)


@router.get("/v1/studies/{study_id}/rounds/{index}", responses=_RESPONSES, tags=["results"])
def get_round(study_id: str, index: int, ctx: Ctx) -> wire.RoundView:
    """A round's public broadcast and output."""
    return studies.round_of(ctx, study_id, index)


@router.get("/v1/studies/{study_id}/result", responses=_RESPONSES, tags=["results"])
def get_result(study_id: str, ctx: Ctx) -> wire.ResultView:
    """Estimate, error bar, diagnostics and ε summary of a finished study (409 before)."""
    return studies.result(ctx, study_id)


@router.post("/v1/studies/{study_id}/predict", responses=_RESPONSES, tags=["results"])
def post_predict(study_id: str, body: wire.PredictRequest, ctx: Ctx) -> wire.PredictView:
    """Predictions of a finished user-classify or user-regress study for feature rows (at most
    10,000 per request; each row of the study's feature dimension, values in [0, 1] per axis,
    others clipped into it). 409 before the study finishes; 422 for other protocols."""
    return studies.predict(ctx, study_id, body)


@router.get(
    "/v1/studies/{study_id}/participants/{participant_id}/budget",
    responses=_RESPONSES,
    tags=["participants"],
)
def get_budget(
    study_id: str, participant_id: int, ctx: Ctx, authorization: Authorization = None
) -> wire.BudgetView:
    """The participant's ε ledger: declared, planned per round, spent."""
    return participants.budget(ctx, study_id, participant_id, _bearer(authorization))

"""HTTP routes (docs/architecture.md, convention 2): parse, call a service, return. Bodies are
fedldp.protocol.core.wire models, read by ``fedldp.server.web.bodies.json_body`` after the caller's
credentials (``fedldp.server.web.credentials``); each route lists every refusal it can answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response, status
from fastapi.responses import StreamingResponse

from fedldp.protocol.core import wire
from fedldp.protocol.core.base.records import IntArray
from fedldp.server.errors import (
    AdminKeyInvalid,
    AdminKeyRequired,
    BodyTooLarge,
    BudgetExceeded,
    DuplicateConflict,
    DuplicateKey,
    EnrollmentClosed,
    EnrollmentFull,
    EpsilonOutOfRange,
    FedldpError,
    InvalidEncoding,
    InvalidParams,
    InvalidPayload,
    InvalidRequest,
    InvalidToken,
    KeyUnavailable,
    LeaseExpired,
    NotFinished,
    NothingToLease,
    NotInCohort,
    NotLeased,
    ParticipantExists,
    PlanInfeasible,
    PopulationTooSmall,
    PredictionUnsupported,
    RoundClosed,
    StudyEnded,
    StudyExists,
    StudyMismatch,
    StudyNotEnrolling,
    StudyNotRunning,
    TokenRequired,
    UnknownParticipant,
    UnknownProtocol,
    UnknownRound,
    UnknownStudy,
    WrongRound,
)
from fedldp.server.runtime.context import Context
from fedldp.server.services import enrollment, ingest, leases, participants, streams, studies, tasks
from fedldp.server.services.grouping import ReportGrouper
from fedldp.server.web.binary import binary_form
from fedldp.server.web.bodies import documented, json_body
from fedldp.server.web.credentials import (
    PARTICIPANT_SCHEME,
    BlockBearer,
    LeaseBearer,
    ParticipantBearer,
    batch_credentials,
    enroll_credentials,
    report_credentials,
    require_admin,
    require_token,
)

__all__ = ["MAX_HOLD_S", "get_task", "report_body", "router", "submit_report"]

router = APIRouter()

MAX_HOLD_S = 10.0
"""Longest a task batch may be held back (well below the clients' read timeout)."""

_BODY = (InvalidEncoding, DuplicateKey, BodyTooLarge, InvalidRequest)
_ADMIN = (AdminKeyRequired, AdminKeyInvalid)
_TOKEN = (TokenRequired, InvalidToken)


def _refusals(*errors: type[FedldpError]) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route that may refuse with ``errors``: one per status, each
    listing its stable codes."""
    codes: dict[int, list[str]] = {}
    for error in errors:
        listed = codes.setdefault(error.status, [])
        if error.code not in listed:
            listed.append(error.code)
    return {
        status: {"model": wire.ErrorBody, "description": "refused: code " + ", ".join(found)}
        for status, found in sorted(codes.items())
    }


async def context(request: Request) -> Context:
    """The app's Context (a coroutine: FastAPI runs a plain function dependency in a worker
    thread, a round trip that cost every request more than this lookup)."""
    ctx: Context = request.app.state.ctx
    return ctx


Ctx = Annotated[Context, Depends(context)]
Admin = [Depends(require_admin)]

# Every integer a route reads from its path, query or headers is range-checked here, before it
# reaches the database (whose id, round and event columns are 32-bit): a 422 invalid_request,
# never a driver's overflow (tests/server/test_integers.py sends each one out-of-range values).
ParticipantId = Annotated[int, Path(ge=0, le=wire.MAX_ID)]
RoundIndex = Annotated[int, Path(ge=0, le=wire.MAX_ID)]


# The per-participant routes come first: the router tries routes in order, and these carry
# nearly every request of a running study (a tenth of their cost went to matching the others).
@router.get(
    "/v1/studies/{study_id}/participants/{participant_id}/task",
    response_model=wire.Task,
    responses=_refusals(*_TOKEN, UnknownStudy, UnknownParticipant, InvalidRequest),
    tags=["participants"],
)
async def get_task(
    study_id: str,
    participant_id: ParticipantId,
    ctx: Ctx,
    token: ParticipantBearer = None,
    hold: Annotated[
        float,
        Query(
            ge=0,
            le=MAX_HOLD_S,
            description="seconds to hold a 'wait' answer, answering as soon as the study moves on",
        ),
    ] = 0.0,
) -> wire.Task:
    """What the participant should do now: wait, report (round, broadcast, ε, and ``final``:
    no task in any later round), or nothing. ``hold=S`` (seconds) holds a "wait" answer and
    answers as soon as the study moves on (a round opens, the study starts or ends)."""
    return await tasks.task_when_ready(ctx, study_id, participant_id, require_token(token), hold)


@dataclass(frozen=True)
class TaskAsk:
    """A task batch request as the tasks service keeps it through a held poll: the participant
    ids as an array, and the credentials (without the ids). The wire model holds a list of
    Python ints (36 bytes each; its parsed JSON, its validated copy): at 10^7 users a thousand
    blocks' held requests in that form were a third of the server's peak (issue 27 item 4)."""

    ids: IntArray
    credentials: wire.Credentials


_task_batch_request = json_body(
    wire.TaskBatchRequest, batch_credentials, binary=binary_form("/tasks")
)


async def task_ask(request: Request) -> TaskAsk:
    """The body of ``POST .../tasks`` (``json_body``: the same refusals), as a ``TaskAsk``."""
    body = await _task_batch_request(request)
    credentials = wire.Credentials.model_construct(tokens=body.tokens, blocks=body.blocks)
    return TaskAsk(np.array(body.participant_ids, dtype=np.int64), credentials)


@router.post(
    "/v1/studies/{study_id}/tasks",
    responses=_refusals(*_BODY, *_TOKEN, UnknownStudy, UnknownParticipant),
    tags=["participants"],
    openapi_extra=documented(wire.TaskBatchRequest, binary=True),
)
async def get_tasks(
    study_id: str,
    body: Annotated[TaskAsk, Depends(task_ask)],
    ctx: Ctx,
    hold: Annotated[float, Query(ge=0, le=MAX_HOLD_S)] = 0.0,
    block: BlockBearer = None,
) -> wire.TaskBatch:
    """The tasks of many participants (with each one's token, or block tokens covering them).
    ``hold=S`` (seconds) holds the answer while none of them has a report task and some would
    wait, and answers as soon as the study moves on."""
    return await tasks.tasks_when_ready(ctx, study_id, body.ids, body.credentials, hold)


report_body = json_body(wire.ReportSubmit, report_credentials)
"""A single report's body, after its token (also called by fedldp.server.web.fastpath)."""

_REPORT = (
    *_TOKEN,
    UnknownStudy,
    UnknownParticipant,
    StudyNotRunning,
    RoundClosed,
    WrongRound,
    NotInCohort,
    BudgetExceeded,
    DuplicateConflict,
    InvalidPayload,
    KeyUnavailable,
)


@router.post(
    "/v1/studies/{study_id}/reports",
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {"model": wire.Receipt, "description": "a resend: the receipt it got the first time"},
        **_refusals(*_BODY, *_REPORT),
    },
    tags=["reports"],
    # the scheme declared by hand: a security dependency would cost the hot path a dependency
    # (report_credentials reads the header itself)
    openapi_extra=documented(wire.ReportSubmit, security=[{PARTICIPANT_SCHEME: []}]),
)
async def submit_report(
    study_id: str,
    body: Annotated[wire.ReportSubmit, Depends(report_body)],
    request: Request,
    response: Response,
) -> wire.Receipt:
    """One privatized report (idempotent: resending it returns the same receipt), with the
    participant's token as bearer. Concurrent reports are stored together, one transaction per
    group (fedldp.server.services.grouping)."""
    grouper: ReportGrouper = request.app.state.grouper
    receipt = await grouper.submit(study_id, body)
    response.status_code = status.HTTP_200_OK if receipt.duplicate else status.HTTP_201_CREATED
    return receipt


_report_batch = json_body(
    wire.ReportBatch,
    batch_credentials,
    binary=binary_form("/reports/batch", keep=frozenset({wire.ROWS_CONTEXT})),
)


@router.post(
    "/v1/studies/{study_id}/reports/batch",
    responses=_refusals(*_BODY, *_REPORT),
    tags=["reports"],
    openapi_extra=documented(wire.ReportBatch, binary=True),
)
def submit_reports(
    study_id: str,
    body: Annotated[wire.ReportBatch, Depends(_report_batch)],
    ctx: Ctx,
    block: BlockBearer = None,
) -> wire.BatchReceipt:
    """Many participants' privatized reports for one round (with each one's token, or block
    tokens covering them); rejected items are listed."""
    try:
        receipt = ingest.submit_batch(ctx, study_id, body)
    except FedldpError as exc:
        ctx.metrics.reports_refused(exc.code, len(body.participant_ids))
        raise
    ctx.metrics.batch(receipt)
    return receipt


@router.get("/health", tags=["service"])
def health(ctx: Ctx) -> wire.Health:
    from fedldp.server import __version__

    return wire.Health(status="ok", version=__version__, database=ctx.db.dialect)


@router.get("/v1/protocols", responses=_refusals(InvalidRequest), tags=["catalogue"])
def protocols(
    ctx: Ctx,
    epsilon: Annotated[
        float,
        Query(
            ge=wire.EPSILON_MIN,
            le=wire.EPSILON_MAX,
            description="the ε of every participant, for each protocol's minimum population",
        ),
    ] = 1.0,
) -> wire.ProtocolList:
    """The protocol catalogue: each protocol this server offers (``FEDLDP_PROTOCOLS``, else
    every installed one) with its origin and version, its parameter JSON schema, its broadcast
    fields and the smallest population it plans for at ``epsilon``; and the installed plugins
    it cannot serve (``broken``, with the reason)."""
    return studies.catalogue(ctx, epsilon)


@router.post(
    "/v1/studies",
    status_code=status.HTTP_201_CREATED,
    dependencies=Admin,
    responses=_refusals(
        *_ADMIN,
        *_BODY,
        UnknownProtocol,
        InvalidParams,
        PopulationTooSmall,
        StudyExists,
        StudyMismatch,
        KeyUnavailable,
    ),
    tags=["studies"],
    openapi_extra=documented(wire.StudyCreate),
)
def create_study(
    body: Annotated[wire.StudyCreate, Depends(json_body(wire.StudyCreate))], ctx: Ctx
) -> wire.StudyView:
    """Create a study (admin key needed when the server has one). A name already taken
    answers ``study_exists`` when the request declares what its creator did (protocol, params,
    seed, enrollment target, population digest, enrollment policy, quorum, round deadline, ε
    range: the request may join it), else
    ``study_mismatch`` naming the first field that differs."""
    return studies.create(ctx, body)


@router.get("/v1/studies", tags=["studies"])
def list_studies(ctx: Ctx) -> wire.StudyList:
    return wire.StudyList(studies=studies.list_all(ctx))


@router.get("/v1/studies/{study_id}", responses=_refusals(UnknownStudy), tags=["studies"])
def get_study(study_id: str, ctx: Ctx) -> wire.StudyView:
    """Phase and per-round progress (expected and received reports, time left)."""
    return studies.get(ctx, study_id)


@router.get(
    "/v1/studies/{study_id}/events",
    response_class=StreamingResponse,
    responses={
        **_refusals(UnknownStudy, InvalidRequest),
        200: {"content": {"text/event-stream": {}}},
    },
    tags=["studies"],
)
async def get_events(
    study_id: str,
    ctx: Ctx,
    last_event_id: Annotated[
        int | None,
        Header(alias="last-event-id", ge=0, le=wire.MAX_ID, description="resume after this event"),
    ] = None,
    after: Annotated[
        int | None,
        Query(ge=0, le=wire.MAX_ID, description="resume after this event (or Last-Event-ID)"),
    ] = None,
) -> StreamingResponse:
    """Server-Sent Events of the study (fedldp.protocol.core.wire.events): phase changes, rounds
    opened and closed with their outputs, the result, and ``progress`` snapshots of the
    counters. Resumes after ``Last-Event-ID`` (or ``after``; the header wins); ends once the
    study has ended."""
    start = last_event_id if last_event_id is not None else after or 0
    body = await streams.event_stream(ctx, study_id, start)
    return StreamingResponse(
        body,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.post(
    "/v1/studies/{study_id}/start",
    dependencies=Admin,
    responses=_refusals(*_ADMIN, UnknownStudy, StudyNotEnrolling, PlanInfeasible),
    tags=["studies"],
)
def start_study(study_id: str, ctx: Ctx) -> wire.StudyView:
    """Close enrollment, fix the plan and open the first round."""
    return studies.start(ctx, study_id)


@router.post(
    "/v1/studies/{study_id}/cancel",
    dependencies=Admin,
    responses=_refusals(*_ADMIN, UnknownStudy, StudyEnded),
    tags=["studies"],
)
def cancel_study(study_id: str, ctx: Ctx) -> wire.StudyView:
    return studies.cancel(ctx, study_id)


_ENROLL = _refusals(
    *_BODY,
    TokenRequired,
    NotLeased,
    UnknownStudy,
    LeaseExpired,
    StudyNotEnrolling,
    EnrollmentClosed,
    EnrollmentFull,
    ParticipantExists,
    EpsilonOutOfRange,
)


@router.post(
    "/v1/studies/{study_id}/participants",
    status_code=status.HTTP_201_CREATED,
    responses=_ENROLL,
    tags=["participants"],
    openapi_extra=documented(wire.EnrollRequest),
)
def enroll(
    study_id: str,
    body: Annotated[wire.EnrollRequest, Depends(json_body(wire.EnrollRequest, enroll_credentials))],
    ctx: Ctx,
    lease_token: LeaseBearer = None,
) -> wire.Enrollment:
    """Enroll one participant with its declared ε: its id and secret token. An explicit
    ``participant_id`` must lie in the caller's lease (its token as bearer). A study whose
    ``enrollment`` is ``leased`` (every study a swarm creates) enrolls only lease holders:
    anyone else is refused with 403 ``enrollment_closed`` (docs/clients.md, *Enrollment*)."""
    token = None if lease_token is None else lease_token.credentials
    enrolled = enrollment.enroll(
        ctx, study_id, [body.epsilon], [body.metadata], [body.participant_id], lease_token=token
    )
    return enrolled.enrollments[0]


_enroll_batch = json_body(
    wire.EnrollBatch, enroll_credentials, binary=binary_form("/participants/batch")
)


@router.post(
    "/v1/studies/{study_id}/participants/batch",
    status_code=status.HTTP_201_CREATED,
    responses=_ENROLL,
    tags=["participants"],
    openapi_extra=documented(wire.EnrollBatch, binary=True),
)
def enroll_batch(
    study_id: str,
    body: Annotated[wire.EnrollBatch, Depends(_enroll_batch)],
    ctx: Ctx,
    lease_token: LeaseBearer = None,
) -> wire.EnrollmentBatch:
    """Enroll many participants: their ids and tokens, and, when the ids are consecutive, the
    block token that stands for all of them on the batch endpoints (``block_only``: that alone).
    Explicit ``participant_ids`` must all lie in the caller's lease (its token as bearer)."""
    token = None if lease_token is None else lease_token.credentials
    return enrollment.enroll(
        ctx, study_id, *body.rows(), block_only=body.block_only, lease_token=token
    )


@router.post(
    "/v1/studies/{study_id}/leases",
    status_code=status.HTTP_201_CREATED,
    dependencies=Admin,
    responses=_refusals(*_ADMIN, *_BODY, UnknownStudy, StudyNotEnrolling, NothingToLease),
    tags=["participants"],
    openapi_extra=documented(wire.LeaseRequest),
)
def lease(
    study_id: str,
    body: Annotated[wire.LeaseRequest, Depends(json_body(wire.LeaseRequest))],
    ctx: Ctx,
) -> wire.Lease:
    """Reserve a block of participant ids for one swarm, with the token that enrolls them
    (explicit participant ids; nobody else can). The block expires unless all of it enrolls
    within the server's lease TTL; its ids then go to the next lease. Needs the admin key when
    the server has one."""
    return leases.grant(ctx, study_id, body.size)


@router.get("/v1/studies/{study_id}/rounds", responses=_refusals(UnknownStudy), tags=["results"])
def get_rounds(study_id: str, ctx: Ctx) -> wire.RoundsView:
    return studies.rounds_of(ctx, study_id)


@router.get(
    "/v1/studies/{study_id}/rounds/{index}",
    responses=_refusals(UnknownStudy, UnknownRound, InvalidRequest),
    tags=["results"],
)
def get_round(study_id: str, index: RoundIndex, ctx: Ctx) -> wire.RoundView:
    """A round's public broadcast and output."""
    return studies.round_of(ctx, study_id, index)


@router.get(
    "/v1/studies/{study_id}/result",
    responses=_refusals(UnknownStudy, NotFinished),
    tags=["results"],
)
def get_result(study_id: str, ctx: Ctx) -> wire.ResultView:
    """Estimate, error bar, diagnostics and ε summary of a finished study (409 before)."""
    return studies.result(ctx, study_id)


@router.get(
    "/v1/studies/{study_id}/epsilon",
    responses=_refusals(UnknownStudy, InvalidRequest),
    tags=["results"],
)
def get_epsilon(
    study_id: str, ctx: Ctx, bins: Annotated[int, Query(ge=1, le=200)] = 20
) -> wire.EpsilonLedgerView:
    """The ε ledger in aggregate: histograms of declared and spent ε over ``bins`` bins."""
    return studies.epsilon_ledger(ctx, study_id, bins)


@router.post(
    "/v1/studies/{study_id}/predict",
    responses=_refusals(*_BODY, UnknownStudy, NotFinished, PredictionUnsupported),
    tags=["results"],
    openapi_extra=documented(wire.PredictRequest),
)
def post_predict(
    study_id: str,
    body: Annotated[wire.PredictRequest, Depends(json_body(wire.PredictRequest))],
    ctx: Ctx,
) -> wire.PredictView:
    """Predictions of a finished user-classify or user-regress study for feature rows (at most
    10,000 per request; each row of the study's feature dimension, values in [0, 1] per axis,
    others clipped into it). 409 before the study finishes; 422 for other protocols."""
    return studies.predict(ctx, study_id, body)


@router.get(
    "/v1/studies/{study_id}/participants/{participant_id}/budget",
    responses=_refusals(*_TOKEN, UnknownStudy, UnknownParticipant, InvalidRequest),
    tags=["participants"],
)
def get_budget(
    study_id: str, participant_id: ParticipantId, ctx: Ctx, token: ParticipantBearer = None
) -> wire.BudgetView:
    """The participant's ε ledger: declared, planned per round, spent."""
    return participants.budget(ctx, study_id, participant_id, require_token(token))

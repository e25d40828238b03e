"""Shared steps of the server tests: drive studies over HTTP, inspect what the database holds."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import httpx
from fastapi import FastAPI

from fedldp.protocol.core.wire import (
    BatchReceipt,
    Enrollment,
    EnrollmentBatch,
    ErrorBody,
    RoundView,
    StudyView,
    TaskBatch,
)
from fedldp.server.runtime.context import Context
from fedldp.server.store import report_rows
from fedldp.server.store import repository as repo
from fedldp.server.store.tables import utcnow

__all__ = [
    "app_context",
    "batch_tasks",
    "create_study",
    "enroll",
    "expect_error",
    "expire_enrollment",
    "expire_round",
    "report_count",
    "round_of",
    "start",
    "stored_report",
    "submit_batch",
]


def app_context(app: FastAPI) -> Context:
    ctx: Context = app.state.ctx
    return ctx


def expect_error(response: httpx.Response, status: int, code: str) -> ErrorBody:
    """The error body of ``response``, after checking its status and stable code."""
    assert response.status_code == status, (response.status_code, response.text)
    body = ErrorBody.model_validate_json(response.content)
    assert body.code == code, body
    assert body.detail
    return body


async def create_study(
    client: httpx.AsyncClient,
    protocol: str,
    params: dict[str, Any] | None = None,
    *,
    seed: int = 7,
    headers: dict[str, str] | None = None,
    **fields: Any,
) -> StudyView:
    body = {"protocol": protocol, "params": params or {}, "seed": seed, **fields}
    response = await client.post("/v1/studies", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return StudyView.model_validate_json(response.content)


async def enroll(
    client: httpx.AsyncClient, study_id: str, epsilons: Sequence[float]
) -> list[Enrollment]:
    body = {"participants": [{"epsilon": e} for e in epsilons]}
    response = await client.post(f"/v1/studies/{study_id}/participants/batch", json=body)
    assert response.status_code == 201, response.text
    return EnrollmentBatch.model_validate_json(response.content).enrollments


async def start(client: httpx.AsyncClient, study_id: str) -> StudyView:
    response = await client.post(f"/v1/studies/{study_id}/start")
    assert response.status_code == 200, response.text
    return StudyView.model_validate_json(response.content)


async def submit_batch(
    client: httpx.AsyncClient,
    study_id: str,
    round_index: int,
    kind: str,
    enrollments: Sequence[Enrollment],
    payloads: Sequence[Sequence[float]],
) -> BatchReceipt:
    body = {
        "round": round_index,
        "kind": kind,
        "participant_ids": [e.participant_id for e in enrollments],
        "tokens": [e.token for e in enrollments],
        "payloads": [list(p) for p in payloads],
    }
    response = await client.post(f"/v1/studies/{study_id}/reports/batch", json=body)
    assert response.status_code == 200, response.text
    return BatchReceipt.model_validate_json(response.content)


async def batch_tasks(
    client: httpx.AsyncClient, study_id: str, people: Sequence[Enrollment]
) -> TaskBatch:
    """The batch task answer for ``people`` (their ids and tokens in one request; 200 or fail)."""
    response = await client.post(
        f"/v1/studies/{study_id}/tasks",
        json={
            "participant_ids": [e.participant_id for e in people],
            "tokens": [e.token for e in people],
        },
    )
    assert response.status_code == 200, response.text
    return TaskBatch.model_validate_json(response.content)


async def round_of(client: httpx.AsyncClient, study_id: str, index: int) -> RoundView:
    response = await client.get(f"/v1/studies/{study_id}/rounds/{index}")
    assert response.status_code == 200, response.text
    return RoundView.model_validate_json(response.content)


def report_count(ctx: Context, study_id: str, round_index: int | None = None) -> int:
    """Reports stored in the database for the study (in one round, if given)."""
    with ctx.transaction() as session:
        return report_rows.count_reports(session, study_id, round_index)


def stored_report(
    ctx: Context, study_id: str, round_index: int, participant_id: int
) -> tuple[bytes, str] | None:
    """(payload bytes, receipt digest) of a stored report, or None."""
    with ctx.transaction() as session:
        found = [
            s
            for s in report_rows.list_reports(session, study_id)
            if (s.round, s.participant_id) == (round_index, participant_id)
        ]
        if not found:
            return None
        r = repo.get_round(session, study_id, round_index)
        assert r is not None
        receipts = report_rows.existing_reports(
            session, study_id, round_index, r.payload_kind, [participant_id]
        )
    return found[0].payload, receipts[participant_id][0]


def expire_round(ctx: Context, study_id: str, index: int) -> None:
    """Move the round's deadline into the past (what waiting for it would do)."""
    with ctx.transaction() as session:
        repo.update_round(session, study_id, index, deadline=utcnow() - timedelta(seconds=1))


def expire_enrollment(ctx: Context, study_id: str) -> None:
    with ctx.transaction() as session:
        repo.set_study(session, study_id, enrollment_deadline=utcnow() - timedelta(seconds=1))

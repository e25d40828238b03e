"""Report ingestion, tasks and the ledger (server/services/participants.py), over HTTP.

Every refusal is checked on its stable code and status AND on the database: a refused report
leaves no row and does not move the round's counter.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from fedldp.protocol.core.wire import (
    MAX_BLOCKS,
    BatchReceipt,
    BlockToken,
    BudgetView,
    Enrollment,
    EnrollmentBatch,
    Receipt,
    ResultView,
    StudyView,
    TaskBatch,
    TaskReport,
    pack_rows,
)
from fedldp.server.runtime.context import Context
from tests.server.helpers import (
    app_context,
    create_study,
    enroll,
    expect_error,
    expire_round,
    report_count,
    round_of,
    start,
    stored_report,
    submit_batch,
)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def report(e: Enrollment, payload: dict[str, Any], round_index: int = 0) -> dict[str, Any]:
    return {
        "participant_id": e.participant_id,
        "token": e.token,
        "round": round_index,
        "payload": payload,
    }


BIT_UP = {"kind": "bit", "bit": 1}
BIT_DOWN = {"kind": "bit", "bit": -1}


@dataclass
class Running:
    """A started study and what the tests need to talk to it."""

    client: httpx.AsyncClient
    ctx: Context
    study: StudyView
    people: list[Enrollment]

    @property
    def reports(self) -> str:
        return f"/v1/studies/{self.study.id}/reports"

    async def received(self, round_index: int = 0) -> int:
        return (await round_of(self.client, self.study.id, round_index)).received

    def stored(self, round_index: int | None = None) -> int:
        return report_count(self.ctx, self.study.id, round_index)


@pytest.fixture
async def rr(client: httpx.AsyncClient, app: FastAPI) -> Running:
    """hetero-mean-rr (one round, a ±1 bit from everyone) with four participants, started."""
    study = await create_study(client, "hetero-mean-rr")
    people = await enroll(client, study.id, [1.0, 1.0, 0.5, 2.0])
    await start(client, study.id)
    return Running(client, app_context(app), study, people)


@dataclass
class TwoStage(Running):
    stage_one: list[Enrollment]
    stage_two: list[Enrollment]


@pytest.fixture
async def two_stage(client: httpx.AsyncClient, app: FastAPI) -> TwoStage:
    """user-mean (stage one: histograms of one bin, stage two: scalars) with 12 participants."""
    study = await create_study(client, "user-mean", {"samples_per_user": 4})
    people = await enroll(client, study.id, [1.0] * 12)
    await start(client, study.id)
    answer = await client.post(
        f"/v1/studies/{study.id}/tasks",
        json={
            "participant_ids": [e.participant_id for e in people],
            "tokens": [e.token for e in people],
        },
    )
    tasks = TaskBatch.model_validate_json(answer.content).items()
    first = {t.participant_id for t in tasks if isinstance(t.task, TaskReport)}
    one = [e for e in people if e.participant_id in first]
    two = [e for e in people if e.participant_id not in first]
    assert len(one) == len(two) == 6
    return TwoStage(client, app_context(app), study, people, one, two)


async def finish_stage_one(s: TwoStage) -> None:
    receipt = await submit_batch(
        s.client, s.study.id, 0, "histogram", s.stage_one, [[0.5]] * len(s.stage_one)
    )
    assert receipt.accepted + receipt.duplicates == len(s.stage_one)
    assert (await round_of(s.client, s.study.id, 0)).status == "closed"


# --------------------------------------------------------------------------- duplicates


async def test_identical_resend_is_idempotent(rr: Running) -> None:
    body = report(rr.people[0], BIT_UP)
    first = await rr.client.post(rr.reports, json=body)
    assert first.status_code == 201
    again = await rr.client.post(rr.reports, json=body)
    assert again.status_code == 200
    a, b = Receipt.model_validate_json(first.content), Receipt.model_validate_json(again.content)
    assert (a.duplicate, b.duplicate) == (False, True)
    assert b.digest == a.digest
    assert b.received_at == a.received_at
    assert rr.stored() == 1
    assert await rr.received() == 1


async def test_batch_resend_counts_duplicates_once(rr: Running) -> None:
    sent = await submit_batch(rr.client, rr.study.id, 0, "bit", rr.people[:2], [[1.0], [-1.0]])
    assert (sent.accepted, sent.duplicates) == (2, 0)
    again = await submit_batch(rr.client, rr.study.id, 0, "bit", rr.people[:2], [[1.0], [-1.0]])
    assert (again.accepted, again.duplicates, again.rejected) == (0, 2, 0)
    assert rr.stored() == 2
    assert await rr.received() == 2
    single = await rr.client.post(rr.reports, json=report(rr.people[1], BIT_DOWN))
    assert single.status_code == 200
    assert Receipt.model_validate_json(single.content).duplicate


async def test_different_second_report_is_a_conflict_and_changes_nothing(rr: Running) -> None:
    first = await rr.client.post(rr.reports, json=report(rr.people[0], BIT_UP))
    kept = stored_report(rr.ctx, rr.study.id, 0, 0)
    assert kept is not None
    assert first.status_code == 201

    expect_error(
        await rr.client.post(rr.reports, json=report(rr.people[0], BIT_DOWN)),
        409,
        "duplicate_conflict",
    )
    assert stored_report(rr.ctx, rr.study.id, 0, 0) == kept
    assert Receipt.model_validate_json(first.content).digest == kept[1]
    assert rr.stored() == 1
    assert await rr.received() == 1

    # In a batch only the conflicting item is refused; the others go in.
    batch = await submit_batch(rr.client, rr.study.id, 0, "bit", rr.people[:2], [[-1.0], [1.0]])
    assert (batch.accepted, batch.duplicates, batch.rejected) == (1, 0, 1)
    assert [(i.participant_id, i.status, i.code) for i in batch.items] == [
        (0, "rejected", "duplicate_conflict")
    ]
    assert stored_report(rr.ctx, rr.study.id, 0, 0) == kept
    assert rr.stored() == 2
    assert await rr.received() == 2


async def test_concurrent_reports_are_all_stored_and_counted(rr: Running) -> None:
    # A bigger cohort than the fixture's, all reporting at once (one request each).
    study = await create_study(rr.client, "hetero-mean-rr")
    people = await enroll(rr.client, study.id, [1.0] * 40)
    await start(rr.client, study.id)
    url = f"/v1/studies/{study.id}/reports"
    answers = await asyncio.gather(
        *(rr.client.post(url, json=report(e, BIT_UP)) for e in people[:39])
    )
    assert sorted({a.status_code for a in answers}) == [201]
    assert report_count(rr.ctx, study.id, 0) == 39
    assert (await round_of(rr.client, study.id, 0)).received == 39
    last = await rr.client.post(url, json=report(people[39], BIT_DOWN))
    assert last.status_code == 201
    result = ResultView.model_validate_json(
        (await rr.client.get(f"/v1/studies/{study.id}/result")).content
    )
    assert result.phase == "finished"
    assert result.diagnostics["n_reports"] == 40


# --------------------------------------------------------------------------- rounds


async def test_report_for_a_closed_round_is_refused(two_stage: TwoStage) -> None:
    s = two_stage
    await finish_stage_one(s)
    late = s.stage_one[0]  # a report other than the one it sent (an identical resend gets
    # its stored receipt: test_identical_resend_after_the_study_ended_gets_its_receipt)
    expect_error(
        await s.client.post(s.reports, json=report(late, {"kind": "histogram", "values": [0.25]})),
        409,
        "round_closed",
    )
    batch = await s.client.post(
        f"{s.reports}/batch",
        json={
            "round": 0,
            "kind": "histogram",
            "participant_ids": [late.participant_id],
            "tokens": [late.token],
            "payloads": [[0.25]],
        },
    )
    expect_error(batch, 409, "round_closed")
    assert s.stored(0) == 6
    assert await s.received(0) == 6
    assert s.stored(1) == 0


async def test_report_for_a_round_not_open_yet_is_refused(two_stage: TwoStage) -> None:
    s = two_stage
    early = s.stage_two[0]
    for round_index in (1, 2, 10**6, 2**31 - 1):
        expect_error(
            await s.client.post(
                s.reports, json=report(early, {"kind": "scalar", "value": 0.1}, round_index)
            ),
            409,
            "wrong_round",
        )
    for round_index in (2**31, 2**64):  # beyond any round index the schema admits
        expect_error(
            await s.client.post(
                s.reports, json=report(early, {"kind": "scalar", "value": 0.1}, round_index)
            ),
            422,
            "invalid_request",
        )
    assert s.stored() == 0
    assert await s.received(1) == 0


async def test_participant_outside_the_cohort_is_refused(two_stage: TwoStage) -> None:
    s = two_stage
    outsider = s.stage_two[0]
    expect_error(
        await s.client.post(
            s.reports, json=report(outsider, {"kind": "histogram", "values": [0.5]})
        ),
        409,
        "not_in_cohort",
    )
    batch = await submit_batch(
        s.client, s.study.id, 0, "histogram", [s.stage_one[0], outsider], [[0.5], [0.5]]
    )
    assert (batch.accepted, batch.rejected) == (1, 1)
    assert [(i.participant_id, i.code) for i in batch.items] == [
        (outsider.participant_id, "not_in_cohort")
    ]
    assert stored_report(s.ctx, s.study.id, 0, outsider.participant_id) is None
    assert s.stored() == 1
    assert await s.received(0) == 1

    # Stage two then takes only its own cohort.
    await finish_stage_one(s)
    expect_error(
        await s.client.post(
            s.reports, json=report(s.stage_one[1], {"kind": "scalar", "value": 0.1}, 1)
        ),
        409,
        "not_in_cohort",
    )
    assert s.stored(1) == 0


# --------------------------------------------------------------------------- payloads


async def test_payload_of_the_wrong_kind_is_refused(rr: Running) -> None:
    expect_error(
        await rr.client.post(rr.reports, json=report(rr.people[0], {"kind": "scalar", "value": 1})),
        422,
        "invalid_payload",
    )
    batch = await rr.client.post(
        f"{rr.reports}/batch",
        json={
            "round": 0,
            "kind": "scalar",
            "participant_ids": [0, 1],
            "tokens": [rr.people[0].token, rr.people[1].token],
            "payloads": [[1.0], [1.0]],
        },
    )
    expect_error(batch, 422, "invalid_payload")
    assert rr.stored() == 0
    assert await rr.received() == 0


async def test_payload_of_the_wrong_shape_is_refused(rr: Running) -> None:
    receipt = await submit_batch(
        rr.client, rr.study.id, 0, "bit", rr.people[:3], [[1.0, 1.0], [], [1.0]]
    )
    assert (receipt.accepted, receipt.rejected) == (1, 2)
    assert [(i.participant_id, i.code) for i in receipt.items] == [
        (0, "invalid_payload"),
        (1, "invalid_payload"),
    ]
    assert rr.stored() == 1
    assert stored_report(rr.ctx, rr.study.id, 0, 2) is not None


async def test_payload_outside_the_mechanisms_range_is_refused(rr: Running) -> None:
    # BitPayload only admits ±1, so a bit of 0.5 is refused by the wire schema...
    expect_error(
        await rr.client.post(rr.reports, json=report(rr.people[0], {"kind": "bit", "bit": 0.5})),
        422,
        "invalid_request",
    )
    # ...and by the protocol's own check when it comes through the columnar batch.
    receipt = await submit_batch(
        rr.client, rr.study.id, 0, "bit", rr.people[:3], [[0.5], [1.0], [-2.0]]
    )
    assert (receipt.accepted, receipt.rejected) == (1, 2)
    assert {(i.participant_id, i.status, i.code) for i in receipt.items} == {
        (0, "rejected", "invalid_payload"),
        (2, "rejected", "invalid_payload"),
    }
    assert stored_report(rr.ctx, rr.study.id, 0, 0) is None
    assert stored_report(rr.ctx, rr.study.id, 0, 2) is None
    assert rr.stored() == 1
    assert await rr.received() == 1


async def test_index_sign_outside_the_sketch_is_refused(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    study = await create_study(client, "hetero-frequency", {"domain_size": 4})
    people = await enroll(client, study.id, [1.0] * 3)
    started = await start(client, study.id)
    m = int((await round_of(client, study.id, 0)).broadcast["m"])  # type: ignore[index]
    url = f"/v1/studies/{started.id}/reports"
    for index in (m, m + 7):
        expect_error(
            await client.post(
                url, json=report(people[0], {"kind": "index-sign", "index": index, "sign": 1})
            ),
            422,
            "invalid_payload",
        )
    accepted = await client.post(
        url, json=report(people[0], {"kind": "index-sign", "index": m - 1, "sign": -1})
    )
    assert accepted.status_code == 201
    assert report_count(app_context(app), study.id) == 1


@pytest.mark.parametrize(
    ("where", "raw"),
    [
        (
            "single",
            b'{"participant_id": 0, "token": "TOKEN", "round": 0,'
            b' "payload": {"kind": "scalar", "value": NaN}}',
        ),
        (
            "single",
            b'{"participant_id": 0, "token": "TOKEN", "round": 0,'
            b' "payload": {"kind": "vector", "values": [0.1, -Infinity]}}',
        ),
        (
            "batch",
            b'{"round": 0, "kind": "bit", "participant_ids": [0], "tokens": ["TOKEN"],'
            b' "payloads": [[NaN]]}',
        ),
        (
            "batch",
            b'{"round": 0, "kind": "bit", "participant_ids": [0], "tokens": ["TOKEN"],'
            b' "payloads": [[Infinity]]}',
        ),
        (
            "batch",
            b'{"round": 0, "kind": "bit", "participant_ids": [0], "tokens": ["TOKEN"],'
            b' "payloads": [[1e999]]}',
        ),
    ],
)
async def test_non_finite_numbers_are_refused_by_the_wire_schema(
    rr: Running, where: str, raw: bytes
) -> None:
    url = rr.reports if where == "single" else f"{rr.reports}/batch"
    response = await rr.client.post(
        url,
        content=raw.replace(b"TOKEN", rr.people[0].token.encode()),
        headers={"Content-Type": "application/json"},
    )
    expect_error(response, 422, "invalid_request")
    assert rr.stored() == 0
    assert await rr.received() == 0


# --------------------------------------------------------------------------- who is asking


async def test_unknown_participant_is_refused(rr: Running) -> None:
    token = rr.people[0].token
    for pid in (4, 10**6, 2**31 - 1):  # a report's token is checked first: none is valid
        expect_error(
            await rr.client.post(
                rr.reports,
                json={"participant_id": pid, "token": token, "round": 0, "payload": BIT_UP},
            ),
            401,
            "invalid_token",
        )
    expect_error(  # beyond any participant id the schema admits
        await rr.client.post(
            rr.reports,
            json={"participant_id": 2**64, "token": token, "round": 0, "payload": BIT_UP},
        ),
        422,
        "invalid_request",
    )
    # an id in the range of ids that names nobody; one outside it (the path's bounds, as the
    # body's) is refused before the lookup
    for pid, status, code in ((4, 404, "unknown_participant"), (-1, 422, "invalid_request")):
        for what in ("task", "budget"):
            expect_error(
                await rr.client.get(
                    f"/v1/studies/{rr.study.id}/participants/{pid}/{what}", headers=bearer(token)
                ),
                status,
                code,
            )
    expect_error(
        await rr.client.post(
            f"/v1/studies/{rr.study.id}/tasks",
            json={"participant_ids": [0, 4], "tokens": [token] * 2},
        ),
        404,
        "unknown_participant",
    )
    batch = await rr.client.post(
        f"{rr.reports}/batch",
        json={
            "round": 0,
            "kind": "bit",
            "participant_ids": [0, 4, 2**31 - 1],
            "tokens": [token] * 3,
            "payloads": [[1.0]] * 3,
        },
    )
    receipt = BatchReceipt.model_validate_json(batch.content)
    assert (receipt.accepted, receipt.rejected) == (1, 2)
    assert [(i.participant_id, i.code) for i in receipt.items] == [
        (4, "unknown_participant"),
        (2**31 - 1, "unknown_participant"),
    ]
    assert rr.stored() == 1


async def test_bad_token_is_refused(rr: Running) -> None:
    other = rr.people[1].token
    task_url = f"/v1/studies/{rr.study.id}/participants/0/task"
    budget_url = f"/v1/studies/{rr.study.id}/participants/0/budget"
    expect_error(await rr.client.get(task_url, headers=bearer(other)), 401, "invalid_token")
    expect_error(await rr.client.get(budget_url, headers=bearer(other)), 401, "invalid_token")
    for headers in (
        {},
        bearer(""),
        {"Authorization": rr.people[0].token},  # no scheme
        {"Authorization": f"Basic {rr.people[0].token}"},
    ):  # no bearer token at all
        expect_error(await rr.client.get(task_url, headers=headers), 401, "token_required")
        expect_error(await rr.client.get(budget_url, headers=headers), 401, "token_required")
    for wrong in (other, "\u00e9t\u00e9"):  # a non-ASCII token is just as wrong
        expect_error(
            await rr.client.post(
                f"/v1/studies/{rr.study.id}/tasks", json={"participant_ids": [0], "tokens": [wrong]}
            ),
            401,
            "invalid_token",
        )
        expect_error(
            await rr.client.post(
                rr.reports,
                json={"participant_id": 0, "token": wrong, "round": 0, "payload": BIT_UP},
            ),
            401,
            "invalid_token",
        )
    receipt = await submit_batch(
        rr.client,
        rr.study.id,
        0,
        "bit",
        [rr.people[0], Enrollment(participant_id=1, token=rr.people[0].token)],
        [[1.0], [1.0]],
    )
    assert [(i.participant_id, i.code) for i in receipt.items] == [(1, "invalid_token")]
    assert stored_report(rr.ctx, rr.study.id, 0, 1) is None
    assert rr.stored() == 1
    # A token of another study is no good here either.
    other_study = await create_study(rr.client, "hetero-mean-rr")
    (stranger,) = await enroll(rr.client, other_study.id, [1.0])
    assert stranger.participant_id == 0
    expect_error(
        await rr.client.get(task_url, headers=bearer(stranger.token)), 401, "invalid_token"
    )


@pytest.fixture
async def blocks(client: httpx.AsyncClient, app: FastAPI) -> tuple[Running, list[BlockToken]]:
    """hetero-mean-rr with six participants enrolled in two batches of three, started: the
    batches' block tokens stand for participants 0-2 and 3-5."""
    study = await create_study(client, "hetero-mean-rr")
    answers = [
        EnrollmentBatch.model_validate_json(
            (
                await client.post(
                    f"/v1/studies/{study.id}/participants/batch", json={"epsilons": [1.0] * 3}
                )
            ).content
        )
        for _ in range(2)
    ]
    await start(client, study.id)
    people = [e for a in answers for e in a.enrollments]
    tokens = [a.block for a in answers if a.block is not None]
    assert [(b.start, b.stop) for b in tokens] == [(0, 3), (3, 6)]
    return Running(client, app_context(app), study, people), tokens


def block_json(block: BlockToken, **change: Any) -> dict[str, Any]:
    return block.model_dump() | change


async def test_block_tokens_stand_for_exactly_their_participants(
    blocks: tuple[Running, list[BlockToken]],
) -> None:
    rr, (low, high) = blocks
    tasks_url = f"/v1/studies/{rr.study.id}/tasks"
    both = {"participant_ids": list(range(6)), "blocks": [block_json(low), block_json(high)]}
    answer = TaskBatch.model_validate_json((await rr.client.post(tasks_url, json=both)).content)
    assert [i.participant_id for i in answer.items()] == list(range(6))
    assert all(isinstance(i.task, TaskReport) for i in answer.items())

    other = await create_study(rr.client, "hetero-mean-rr")
    stranger = EnrollmentBatch.model_validate_json(
        (
            await rr.client.post(
                f"/v1/studies/{other.id}/participants/batch", json={"epsilons": [1.0] * 6}
            )
        ).content
    ).block
    assert stranger is not None
    refused = [
        {"participant_ids": [0, 3], "blocks": [block_json(low)]},  # 3 is not in the block
        {"participant_ids": [0], "blocks": [block_json(low, stop=6)]},  # a block it was not for
        {"participant_ids": [0], "blocks": [block_json(low, start=1)]},
        {"participant_ids": [0], "blocks": [block_json(low, token=high.token)]},
        {"participant_ids": [0], "blocks": [block_json(stranger)]},  # another study's
        {"participant_ids": [0], "blocks": [block_json(low, token="\u00e9t\u00e9")]},
    ]
    for body in refused:
        expect_error(await rr.client.post(tasks_url, json=body), 401, "invalid_token")
    expect_error(
        await rr.client.post(
            tasks_url, json={"participant_ids": [0, 6], "blocks": [block_json(low)]}
        ),
        404,
        "unknown_participant",
    )

    forged = block_json(high, token=low.token)
    receipt = BatchReceipt.model_validate_json(
        (
            await rr.client.post(
                f"{rr.reports}/batch",
                json={
                    "round": 0,
                    "kind": "bit",
                    "participant_ids": list(range(6)),
                    "blocks": [block_json(low), forged],
                    "payloads": [[1.0]] * 6,
                },
            )
        ).content
    )
    assert (receipt.accepted, receipt.rejected) == (3, 3)
    assert [(i.participant_id, i.code) for i in receipt.items] == [
        (3, "invalid_token"),
        (4, "invalid_token"),
        (5, "invalid_token"),
    ]
    assert rr.stored() == 3
    assert await rr.received() == 3


async def test_a_batch_under_block_tokens_finishes_and_resends_as_duplicates(
    blocks: tuple[Running, list[BlockToken]],
) -> None:
    rr, tokens = blocks
    body = {
        "round": 0,
        "kind": "bit",
        "participant_ids": list(range(6)),
        "blocks": [block_json(b) for b in tokens],
        "payloads": [[1.0], [-1.0]] * 3,
    }
    first = BatchReceipt.model_validate_json(
        (await rr.client.post(f"{rr.reports}/batch", json=body)).content
    )
    assert (first.accepted, first.duplicates, first.rejected) == (6, 0, 0)
    result = ResultView.model_validate_json(
        (await rr.client.get(f"/v1/studies/{rr.study.id}/result")).content
    )
    assert result.phase == "finished"
    again = await rr.client.post(f"{rr.reports}/batch", json=body)  # a lost answer, resent
    assert BatchReceipt.model_validate_json(again.content).duplicates == 6
    body["blocks"] = [block_json(tokens[0])]  # the same reports, not all authorised
    expect_error(await rr.client.post(f"{rr.reports}/batch", json=body), 409, "study_not_running")


async def test_batch_credentials_are_tokens_or_blocks(
    blocks: tuple[Running, list[BlockToken]],
) -> None:
    rr, (low, _) = blocks
    token = rr.people[0].token
    for uncredited in ({"participant_ids": [0]}, {"participant_ids": [0], "tokens": None}):
        expect_error(  # no credentials: 401 before any detail of the body
            await rr.client.post(f"/v1/studies/{rr.study.id}/tasks", json=uncredited),
            401,
            "token_required",
        )
    cases: list[dict[str, Any]] = [
        {"participant_ids": [0], "tokens": [token], "blocks": [block_json(low)]},
        {"participant_ids": [0], "blocks": []},
        {"participant_ids": [0], "blocks": [block_json(low, stop=0)]},
        {"participant_ids": [0], "blocks": [block_json(low, stop=2**31 + 1)]},
        {"participant_ids": [0], "blocks": [block_json(low)] * (MAX_BLOCKS + 1)},
        {"participant_ids": [0], "blocks": [{"start": 0, "stop": 3}]},
    ]
    for case in cases:
        expect_error(
            await rr.client.post(f"/v1/studies/{rr.study.id}/tasks", json=case),
            422,
            "invalid_request",
        )
        report = {"round": 0, "kind": "bit", "payloads": [[1.0]], **case}
        expect_error(
            await rr.client.post(f"{rr.reports}/batch", json=report), 422, "invalid_request"
        )
    assert rr.stored() == 0


async def test_packed_payloads_are_stored_like_listed_ones(rr: Running) -> None:
    """The packed form stores the same bytes under the same digest: a listed resend of packed
    reports is a duplicate, and a wrong width is refused report by report as in lists."""
    people = rr.people
    body: dict[str, Any] = {
        "round": 0,
        "kind": "bit",
        "participant_ids": [0, 1],
        "tokens": [people[0].token, people[1].token],
        "packed": pack_rows(np.array([[1.0], [-1.0]])),
    }
    first = await rr.client.post(f"{rr.reports}/batch", json=body)
    assert BatchReceipt.model_validate_json(first.content).accepted == 2
    stored = stored_report(rr.ctx, rr.study.id, 0, 1)
    assert stored is not None
    assert stored[0] == np.array([-1.0]).astype("<f8").tobytes()
    listed = body | {"packed": None, "payloads": [[1.0], [-1.0]]}
    again = BatchReceipt.model_validate_json(
        (await rr.client.post(f"{rr.reports}/batch", json=listed)).content
    )
    assert (again.accepted, again.duplicates) == (0, 2)
    wide = body | {
        "participant_ids": [2, 3],
        "tokens": [people[2].token, people[3].token],
        "packed": pack_rows(np.array([[1.0, 1.0], [1.0, 1.0]])),
    }
    refused = BatchReceipt.model_validate_json(
        (await rr.client.post(f"{rr.reports}/batch", json=wide)).content
    )
    assert [(i.participant_id, i.code) for i in refused.items] == [
        (2, "invalid_payload"),
        (3, "invalid_payload"),
    ]
    for bad in ("not base64!", pack_rows(np.array([np.nan, 1.0])), pack_rows(np.ones(3))):
        expect_error(
            await rr.client.post(f"{rr.reports}/batch", json=body | {"packed": bad}),
            422,
            "invalid_request",
        )
    assert rr.stored() == 2
    assert await rr.received() == 2


async def test_malformed_batches_are_refused_whole(rr: Running) -> None:
    people = rr.people
    cases: list[dict[str, Any]] = [
        {"participant_ids": [0, 1], "tokens": [people[0].token], "payloads": [[1.0], [1.0]]},
        {
            "participant_ids": [0, 1],
            "tokens": [people[0].token, people[1].token],
            "payloads": [[1.0]],
        },
        {"participant_ids": [0, 0], "tokens": [people[0].token] * 2, "payloads": [[1.0], [1.0]]},
    ]
    for case in cases:
        response = await rr.client.post(
            f"{rr.reports}/batch", json={"round": 0, "kind": "bit", **case}
        )
        expect_error(response, 422, "invalid_request")
    expect_error(
        await rr.client.post(
            f"/v1/studies/{rr.study.id}/tasks",
            json={"participant_ids": [0, 1], "tokens": [people[0].token]},
        ),
        422,
        "invalid_request",
    )
    assert rr.stored() == 0


async def test_report_to_a_study_not_running_is_refused(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    study = await create_study(client, "hetero-mean-rr")
    (person,) = await enroll(client, study.id, [1.0])
    expect_error(
        await client.post(f"/v1/studies/{study.id}/reports", json=report(person, BIT_UP)),
        409,
        "study_not_running",
    )
    assert report_count(app_context(app), study.id) == 0


async def test_identical_resend_after_the_study_ended_gets_its_receipt(rr: Running) -> None:
    """An answer lost in a crash: the report completed the round (and the study); resending
    it must not fail the participant, and a different report still must."""
    bits = [[1.0], [-1.0], [1.0], [1.0]]
    sent = await submit_batch(rr.client, rr.study.id, 0, "bit", rr.people, bits)
    assert sent.accepted == 4
    assert (await rr.client.get(f"/v1/studies/{rr.study.id}/result")).status_code == 200
    first = stored_report(rr.ctx, rr.study.id, 0, 0)
    again = await rr.client.post(rr.reports, json=report(rr.people[0], BIT_UP))
    assert again.status_code == 200
    receipt = Receipt.model_validate_json(again.content)
    assert receipt.duplicate
    assert first is not None
    assert receipt.digest == first[1]
    batch = await submit_batch(rr.client, rr.study.id, 0, "bit", rr.people, bits)
    assert (batch.accepted, batch.duplicates, batch.rejected) == (0, 4, 0)
    expect_error(
        await rr.client.post(rr.reports, json=report(rr.people[1], BIT_UP)),
        409,
        "study_not_running",
    )
    changed = await rr.client.post(
        f"{rr.reports}/batch",
        json={
            "round": 0,
            "kind": "bit",
            "participant_ids": [0, 1],
            "tokens": [rr.people[0].token, rr.people[1].token],
            "payloads": [[1.0], [1.0]],
        },
    )
    expect_error(changed, 409, "study_not_running")
    empty = await rr.client.post(
        f"{rr.reports}/batch",
        json={
            "round": 0,
            "kind": "bit",
            "participant_ids": [0],
            "tokens": [rr.people[0].token],
            "payloads": [[]],
        },
    )
    expect_error(empty, 409, "study_not_running")
    assert rr.stored() == 4


async def test_reports_after_the_deadline_are_refused_before_the_sweep(rr: Running) -> None:
    await rr.client.post(rr.reports, json=report(rr.people[0], BIT_UP))
    expire_round(rr.ctx, rr.study.id, 0)  # late, but the sweeper has not closed it yet
    assert (await round_of(rr.client, rr.study.id, 0)).status == "open"
    expect_error(
        await rr.client.post(rr.reports, json=report(rr.people[1], BIT_UP)), 409, "round_closed"
    )
    assert rr.stored() == 1


async def test_concurrent_single_reports_are_grouped_without_mixing_outcomes(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    """Single reports sent at once are stored together (fedldp.server.services.grouping); each still
    gets its own outcome: a bad token, a wrong kind or a conflicting second report refuses only
    itself, and a participant's identical report sent twice at once is stored once."""
    study = await create_study(client, "hetero-mean-rr")
    people = await enroll(client, study.id, [1.0] * 30)
    await start(client, study.id)
    ctx = app_context(app)
    url = f"/v1/studies/{study.id}/reports"
    bodies = [report(p, BIT_UP if p.participant_id % 2 else BIT_DOWN) for p in people[:25]]
    bodies.append({**report(people[25], BIT_UP), "token": people[0].token})  # not its token
    bodies.append(report(people[26], {"kind": "scalar", "value": 0.5}))  # wrong kind
    bodies += [report(people[27], BIT_UP)] * 2  # the same report twice at once
    bodies += [report(people[28], BIT_UP), report(people[28], BIT_DOWN)]  # two different ones
    answers = await asyncio.gather(*(client.post(url, json=b) for b in bodies))
    codes = [a.status_code for a in answers]
    assert codes[:25] == [201] * 25
    expect_error(answers[25], 401, "invalid_token")
    expect_error(answers[26], 422, "invalid_payload")
    assert sorted(codes[27:29]) == [200, 201]
    twice = [Receipt.model_validate_json(a.content) for a in answers[27:29]]
    assert twice[0].digest == twice[1].digest
    assert sorted(codes[29:31]) == [201, 409]
    conflict = answers[29] if codes[29] == 409 else answers[30]
    expect_error(conflict, 409, "duplicate_conflict")
    assert report_count(ctx, study.id, 0) == 27
    assert (await round_of(client, study.id, 0)).received == 27
    for person, answer in zip(people[:25], answers[:25], strict=True):
        receipt = Receipt.model_validate_json(answer.content)
        stored = stored_report(ctx, study.id, 0, person.participant_id)
        assert stored is not None
        assert (receipt.participant_id, receipt.digest) == (person.participant_id, stored[1])


async def test_a_held_task_poll_answers_when_the_next_round_opens(two_stage: TwoStage) -> None:
    s = two_stage
    url = f"/v1/studies/{s.study.id}/tasks"
    body = {
        "participant_ids": [e.participant_id for e in s.stage_two],
        "tokens": [e.token for e in s.stage_two],
    }
    expect_error(await s.client.post(f"{url}?hold=11", json=body), 422, "invalid_request")
    started = time.monotonic()
    held = asyncio.create_task(s.client.post(f"{url}?hold=5", json=body))
    await asyncio.sleep(0.3)
    assert not held.done()  # stage two can only wait while stage one runs: held back
    await finish_stage_one(s)
    answer = TaskBatch.model_validate_json((await held).content)
    assert [rt.round for rt in answer.reports] == [1]
    assert sorted(answer.reports[0].participant_ids) == body["participant_ids"]
    assert time.monotonic() - started < 4  # woken by the transition, not by the hold's end
    at_once = await s.client.post(f"{url}?hold=5", json=body)  # they have work: no holding
    assert TaskBatch.model_validate_json(at_once.content).reports


async def test_the_ledger_shows_each_charge_as_its_composed_messages(
    client: httpx.AsyncClient,
) -> None:
    """user-mean-linf at ε = 2.5 over d = 5 coordinates: medium regime, groups of ⌊2.5⌋ = 2
    coordinates (the last group 1), each message at 1-LDP; the ledger lists 2 (or 1) messages
    composing to the charge, never more than the declared ε."""
    params = {"samples_per_user": 4, "dimension": 5}
    study = await create_study(client, "user-mean-linf", params)
    people = await enroll(client, study.id, [2.5] * 400)
    await start(client, study.id)
    seen = set()
    for e in people[:40]:
        response = await client.get(
            f"/v1/studies/{study.id}/participants/{e.participant_id}/budget",
            headers={"Authorization": f"Bearer {e.token}"},
        )
        view = BudgetView.model_validate_json(response.content)
        (charge,) = view.planned
        assert charge.epsilon == pytest.approx(charge.messages * 1.0)
        assert charge.epsilon <= view.declared_epsilon
        seen.add(charge.messages)
    assert seen == {1, 2}


async def test_a_held_poll_tells_the_done_with_the_next_tasks(two_stage: TwoStage) -> None:
    """Participants done (stage one's, once they reported) and others waiting (stage two's):
    the poll is held until stage two opens, and then answers both."""
    s = two_stage
    url = f"/v1/studies/{s.study.id}/tasks"
    s1 = await submit_batch(s.client, s.study.id, 0, "histogram", s.stage_one[1:], [[0.5]] * 5)
    assert s1.accepted == 5
    everyone = s.stage_one[1:] + s.stage_two
    body = {
        "participant_ids": [e.participant_id for e in everyone],
        "tokens": [e.token for e in everyone],
    }
    held = asyncio.create_task(s.client.post(f"{url}?hold=5", json=body))
    await asyncio.sleep(0.3)
    assert not held.done()  # five are done, six wait, none has a task: held back
    await submit_batch(s.client, s.study.id, 0, "histogram", s.stage_one[:1], [[0.5]])
    answer = TaskBatch.model_validate_json((await held).content)
    assert sorted(answer.done) == sorted(e.participant_id for e in s.stage_one[1:])
    assert [rt.round for rt in answer.reports] == [1]
    assert sorted(answer.reports[0].participant_ids) == sorted(
        e.participant_id for e in s.stage_two
    )
    done_ids = [e.participant_id for e in s.stage_one]
    done_only = {"participant_ids": done_ids, "tokens": [e.token for e in s.stage_one]}
    started = time.monotonic()
    answer = TaskBatch.model_validate_json(
        (await s.client.post(f"{url}?hold=5", json=done_only)).content
    )
    assert sorted(answer.done) == sorted(done_ids)
    assert time.monotonic() - started < 1  # nobody waits: answered at once

"""Round transitions (server/services/rounds.py): close exactly once, sweep deadlines, the quorum
rule.

The first tests call the services without HTTP (docs/architecture.md, convention 2); the quorum
tests submit over HTTP and then drive ``sweep`` by hand, as the background sweeper would after the
deadline.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.wire import (
    BudgetView,
    Credentials,
    Enrollment,
    Receipt,
    ReportBatch,
    ResultView,
    StudyCreate,
    StudyView,
    TaskDone,
)
from fedldp.protocol.heterogeneous.estimators import weights
from fedldp.server.runtime.context import Context
from fedldp.server.services import enrollment, ingest, studies, tasks
from fedldp.server.services.rounds import close_round, sweep
from fedldp.server.store.db import Database
from tests.server.helpers import (
    app_context,
    create_study,
    enroll,
    expect_error,
    expire_enrollment,
    expire_round,
    round_of,
    start,
    submit_batch,
)


def new_study(
    ctx: Context, protocol: str, params: dict[str, Any], epsilons: list[float], **fields: Any
) -> tuple[str, list[Enrollment]]:
    view = studies.create(ctx, StudyCreate(protocol=protocol, params=params, seed=11, **fields))
    n = len(epsilons)
    people = enrollment.enroll(ctx, view.id, epsilons, [{}] * n, [None] * n).enrollments
    return view.id, people


def send(
    ctx: Context,
    study_id: str,
    round_index: int,
    kind: Any,
    people: list[Enrollment],
    rows: list[list[float]],
) -> None:
    receipt = ingest.submit_batch(
        ctx,
        study_id,
        ReportBatch(
            round=round_index,
            kind=kind,
            participant_ids=[e.participant_id for e in people],
            tokens=[e.token for e in people],
            payloads=rows,
        ),
    )
    assert receipt.accepted == len(people), receipt


def stage_one_cohort(ctx: Context, study_id: str, people: list[Enrollment]) -> list[Enrollment]:
    ids, tokens = [e.participant_id for e in people], [e.token for e in people]
    found = tasks.tasks(ctx, study_id, ids, Credentials(tokens=tokens))
    first = {t.participant_id for t in found.items() if t.task.kind == "report"}
    return [e for e in people if e.participant_id in first]


# --------------------------------------------------------------------------- close_round


def test_close_round_closes_a_due_round_once(ctx: Context) -> None:
    sid, people = new_study(ctx, "hetero-mean-laplace", {}, [1.0] * 6, quorum=0.5)
    studies.start(ctx, sid)
    send(ctx, sid, 0, "scalar", people[:4], [[0.5], [0.25], [-0.5], [0.75]])
    assert close_round(ctx, sid, 0) is False  # neither complete nor past its deadline
    assert studies.get(ctx, sid).rounds[0].status == "open"

    expire_round(ctx, sid, 0)
    assert close_round(ctx, sid, 0) is True
    assert close_round(ctx, sid, 0) is False
    view = studies.get(ctx, sid)
    assert view.phase == "finished"
    assert (view.rounds[0].status, view.rounds[0].received) == ("closed", 4)
    result = studies.result(ctx, sid)
    assert result.diagnostics["n_reports"] == 4
    assert result.estimate == pytest.approx(0.25, rel=1e-12)  # equal ε: the plain mean


def test_close_round_unknown_or_not_open_is_a_no_op(ctx: Context) -> None:
    assert close_round(ctx, "0" * 32, 0) is False
    sid, _ = new_study(ctx, "user-mean", {"samples_per_user": 4}, [1.0] * 6)
    assert close_round(ctx, sid, 0) is False  # still enrolling: no rounds
    studies.start(ctx, sid)
    expire_round(ctx, sid, 1)
    assert close_round(ctx, sid, 1) is False  # pending, whatever its deadline says
    assert close_round(ctx, sid, 7) is False


@pytest.mark.parametrize("threads", [8])
def test_close_round_from_many_threads_closes_it_once(ctx: Context, threads: int) -> None:
    sid, people = new_study(ctx, "user-mean", {"samples_per_user": 4}, [1.0] * 12, quorum=0.5)
    studies.start(ctx, sid)
    one = stage_one_cohort(ctx, sid, people)
    two = [e for e in people if e not in one]
    send(ctx, sid, 0, "histogram", one[:4], [[0.5]] * 4)
    expire_round(ctx, sid, 0)

    def race(index: int) -> list[bool]:
        barrier = threading.Barrier(threads)

        def attempt(_: int) -> bool:
            barrier.wait()
            return close_round(ctx, sid, index)

        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(attempt, range(threads)))

    outcomes = race(0)
    assert sorted(outcomes) == [False] * (threads - 1) + [True]
    view = studies.get(ctx, sid)
    assert view.phase == "running"
    assert view.current_round == 1
    assert [r.status for r in view.rounds] == ["closed", "open"]
    first = studies.round_of(ctx, sid, 0)
    assert first.output is not None
    assert first.output["n_reports"] == 4
    second = studies.round_of(ctx, sid, 1)
    assert second.broadcast is not None
    assert (second.broadcast["lo"], second.broadcast["hi"]) == (
        first.output["lo"],
        first.output["hi"],
    )

    send(ctx, sid, 1, "scalar", two[:3], [[0.1], [0.2], [0.3]])
    expire_round(ctx, sid, 1)
    assert sorted(race(1)) == [False] * (threads - 1) + [True]
    assert studies.get(ctx, sid).phase == "finished"
    assert studies.result(ctx, sid).diagnostics["n2"] == 3


# --------------------------------------------------------------------------- sweep


def test_sweep_starts_a_study_whose_enrollment_deadline_passed(ctx: Context) -> None:
    sid, _ = new_study(ctx, "hetero-mean-rr", {}, [1.0] * 3, enrollment_deadline_s=3600)
    assert studies.get(ctx, sid).enrollment_deadline is not None
    assert sweep(ctx) == 0
    assert studies.get(ctx, sid).phase == "enrolling"

    expire_enrollment(ctx, sid)
    assert sweep(ctx) == 1
    view = studies.get(ctx, sid)
    assert view.phase == "running"
    assert view.current_round == 0
    assert [(r.status, r.expected) for r in view.rounds] == [("open", 3)]
    assert sweep(ctx) == 0  # nothing more to do until reports or the round deadline


def test_an_empty_study_stays_enrolling_past_its_enrollment_deadline(ctx: Context) -> None:
    """As after an explicit start refused: the reason is in its view, the deadline is spent (the
    next sweeps leave it alone), and a participant who enrolls later can start it."""
    view = studies.create(
        ctx, StudyCreate(protocol="hetero-mean-rr", seed=1, enrollment_deadline_s=60)
    )
    expire_enrollment(ctx, view.id)
    assert sweep(ctx) == 1
    waiting = studies.get(ctx, view.id)
    assert (waiting.phase, waiting.failure_reason, waiting.enrollment_deadline) == (
        "enrolling",
        None,
        None,
    )
    assert waiting.warnings == [
        "not started when its enrollment deadline passed: no participants enrolled; it is "
        "still enrolling (enroll more participants and start it, or cancel it)"
    ]
    assert sweep(ctx) == 0
    assert studies.get(ctx, view.id).warnings == waiting.warnings  # not retried, not repeated
    enrollment.enroll(ctx, view.id, [1.0], [{}], [None])
    assert studies.start(ctx, view.id).phase == "running"


def test_an_infeasible_plan_at_the_enrollment_deadline_leaves_the_study_enrolling(
    ctx: Context,
) -> None:
    """user-mean with 4 stage-one bins needs 600 participants at ε = 1 (§1.5): 10 at the
    deadline are too few; the study waits, and starts once enough have enrolled."""
    params = {"samples_per_user": 64}
    sid, _ = new_study(ctx, "user-mean", params, [1.0] * 10, enrollment_deadline_s=60)
    expire_enrollment(ctx, sid)
    assert sweep(ctx) == 1
    view = studies.get(ctx, sid)
    assert view.phase == "enrolling"
    assert view.enrollment_deadline is None
    assert len(view.warnings) == 1
    assert "enrollment deadline passed: the plan is infeasible" in view.warnings[0]
    enrollment.enroll(ctx, sid, [1.0] * 590, [{}] * 590, [None] * 590)
    assert studies.start(ctx, sid).phase == "running"


def test_sweep_leaves_studies_without_deadlines_alone(ctx: Context) -> None:
    sid, people = new_study(ctx, "hetero-mean-rr", {}, [1.0] * 3)
    assert sweep(ctx) == 0
    studies.start(ctx, sid)
    send(ctx, sid, 0, "bit", people[:2], [[1.0], [1.0]])
    assert sweep(ctx) == 0
    assert studies.get(ctx, sid).rounds[0].status == "open"


# --------------------------------------------------------------------------- the quorum


async def test_quorum_met_at_the_deadline_aggregates_only_who_reported(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    ctx = app_context(app)
    eps = [0.5, 1.0, 2.0, 1.0, 0.25, 3.0, 1.0, 0.75, 1.5, 2.5]
    study = await create_study(client, "hetero-mean-laplace", quorum=0.7, round_deadline_s=600)
    people = await enroll(client, study.id, eps)
    await start(client, study.id)
    values = [0.9, -0.2, 0.4, 0.1, -0.7, 0.3, 0.8, -0.1]  # from the first 8; 2 stay silent
    await submit_batch(client, study.id, 0, "scalar", people[:8], [[v] for v in values])
    assert sweep(ctx) == 0  # the deadline has not passed
    assert (await round_of(client, study.id, 0)).status == "open"

    expire_round(ctx, study.id, 0)
    assert sweep(ctx) == 1
    closed = await round_of(client, study.id, 0)
    assert (closed.status, closed.received, closed.expected) == ("closed", 8, 10)
    result = ResultView.model_validate_json(
        (await client.get(f"/v1/studies/{study.id}/result")).content
    )
    assert result.phase == "finished"
    # Alg. 1 weights a_i = ε_i²/(1 + ε_i²), renormalized over the 8 who reported.
    a = weights("laplace", np.array(eps[:8]))
    assert a[0] == pytest.approx(0.25 / 1.25)
    expected = float(a @ np.array(values) / a.sum())
    assert result.estimate == pytest.approx(expected, rel=1e-12)
    assert result.diagnostics["n_reports"] == 8
    assert result.epsilon_spent.participants == 10
    assert result.epsilon_spent.charged == 8
    # Only the reports charge ε: the silent two (ε 1.5 and 2.5) count as zero.
    assert result.epsilon_spent.max == max(eps[:8])
    assert result.epsilon_spent.mean == pytest.approx(sum(eps[:8]) / 10, rel=1e-12)

    silent = people[9]
    budget = await client.get(
        f"/v1/studies/{study.id}/participants/9/budget",
        headers={"Authorization": f"Bearer {silent.token}"},
    )
    view = BudgetView.model_validate_json(budget.content)
    assert [(c.round, c.reported) for c in view.planned] == [(0, False)]
    assert (view.spent, view.remaining) == (0.0, 2.5)
    late = await client.post(
        f"/v1/studies/{study.id}/reports",
        json={
            "participant_id": 9,
            "token": silent.token,
            "round": 0,
            "payload": {"kind": "scalar", "value": 0.0},
        },
    )
    expect_error(late, 409, "study_not_running")


async def test_quorum_met_in_stage_one_opens_stage_two(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    ctx = app_context(app)
    study = await create_study(client, "user-mean", {"samples_per_user": 4}, quorum=0.5)
    people = await enroll(client, study.id, [1.0] * 12)
    await start(client, study.id)
    one = stage_one_cohort(ctx, study.id, people)
    await submit_batch(client, study.id, 0, "histogram", one[:3], [[0.5]] * 3)
    expire_round(ctx, study.id, 0)
    assert sweep(ctx) == 1
    first = await round_of(client, study.id, 0)
    assert first.output is not None
    assert (first.status, first.output["n_reports"]) == ("closed", 3)
    second = await round_of(client, study.id, 1)
    assert second.status == "open"
    assert second.expected == 6


async def test_quorum_missed_at_the_deadline_fails_the_study(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    ctx = app_context(app)
    study = await create_study(client, "hetero-mean-laplace", quorum=0.9)
    people = await enroll(client, study.id, [1.0] * 10)
    await start(client, study.id)
    await submit_batch(client, study.id, 0, "scalar", people[:5], [[0.1]] * 5)
    expire_round(ctx, study.id, 0)
    assert sweep(ctx) == 1

    view = StudyView.model_validate_json((await client.get(f"/v1/studies/{study.id}")).content)
    assert view.phase == "failed"
    assert view.current_round is None
    assert view.failure_reason is not None
    assert "quorum" in view.failure_reason
    assert "5 of 10" in view.failure_reason
    closed = await round_of(client, study.id, 0)
    assert (closed.status, closed.output) == ("closed", None)

    response = await client.get(f"/v1/studies/{study.id}/result")
    assert response.status_code == 200
    result = ResultView.model_validate_json(response.content)
    assert (result.phase, result.estimate, result.error_bar) == ("failed", None, None)
    assert result.failure_reason == view.failure_reason
    assert sweep(ctx) == 0


# --------------------------------------------------------------------------- failure isolation


def _raises(error: Exception) -> Any:
    def step(*args: Any, **kwargs: Any) -> Any:
        raise error

    return step


async def _report(
    client: httpx.AsyncClient, study_id: str, person: Enrollment, values: list[float]
) -> Receipt:
    body = {
        "participant_id": person.participant_id,
        "token": person.token,
        "round": 0,
        "payload": {"kind": "statistic", "values": values},
    }
    response = await client.post(f"/v1/studies/{study_id}/reports", json=body)
    assert response.status_code == 201, response.text
    return Receipt.model_validate_json(response.content)


async def test_a_protocol_that_raises_fails_its_study_and_no_other(
    client: httpx.AsyncClient, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """finalize raising at a report-triggered close, aggregate raising in the sweeper: each
    study fails with the reason, the report that closed the round gets its receipt, and another
    study's round still closes at its deadline, also in a server restarted on the database."""
    ctx = app_context(app)
    monkeypatch.setattr(CATALOGUE["central-wme"], "finalize", _raises(TypeError("finalize bug")))
    monkeypatch.setattr(CATALOGUE["hetero-mean-rr"], "aggregate", _raises(KeyError("agg bug")))
    central = await create_study(client, "central-wme")
    people = await enroll(client, central.id, [1.0, 1.0])
    await start(client, central.id)
    first = await _report(client, central.id, people[0], [0.3, 4.0])
    last = await _report(client, central.id, people[1], [0.3, 4.0])  # closes the round
    assert (first.duplicate, last.duplicate) == (False, False)
    view = StudyView.model_validate_json((await client.get(f"/v1/studies/{central.id}")).content)
    assert (view.phase, view.current_round) == ("failed", None)
    assert view.failure_reason is not None
    assert "TypeError: finalize bug" in view.failure_reason
    url = f"/v1/studies/{central.id}/participants/{people[1].participant_id}/task"
    task = TaskDone.model_validate_json(
        (await client.get(url, headers={"Authorization": f"Bearer {people[1].token}"})).content
    )
    assert task.phase == "failed"

    broken = await create_study(client, "hetero-mean-rr", quorum=0.5)
    fine = await create_study(client, "hetero-mean-laplace", quorum=0.5)
    broken_people = await enroll(client, broken.id, [1.0] * 4)
    fine_people = await enroll(client, fine.id, [1.0] * 4)
    for study, kind, rows, who in (
        (broken, "bit", [[1.0]] * 3, broken_people),
        (fine, "scalar", [[0.2]] * 3, fine_people),
    ):
        await start(client, study.id)
        await submit_batch(client, study.id, 0, kind, who[:3], rows)
        expire_round(ctx, study.id, 0)
    assert sweep(ctx) == 2
    failed = studies.get(ctx, broken.id)
    assert failed.phase == "failed"
    assert failed.failure_reason is not None
    assert "could not be closed: KeyError" in failed.failure_reason
    assert (await round_of(client, broken.id, 0)).status == "closed"
    assert studies.get(ctx, fine.id).phase == "finished"
    assert sweep(ctx) == 0  # nothing is retried

    restarted = Context(ctx.settings, Database(ctx.settings))
    try:
        late = await create_study(client, "hetero-mean-laplace", quorum=0.5)
        late_people = await enroll(client, late.id, [1.0] * 2)
        await start(client, late.id)
        await submit_batch(client, late.id, 0, "scalar", late_people[:1], [[0.1]])
        expire_round(restarted, late.id, 0)
        assert sweep(restarted) == 1
        assert studies.get(restarted, late.id).phase == "finished"
    finally:
        restarted.db.dispose()


def test_a_plan_that_raises_fails_the_study_in_the_sweeper(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(CATALOGUE["hetero-mean-rr"], "plan", _raises(ZeroDivisionError("plan")))
    bad, _ = new_study(ctx, "hetero-mean-rr", {}, [1.0] * 3, enrollment_deadline_s=60)
    good, _ = new_study(ctx, "hetero-mean-laplace", {}, [1.0] * 3, enrollment_deadline_s=60)
    expire_enrollment(ctx, bad)
    expire_enrollment(ctx, good)
    assert sweep(ctx) == 2
    failed = studies.get(ctx, bad)
    assert failed.phase == "failed"
    assert failed.failure_reason == "the protocol failed to plan: ZeroDivisionError: plan"
    assert studies.get(ctx, good).phase == "running"

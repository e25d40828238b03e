"""Every route of server/web/routes.py over ``httpx.ASGITransport``: what a well-formed request
gets.

The refusals (bad input, wrong phase, bad credentials) are in test_studies.py and
test_participants.py; error rendering and the no-500 walk in test_app.py.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from pydantic import TypeAdapter

from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.wire import (
    BudgetView,
    Enrollment,
    Health,
    ProtocolList,
    Receipt,
    ResultView,
    RoundsView,
    StudyList,
    StudyView,
    Task,
    TaskBatch,
    TaskDone,
    TaskReport,
    TaskWait,
)
from fedldp.server import __version__
from fedldp.server.settings import Settings
from fedldp.server.web.app import create_app
from tests.server.helpers import (
    app_context,
    create_study,
    enroll,
    expect_error,
    report_count,
    round_of,
    start,
    submit_batch,
)

TASK: TypeAdapter[Task] = TypeAdapter(Task)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def bit_report(e: Enrollment, bit: int, round_index: int = 0) -> dict[str, object]:
    return {
        "participant_id": e.participant_id,
        "token": e.token,
        "round": round_index,
        "payload": {"kind": "bit", "bit": bit},
    }


async def test_health_names_version_and_backend(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    response = await client.get("/health")
    assert response.status_code == 200
    health = Health.model_validate_json(response.content)
    assert health.status == "ok"
    assert health.version == __version__
    assert health.database == settings.database_url.split(":")[0].split("+")[0]


async def test_protocols_lists_the_catalogue_with_parameter_schemas(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/v1/protocols")
    assert response.status_code == 200
    listed = ProtocolList.model_validate_json(response.content).protocols
    assert [p.name for p in listed] == sorted(CATALOGUE)
    for info in listed:
        described = CATALOGUE[info.name].describe()
        assert info.trust == described["trust"]
        assert info.parameters == described["parameters"]
    user_mean = next(p for p in listed if p.name == "user-mean")
    assert "samples_per_user" in user_mean.parameters["required"]
    assert user_mean.broadcast_fields == dict(CATALOGUE["user-mean"].broadcast_fields)
    assert (user_mean.population.epsilon, user_mean.population.min_participants) == (1.0, 600)


async def test_protocols_state_the_minimum_population_at_an_epsilon(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/v1/protocols", params={"epsilon": 0.1})
    listed = {p.name: p for p in ProtocolList.model_validate_json(response.content).protocols}
    assert listed["user-mean"].population.min_participants == 60_000  # 2·⌈300/0.01⌉ (§1.5)
    assert listed["central-wme"].population.min_participants == 2
    assert listed["hetero-mean-laplace"].population.min_participants == 1
    expect_error(await client.get("/v1/protocols", params={"epsilon": 0}), 422, "invalid_request")


async def test_create_list_and_get_a_study(client: httpx.AsyncClient) -> None:
    created = await create_study(
        client,
        "hetero-mean-rr",
        {"weights": "uniform"},
        seed=99,
        name="coin",
        round_deadline_s=30.0,
        quorum=0.5,
    )
    assert created.phase == "enrolling"
    assert created.protocol == "hetero-mean-rr"
    assert created.trust == "local"
    assert created.seed == 99
    assert created.name == "coin"
    assert created.round_deadline_s == 30.0
    assert created.quorum == 0.5
    assert created.n_participants == 0
    assert created.rounds == []
    assert created.current_round is None
    # The parameters are kept as given (validated); re-parsing them anywhere gives the same.
    assert created.params == {"weights": "uniform"}
    rr = CATALOGUE["hetero-mean-rr"]
    assert rr.parse_params(created.params) == rr.parse_params({"weights": "uniform"})
    other = await create_study(client, "hetero-mean-laplace")

    listed = await client.get("/v1/studies")
    assert listed.status_code == 200
    studies = StudyList.model_validate_json(listed.content).studies
    assert [s.id for s in studies] == [created.id, other.id]

    fetched = await client.get(f"/v1/studies/{created.id}")
    assert fetched.status_code == 200
    assert StudyView.model_validate_json(fetched.content) == created


async def test_enroll_single_and_batch_get_consecutive_ids_and_distinct_tokens(
    client: httpx.AsyncClient,
) -> None:
    study = await create_study(client, "hetero-mean-rr")
    one = await client.post(
        f"/v1/studies/{study.id}/participants", json={"epsilon": 0.5, "metadata": {"age": 31.0}}
    )
    assert one.status_code == 201
    first = Enrollment.model_validate_json(one.content)
    assert first.participant_id == 0
    rest = await enroll(client, study.id, [1.0, 2.0, 0.25])
    assert [e.participant_id for e in rest] == [1, 2, 3]
    assert len({first.token, *(e.token for e in rest)}) == 4
    view = StudyView.model_validate_json((await client.get(f"/v1/studies/{study.id}")).content)
    assert view.n_participants == 4
    assert view.phase == "enrolling"


async def test_start_fixes_the_plan_and_opens_round_zero(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "user-mean", {"samples_per_user": 4}, round_deadline_s=60)
    await enroll(client, study.id, [1.0] * 10)
    started = await start(client, study.id)
    assert started.phase == "running"
    assert started.current_round == 0
    assert [(r.index, r.name, r.status) for r in started.rounds] == [
        (0, "stage-1", "open"),
        (1, "stage-2", "pending"),
    ]
    assert [r.expected for r in started.rounds] == [5, 5]
    assert [r.received for r in started.rounds] == [0, 0]
    assert started.rounds[0].deadline is not None
    assert started.rounds[0].seconds_left is not None
    assert 0 < started.rounds[0].seconds_left <= 60
    assert started.rounds[1].deadline is None


async def test_task_follows_the_participant_through_the_study(
    client: httpx.AsyncClient,
) -> None:
    study = await create_study(client, "hetero-mean-rr")
    people = await enroll(client, study.id, [0.5, 1.5])
    url = f"/v1/studies/{study.id}/participants/0/task"

    waiting = TASK.validate_json((await client.get(url, headers=bearer(people[0].token))).content)
    assert isinstance(waiting, TaskWait)
    assert waiting.retry_after_s > 0

    await start(client, study.id)
    response = await client.get(url, headers=bearer(people[0].token))
    assert response.status_code == 200
    task = TASK.validate_json(response.content)
    assert isinstance(task, TaskReport)
    assert (task.round, task.name, task.payload_kind, task.payload_shape) == (
        0,
        "report",
        "bit",
        [],
    )
    assert task.epsilon == 0.5  # its own declared ε: one round spends it all
    assert task.broadcast == {"input": "interval"}
    assert task.deadline is not None

    posted = await client.post(f"/v1/studies/{study.id}/reports", json=bit_report(people[0], 1))
    assert posted.status_code == 201
    after = TASK.validate_json((await client.get(url, headers=bearer(people[0].token))).content)
    assert after == TaskDone(phase="running", reported_rounds=[0])

    await client.post(f"/v1/studies/{study.id}/reports", json=bit_report(people[1], -1))
    done = TASK.validate_json((await client.get(url, headers=bearer(people[0].token))).content)
    assert done == TaskDone(phase="finished", reported_rounds=[0])


async def test_tasks_batch_answers_each_participant(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "user-mean", {"samples_per_user": 4})
    people = await enroll(client, study.id, [1.0] * 8)
    await start(client, study.id)
    response = await client.post(
        f"/v1/studies/{study.id}/tasks",
        json={
            "participant_ids": [e.participant_id for e in people],
            "tokens": [e.token for e in people],
        },
    )
    assert response.status_code == 200
    items = TaskBatch.model_validate_json(response.content).items()
    assert [i.participant_id for i in items] == list(range(8))
    reporting = [i for i in items if isinstance(i.task, TaskReport)]
    waiting = [i for i in items if isinstance(i.task, TaskWait)]
    # Stage one takes half the participants; the other half waits for stage two.
    assert len(reporting) == len(waiting) == 4
    for item in reporting:
        assert isinstance(item.task, TaskReport)
        assert item.task.payload_kind == "histogram"
        assert item.task.payload_shape == [1]


async def test_single_report_gets_a_receipt_and_is_stored(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    study = await create_study(client, "hetero-mean-rr")
    people = await enroll(client, study.id, [1.0, 1.0, 1.0])
    await start(client, study.id)
    response = await client.post(f"/v1/studies/{study.id}/reports", json=bit_report(people[2], -1))
    assert response.status_code == 201
    receipt = Receipt.model_validate_json(response.content)
    assert (receipt.participant_id, receipt.round, receipt.duplicate) == (2, 0, False)
    assert len(receipt.digest) == 32
    assert report_count(app_context(app), study.id, 0) == 1
    assert (await round_of(client, study.id, 0)).received == 1


async def test_batch_reports_finish_a_one_round_study(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr", {"weights": "uniform", "clip": False})
    people = await enroll(client, study.id, [2.0] * 4)
    await start(client, study.id)
    bits = [1.0, 1.0, 1.0, -1.0]
    receipt = await submit_batch(client, study.id, 0, "bit", people, [[b] for b in bits])
    assert (receipt.round, receipt.accepted, receipt.duplicates, receipt.rejected) == (0, 4, 0, 0)
    assert receipt.items == []

    result = ResultView.model_validate_json(
        (await client.get(f"/v1/studies/{study.id}/result")).content
    )
    assert result.phase == "finished"
    assert result.failure_reason is None
    # Uniform weights: θ̂ = mean of c·y with c = 1/tanh(ε/2) (Alg. 2 debiasing).
    c = 1.0 / math.tanh(1.0)
    assert result.estimate == pytest.approx(c * sum(bits) / 4, rel=1e-12)
    assert result.error_bar is not None
    assert result.error_bar.kind == "hoeffding"
    assert result.error_bar.level == pytest.approx(0.95)
    assert result.epsilon_spent.participants == 4
    assert result.epsilon_spent.charged == 4
    assert result.epsilon_spent.max == 2.0
    assert result.diagnostics["n_reports"] == 4


async def test_rounds_and_round_views(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    people = await enroll(client, study.id, [1.0, 1.0])
    assert RoundsView.model_validate_json(
        (await client.get(f"/v1/studies/{study.id}/rounds")).content
    ) == RoundsView(rounds=[])
    await start(client, study.id)
    opened = await round_of(client, study.id, 0)
    assert (opened.status, opened.expected, opened.received) == ("open", 2, 0)
    assert opened.broadcast == {"input": "interval"}
    assert opened.opened_at is not None
    assert opened.closed_at is None
    assert opened.output is None

    await submit_batch(client, study.id, 0, "bit", people, [[1.0], [1.0]])
    response = await client.get(f"/v1/studies/{study.id}/rounds")
    assert response.status_code == 200
    (closed,) = RoundsView.model_validate_json(response.content).rounds
    assert (closed.status, closed.received) == ("closed", 2)
    assert closed.closed_at is not None
    assert closed.opened_at is not None
    assert closed.closed_at >= closed.opened_at
    assert closed.output is not None
    assert closed.output["n_reports"] == 2
    assert closed == await round_of(client, study.id, 0)


async def test_budget_shows_planned_and_spent_epsilon(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr", {"eps_cap": 1.0})
    people = await enroll(client, study.id, [3.0, 0.5])
    url = f"/v1/studies/{study.id}/participants/0/budget"

    before_start = await client.get(url, headers=bearer(people[0].token))
    assert before_start.status_code == 200
    assert BudgetView.model_validate_json(before_start.content) == BudgetView(
        participant_id=0, declared_epsilon=3.0, planned=[], spent=0.0, remaining=3.0
    )

    await start(client, study.id)
    planned = BudgetView.model_validate_json(
        (await client.get(url, headers=bearer(people[0].token))).content
    )
    assert [(c.round, c.epsilon, c.reported) for c in planned.planned] == [(0, 1.0, False)]
    assert planned.spent == 0.0

    await client.post(f"/v1/studies/{study.id}/reports", json=bit_report(people[0], 1))
    spent = BudgetView.model_validate_json(
        (await client.get(url, headers=bearer(people[0].token))).content
    )
    assert [(c.round, c.epsilon, c.reported) for c in spent.planned] == [(0, 1.0, True)]
    assert spent.spent == 1.0  # eps_cap: it runs, and is charged, at min(3, 1)
    assert spent.remaining == 2.0


async def test_cancel_ends_a_running_study(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    people = await enroll(client, study.id, [1.0, 1.0])
    await start(client, study.id)
    response = await client.post(f"/v1/studies/{study.id}/cancel")
    assert response.status_code == 200
    cancelled = StudyView.model_validate_json(response.content)
    assert cancelled.phase == "cancelled"
    assert cancelled.current_round is None
    assert cancelled.failure_reason == "cancelled by the administrator"

    result = ResultView.model_validate_json(
        (await client.get(f"/v1/studies/{study.id}/result")).content
    )
    assert (result.phase, result.estimate, result.error_bar) == ("cancelled", None, None)
    refused = await client.post(f"/v1/studies/{study.id}/reports", json=bit_report(people[0], 1))
    expect_error(refused, 409, "study_not_running")
    task = TASK.validate_json(
        (
            await client.get(
                f"/v1/studies/{study.id}/participants/0/task", headers=bearer(people[0].token)
            )
        ).content
    )
    assert task == TaskDone(phase="cancelled", reported_rounds=[])
    expect_error(await client.post(f"/v1/studies/{study.id}/cancel"), 409, "study_ended")


# --------------------------------------------------------------------------- the admin key


@pytest.fixture
async def admin_client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings.model_copy(update={"admin_key": "s3cret"}), sweeper=False)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://admin.test") as client:
            yield client
    finally:
        app_context(app).db.dispose()


@dataclasses.dataclass
class AdminCase:
    name: str
    headers: dict[str, str]
    status: int
    code: str | None


ADMIN_CASES = [
    AdminCase("missing", {}, 401, "admin_key_required"),
    AdminCase("empty", {"X-Admin-Key": ""}, 401, "admin_key_required"),
    AdminCase("wrong", {"X-Admin-Key": "s3cre"}, 403, "admin_key_invalid"),
    AdminCase("right", {"X-Admin-Key": "s3cret"}, 0, None),
]


@pytest.mark.parametrize("case", ADMIN_CASES, ids=lambda c: c.name)
async def test_admin_key_guards_create_start_cancel_and_lease(
    admin_client: httpx.AsyncClient, case: AdminCase
) -> None:
    admin = {"X-Admin-Key": "s3cret"}
    client = admin_client
    created = await client.post(
        "/v1/studies", json={"protocol": "hetero-mean-rr", "seed": 1}, headers=case.headers
    )
    if case.code is not None:
        expect_error(created, case.status, case.code)
        assert (
            StudyList.model_validate_json((await client.get("/v1/studies")).content).studies == []
        )
    else:
        assert created.status_code == 201
    target = await create_study(client, "hetero-mean-rr", headers=admin, enrollment_target=10)
    leased = await client.post(
        f"/v1/studies/{target.id}/leases", json={"size": 4}, headers=case.headers
    )
    if case.code is not None:
        expect_error(leased, case.status, case.code)
    else:
        assert leased.status_code == 201
    study = await create_study(client, "hetero-mean-rr", headers=admin)
    # Participants and readers need no admin key.
    await enroll(client, study.id, [1.0, 1.0])
    started = await client.post(f"/v1/studies/{study.id}/start", headers=case.headers)
    if case.code is not None:
        expect_error(started, case.status, case.code)
        view = await client.get(f"/v1/studies/{study.id}")
        assert StudyView.model_validate_json(view.content).phase == "enrolling"
        started = await client.post(f"/v1/studies/{study.id}/start", headers=admin)
    assert started.status_code == 200
    cancelled = await client.post(f"/v1/studies/{study.id}/cancel", headers=case.headers)
    if case.code is not None:
        expect_error(cancelled, case.status, case.code)
        view = await client.get(f"/v1/studies/{study.id}")
        assert StudyView.model_validate_json(view.content).phase == "running"
    else:
        assert StudyView.model_validate_json(cancelled.content).phase == "cancelled"

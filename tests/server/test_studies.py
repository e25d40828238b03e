"""Study services over HTTP (server/services/studies.py): creation, enrollment, start, result,
refusals."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.wire import (
    EPSILON_MAX,
    EPSILON_MIN,
    Enrollment,
    EnrollmentBatch,
    Lease,
    ResultView,
    StudyList,
    StudyView,
    Task,
)
from tests.server.helpers import (
    batch_tasks,
    create_study,
    enroll,
    expect_error,
    round_of,
    start,
)

TASK: TypeAdapter[Task] = TypeAdapter(Task)


async def study_view(client: httpx.AsyncClient, study_id: str) -> StudyView:
    response = await client.get(f"/v1/studies/{study_id}")
    assert response.status_code == 200
    return StudyView.model_validate_json(response.content)


async def no_studies(client: httpx.AsyncClient) -> bool:
    listed = StudyList.model_validate_json((await client.get("/v1/studies")).content)
    return listed.studies == []


# --------------------------------------------------------------------------- creation


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"protocol": "no-such-protocol", "seed": 1}, 422, "unknown_protocol"),
        ({"protocol": "user-mean", "seed": 1}, 422, "invalid_params"),  # samples_per_user
        (
            {"protocol": "user-mean", "params": {"samples_per_user": 0}, "seed": 1},
            422,
            "invalid_params",
        ),
        (
            {"protocol": "user-mean", "params": {"samples_per_user": 4, "typo": 1}, "seed": 1},
            422,
            "invalid_params",
        ),
        (
            {
                "protocol": "user-mean",
                "params": {"samples_per_user": 4, "heavy_tail": True},
                "seed": 1,
            },
            422,
            "invalid_params",
        ),  # a model validator's ValueError
        (
            {"protocol": "hetero-mean-laplace", "params": {"lo": 1, "hi": 0}, "seed": 1},
            422,
            "invalid_params",
        ),
        ({"protocol": "hetero-mean-rr", "seed": -1}, 422, "invalid_request"),
        ({"protocol": "hetero-mean-rr", "seed": 2**63}, 422, "invalid_request"),
        ({"protocol": "hetero-mean-rr"}, 422, "invalid_request"),
        ({"protocol": "hetero-mean-rr", "seed": 1, "quorum": 0}, 422, "invalid_request"),
        ({"protocol": "hetero-mean-rr", "seed": 1, "quorum": 1.5}, 422, "invalid_request"),
        ({"protocol": "hetero-mean-rr", "seed": 1, "round_deadline_s": 0}, 422, "invalid_request"),
        ({"protocol": "hetero-mean-rr", "seed": 1, "enrollment_target": 0}, 422, "invalid_request"),
        ({"protocol": "hetero-mean-rr", "seed": 1, "surprise": True}, 422, "invalid_request"),
        # Admitted by the wire schema, but not storable: refused, never a 500.
        (
            {"protocol": "hetero-mean-rr", "seed": 1, "round_deadline_s": 1e300},
            422,
            "invalid_request",
        ),
        (
            {"protocol": "hetero-mean-rr", "seed": 1, "enrollment_deadline_s": 1e12},
            422,
            "invalid_request",
        ),
        (
            {"protocol": "hetero-mean-rr", "seed": 1, "enrollment_target": 2**31},
            422,
            "invalid_request",
        ),
        ({"protocol": "hetero-mean-rr", "seed": 1, "name": "nul\u0000"}, 422, "invalid_request"),
    ],
)
async def test_bad_study_is_refused_and_not_stored(
    client: httpx.AsyncClient, body: dict[str, Any], status: int, code: str
) -> None:
    expect_error(await client.post("/v1/studies", json=body), status, code)
    assert await no_studies(client)


async def test_invalid_params_name_the_problem(client: httpx.AsyncClient) -> None:
    body = {"protocol": "user-mean", "params": {"samples_per_user": -3}, "seed": 1}
    error = expect_error(await client.post("/v1/studies", json=body), 422, "invalid_params")
    assert "samples_per_user" in error.detail


# --------------------------------------------------------------------------- enrollment


@pytest.mark.parametrize("participant", [{}, {"epsilon": "high"}, {"epsilon": 1, "x": 2}])
async def test_enrollment_needs_an_epsilon(
    client: httpx.AsyncClient, participant: dict[str, Any]
) -> None:
    study = await create_study(client, "hetero-mean-rr")
    url = f"/v1/studies/{study.id}/participants"
    expect_error(await client.post(url, json=participant), 422, "invalid_request")
    batch = {"participants": [{"epsilon": 1.0}, participant]}
    expect_error(await client.post(f"{url}/batch", json=batch), 422, "invalid_request")
    assert (await study_view(client, study.id)).n_participants == 0


@pytest.mark.parametrize("eps", [0, 0.0, -0.0, -1.0, -1e300])
async def test_a_non_positive_epsilon_is_out_of_range(
    client: httpx.AsyncClient, eps: float
) -> None:
    """Issue 23: ε <= 0 got the generic invalid_request (the wire's own bound), unlike every
    other ε outside the study's range: now the same epsilon_out_of_range, in the single and
    both batch forms."""
    study = await create_study(client, "hetero-mean-rr")
    url = f"/v1/studies/{study.id}/participants"
    body = expect_error(await client.post(url, json={"epsilon": eps}), 422, "epsilon_out_of_range")
    assert "1e-06 <= ε <= 1000" in body.detail
    for batch in (
        {"participants": [{"epsilon": 1.0}, {"epsilon": eps}]},
        {"epsilons": [1.0, eps]},
    ):
        body = expect_error(
            await client.post(f"{url}/batch", json=batch), 422, "epsilon_out_of_range"
        )
        assert "participant 1" in body.detail
    assert (await study_view(client, study.id)).n_participants == 0


@pytest.mark.parametrize("raw", [b'{"epsilon": NaN}', b'{"epsilon": Infinity}'])
async def test_enrollment_refuses_a_non_finite_epsilon(
    client: httpx.AsyncClient, raw: bytes
) -> None:
    study = await create_study(client, "hetero-mean-rr")
    response = await client.post(
        f"/v1/studies/{study.id}/participants",
        content=raw,
        headers={"Content-Type": "application/json"},
    )
    expect_error(response, 422, "invalid_request")
    assert (await study_view(client, study.id)).n_participants == 0


@pytest.mark.parametrize("tiny", [1e-310, 1e-320])
async def test_a_subnormal_epsilon_is_refused_at_enrollment(
    client: httpx.AsyncClient, tiny: float
) -> None:
    """Issue 14: a central-wme participant with a subnormal ε was enrolled, and closing the
    round then raised (500 on the last report, the study running forever). It is now refused."""
    study = await create_study(client, "central-wme")
    url = f"/v1/studies/{study.id}/participants"
    both = {"participants": [{"epsilon": 1.0}, {"epsilon": tiny}]}
    body = expect_error(await client.post(f"{url}/batch", json=both), 422, "epsilon_out_of_range")
    assert "1e-06 <= ε <= 1000" in body.detail
    expect_error(await client.post(url, json={"epsilon": tiny}), 422, "epsilon_out_of_range")
    assert (await study_view(client, study.id)).n_participants == 0

    people = await enroll(client, study.id, [1.0, 1.0])  # the reproduction, with a valid ε
    await start(client, study.id)
    for person in people:
        report = {
            "participant_id": person.participant_id,
            "token": person.token,
            "round": 0,
            "payload": {"kind": "statistic", "values": [0.3, 4]},
        }
        response = await client.post(f"/v1/studies/{study.id}/reports", json=report)
        assert response.status_code == 201, response.text
    result = ResultView.model_validate_json(
        (await client.get(f"/v1/studies/{study.id}/result")).content
    )
    assert result.phase == "finished"
    assert isinstance(result.estimate, float)


@pytest.mark.parametrize("eps", [EPSILON_MIN / 2, EPSILON_MAX * 2])
async def test_enrollment_refuses_an_epsilon_outside_the_global_range(
    client: httpx.AsyncClient, eps: float
) -> None:
    study = await create_study(client, "hetero-mean-rr")
    assert (study.epsilon_min, study.epsilon_max) == (EPSILON_MIN, EPSILON_MAX)
    columns = {"epsilons": [1.0, eps, 1.0]}
    url = f"/v1/studies/{study.id}/participants/batch"
    body = expect_error(await client.post(url, json=columns), 422, "epsilon_out_of_range")
    assert "participant 1" in body.detail
    await enroll(client, study.id, [EPSILON_MIN, EPSILON_MAX])  # the bounds are inside


async def test_a_study_declares_the_epsilon_range_it_accepts(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "central-wme", epsilon_min=0.5, epsilon_max=4)
    assert (study.epsilon_min, study.epsilon_max) == (0.5, 4.0)
    assert (await study_view(client, study.id)).epsilon_min == 0.5
    url = f"/v1/studies/{study.id}/participants"
    for eps in (0.1, 4.5):
        body = expect_error(
            await client.post(url, json={"epsilon": eps}), 422, "epsilon_out_of_range"
        )
        assert "0.5 <= ε <= 4" in body.detail
    await enroll(client, study.id, [0.5, 1.0, 4.0])
    assert (await study_view(client, study.id)).n_participants == 3


@pytest.mark.parametrize(
    "bounds",
    [
        {"epsilon_min": 2.0, "epsilon_max": 1.0},
        {"epsilon_min": EPSILON_MIN / 10},
        {"epsilon_max": EPSILON_MAX * 10},
        {"epsilon_min": 0},
        {"epsilon_min": EPSILON_MAX * 2},  # above the global maximum when no maximum is given
    ],
)
async def test_a_study_epsilon_range_must_lie_in_the_global_one(
    client: httpx.AsyncClient, bounds: dict[str, float]
) -> None:
    body = {"protocol": "central-wme", "seed": 1, **bounds}
    expect_error(await client.post("/v1/studies", json=body), 422, "invalid_request")
    assert await no_studies(client)


async def test_empty_enrollment_batch_is_refused(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    expect_error(
        await client.post(f"/v1/studies/{study.id}/participants/batch", json={"participants": []}),
        422,
        "invalid_request",
    )


async def test_enrollment_into_a_started_study_is_refused(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    await enroll(client, study.id, [1.0, 1.0])
    await start(client, study.id)
    url = f"/v1/studies/{study.id}/participants"
    expect_error(await client.post(url, json={"epsilon": 1.0}), 409, "study_not_enrolling")
    expect_error(
        await client.post(f"{url}/batch", json={"participants": [{"epsilon": 1.0}]}),
        409,
        "study_not_enrolling",
    )
    view = await study_view(client, study.id)
    assert view.n_participants == 2
    assert view.rounds[0].expected == 2


async def test_a_target_reached_by_participants_too_few_for_a_plan_leaves_it_enrolling(
    client: httpx.AsyncClient,
) -> None:
    """user-mean (4 stage-one bins) accepts a target of 600 (enough at ε ≥ 1), but 600
    participants at ε = 0.5 need 2400 (§1.5): reaching the target does not fail the study; it
    stays enrolling with the reason in its view, and an explicit start says why it cannot."""
    study = await create_study(client, "user-mean", {"samples_per_user": 64}, enrollment_target=600)
    await enroll(client, study.id, [0.5] * 600)
    view = await study_view(client, study.id)
    assert (view.phase, view.failure_reason, view.n_participants) == ("enrolling", None, 600)
    assert len(view.warnings) == 1
    assert view.warnings[0].startswith(
        "not started when it reached its enrollment target: the plan is infeasible"
    )
    error = expect_error(await client.post(f"/v1/studies/{study.id}/start"), 422, "plan_infeasible")
    assert error.detail.endswith("it is still enrolling")
    cancelled = await client.post(f"/v1/studies/{study.id}/cancel")
    assert cancelled.status_code == 200, cancelled.text


async def test_reaching_the_enrollment_target_starts_the_study(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr", enrollment_target=5)
    await enroll(client, study.id, [1.0] * 3)
    assert (await study_view(client, study.id)).phase == "enrolling"
    # More than the target has room for is refused whole.
    expect_error(
        await client.post(
            f"/v1/studies/{study.id}/participants/batch",
            json={"participants": [{"epsilon": 1.0}] * 3},
        ),
        409,
        "enrollment_full",
    )
    assert (await study_view(client, study.id)).n_participants == 3
    response = await client.post(
        f"/v1/studies/{study.id}/participants/batch", json={"participants": [{"epsilon": 1.0}] * 2}
    )
    assert response.status_code == 201
    ids = [
        e.participant_id for e in EnrollmentBatch.model_validate_json(response.content).enrollments
    ]
    assert ids == [3, 4]
    view = await study_view(client, study.id)
    assert view.phase == "running"
    assert view.current_round == 0
    assert (await round_of(client, study.id, 0)).expected == 5
    expect_error(
        await client.post(f"/v1/studies/{study.id}/participants", json={"epsilon": 1.0}),
        409,
        "study_not_enrolling",
    )


# --------------------------------------------------------------------------- start


async def test_start_without_participants_is_refused_and_the_study_keeps_enrolling(
    client: httpx.AsyncClient,
) -> None:
    study = await create_study(client, "hetero-mean-rr")
    error = expect_error(await client.post(f"/v1/studies/{study.id}/start"), 422, "plan_infeasible")
    assert "no participants" in error.detail
    assert "still enrolling" in error.detail
    view = await study_view(client, study.id)
    assert (view.phase, view.failure_reason, view.rounds) == ("enrolling", None, [])
    await enroll(client, study.id, [1.0])
    assert (await start(client, study.id)).phase in ("running", "finished")


@pytest.mark.parametrize(
    ("params", "epsilons", "reason", "more"),
    [
        # 64 samples → 4 bins: stage one needs a score Σ min(ε², 1) ≥ 300 (§1.5); it has 5,
        # and 600 participants at ε = 1 give its 300 stage-one users exactly 300
        ({"samples_per_user": 64}, [1.0] * 10, "stage one", 590),
        ({"samples_per_user": 4}, [1.0], "at least 2 participants", 1),
    ],
)
async def test_an_infeasible_start_is_refused_and_more_participants_make_it_feasible(
    client: httpx.AsyncClient, params: dict[str, Any], epsilons: list[float], reason: str, more: int
) -> None:
    study = await create_study(client, "user-mean", params)
    await enroll(client, study.id, epsilons)
    error = expect_error(await client.post(f"/v1/studies/{study.id}/start"), 422, "plan_infeasible")
    assert reason in error.detail
    view = await study_view(client, study.id)
    assert (view.phase, view.failure_reason, view.rounds) == ("enrolling", None, [])
    if more > 1:  # one short of feasible: still refused
        await enroll(client, study.id, [1.0] * (more - 1))
        expect_error(await client.post(f"/v1/studies/{study.id}/start"), 422, "plan_infeasible")
    await enroll(client, study.id, [1.0])
    view = await start(client, study.id)
    assert view.phase == "running"
    assert view.n_participants == len(epsilons) + more


async def test_start_twice_is_refused(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    await enroll(client, study.id, [1.0])
    await start(client, study.id)
    expect_error(await client.post(f"/v1/studies/{study.id}/start"), 409, "study_not_enrolling")
    assert (await study_view(client, study.id)).phase == "running"


# --------------------------------------------------------------------------- results


async def test_result_before_the_end_is_not_ready(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    await enroll(client, study.id, [1.0, 1.0])
    expect_error(await client.get(f"/v1/studies/{study.id}/result"), 409, "not_finished")
    await start(client, study.id)
    expect_error(await client.get(f"/v1/studies/{study.id}/result"), 409, "not_finished")


async def test_unknown_round_is_not_found(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    expect_error(await client.get(f"/v1/studies/{study.id}/rounds/0"), 404, "unknown_round")
    await enroll(client, study.id, [1.0])
    await start(client, study.id)
    for index in (1, 2**31 - 1):
        expect_error(
            await client.get(f"/v1/studies/{study.id}/rounds/{index}"), 404, "unknown_round"
        )
    for index in (-1, 2**31, 2**40, 2**64):  # outside the indexes' range: refused before lookup
        expect_error(
            await client.get(f"/v1/studies/{study.id}/rounds/{index}"), 422, "invalid_request"
        )


ROUTES = [
    ("GET", "/v1/studies/{sid}", None),
    ("POST", "/v1/studies/{sid}/start", None),
    ("POST", "/v1/studies/{sid}/cancel", None),
    ("POST", "/v1/studies/{sid}/participants", {"epsilon": 1.0}),
    ("POST", "/v1/studies/{sid}/participants/batch", {"participants": [{"epsilon": 1.0}]}),
    ("GET", "/v1/studies/{sid}/participants/0/task", None),
    ("POST", "/v1/studies/{sid}/tasks", {"participant_ids": [0], "tokens": ["t"]}),
    (
        "POST",
        "/v1/studies/{sid}/reports",
        {"participant_id": 0, "token": "t", "round": 0, "payload": {"kind": "bit", "bit": 1}},
    ),
    (
        "POST",
        "/v1/studies/{sid}/reports/batch",
        {"round": 0, "kind": "bit", "participant_ids": [0], "tokens": ["t"], "payloads": [[1.0]]},
    ),
    ("GET", "/v1/studies/{sid}/rounds", None),
    ("GET", "/v1/studies/{sid}/rounds/0", None),
    ("GET", "/v1/studies/{sid}/result", None),
    ("GET", "/v1/studies/{sid}/participants/0/budget", None),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
async def test_unknown_study_is_not_found(
    client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None
) -> None:
    # A real study exists, so the lookup is by id and not "the only one there is".
    await create_study(client, "hetero-mean-rr")
    response = await client.request(
        method,
        path.format(sid="0123456789abcdef0123456789abcdef"),
        json=body,
        headers={"Authorization": "Bearer t"},
    )
    expect_error(response, 404, "unknown_study")


# --------------------------------------------------------------------------- leased enrollment


async def lease(client: httpx.AsyncClient, study_id: str, size: int) -> Lease:
    response = await client.post(f"/v1/studies/{study_id}/leases", json={"size": size})
    assert response.status_code == 201, response.text
    return Lease.model_validate_json(response.content)


async def enroll_lease(client: httpx.AsyncClient, study_id: str, block: Lease) -> list[Enrollment]:
    body = {
        "participants": [
            {"epsilon": 1.0, "participant_id": pid} for pid in range(block.start, block.stop)
        ]
    }
    response = await client.post(
        f"/v1/studies/{study_id}/participants/batch", json=body, headers=bearer(block.token)
    )
    assert response.status_code == 201, response.text
    return EnrollmentBatch.model_validate_json(response.content).enrollments


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_leases_hand_out_disjoint_blocks_up_to_the_target(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr", enrollment_target=10)
    blocks = [await lease(client, study.id, 4) for _ in range(3)]
    assert [(b.study_id, b.start, b.stop) for b in blocks] == [
        (study.id, 0, 4),
        (study.id, 4, 8),
        (study.id, 8, 10),  # cut at the target
    ]
    expect_error(
        await client.post(f"/v1/studies/{study.id}/leases", json={"size": 1}),
        409,
        "nothing_to_lease",
    )
    for size in (0, 50_001):
        expect_error(
            await client.post(f"/v1/studies/{study.id}/leases", json={"size": size}),
            422,
            "invalid_request",
        )


async def test_leases_need_an_enrolling_study(client: httpx.AsyncClient) -> None:
    open_ended = await create_study(client, "hetero-mean-rr")  # no target: ids up to MAX_ID
    block = await lease(client, open_ended.id, 5)
    assert (block.start, block.stop) == (0, 5)
    study = await create_study(client, "hetero-mean-rr", enrollment_target=2)
    await enroll(client, study.id, [1.0, 1.0])  # the target starts it
    expect_error(
        await client.post(f"/v1/studies/{study.id}/leases", json={"size": 5}),
        409,
        "study_not_enrolling",
    )


async def test_leased_blocks_enrolled_in_any_order_start_the_study(
    client: httpx.AsyncClient,
) -> None:
    study = await create_study(client, "hetero-mean-rr", enrollment_target=6)
    low, high = await lease(client, study.id, 3), await lease(client, study.id, 3)
    late = await enroll_lease(client, study.id, high)  # the second swarm is faster
    assert [e.participant_id for e in late] == [3, 4, 5]
    # Its participants already ask for their tasks (a swarm polls right after enrolling).
    for e in late:
        response = await client.get(
            f"/v1/studies/{study.id}/participants/{e.participant_id}/task",
            headers={"Authorization": f"Bearer {e.token}"},
        )
        assert response.status_code == 200, response.text
        assert TASK.validate_json(response.content).kind == "wait"
    await batch_tasks(client, study.id, late)
    assert (await study_view(client, study.id)).phase == "enrolling"

    await enroll_lease(client, study.id, low)
    view = await study_view(client, study.id)
    assert (view.phase, view.n_participants) == ("running", 6)
    assert (await round_of(client, study.id, 0)).expected == 6


async def test_leased_ids_are_checked(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr", enrollment_target=4)
    url = f"/v1/studies/{study.id}/participants/batch"
    block = await lease(client, study.id, 2)  # ids 0 and 1
    cases: list[tuple[list[dict[str, Any]], int, str]] = [
        ([{"epsilon": 1.0, "participant_id": 2}], 403, "not_leased"),  # beyond the lease
        ([{"epsilon": 1.0, "participant_id": 4}], 403, "not_leased"),  # beyond the target
        ([{"epsilon": 1.0, "participant_id": 0}, {"epsilon": 1.0}], 422, "invalid_request"),
        ([{"epsilon": 1.0, "participant_id": 1}] * 2, 422, "invalid_request"),
    ]
    for participants, status, code in cases:
        response = await client.post(
            url, json={"participants": participants}, headers=bearer(block.token)
        )
        expect_error(response, status, code)
    assert (await study_view(client, study.id)).n_participants == 0
    open_ended = await create_study(client, "hetero-mean-rr")  # no target to bound the ids
    for pid in (2**31, 2**64):
        expect_error(
            await client.post(
                f"/v1/studies/{open_ended.id}/participants",
                json={"epsilon": 1.0, "participant_id": pid},
                headers=bearer(block.token),
            ),
            422,
            "invalid_request",
        )
    assert (await study_view(client, open_ended.id)).n_participants == 0

    one = {"participants": [{"epsilon": 1.0, "participant_id": 1}]}
    first = await client.post(url, json=one, headers=bearer(block.token))
    assert first.status_code == 201
    again = await client.post(url, json=one, headers=bearer(block.token))
    expect_error(again, 409, "participant_exists")
    # Server-numbered enrollment takes ids outside every lease.
    numbered = await client.post(url, json={"participants": [{"epsilon": 1.0}]})
    assert numbered.status_code == 201, numbered.text
    assert EnrollmentBatch.model_validate_json(numbered.content).participant_ids == [2]
    assert (await study_view(client, study.id)).n_participants == 2


async def test_enrollment_batches_of_consecutive_ids_get_a_block_token(
    client: httpx.AsyncClient,
) -> None:
    study = await create_study(client, "hetero-mean-rr", enrollment_target=12)
    url = f"/v1/studies/{study.id}/participants/batch"

    async def enrolled(body: dict[str, Any], block: Lease | None = None) -> EnrollmentBatch:
        headers = None if block is None else bearer(block.token)
        response = await client.post(url, json=body, headers=headers)
        assert response.status_code == 201, response.text
        return EnrollmentBatch.model_validate_json(response.content)

    numbered = await enrolled({"epsilons": [1.0] * 3})
    explicit = await enrolled(
        {"epsilons": [1.0] * 3, "participant_ids": [5, 3, 4]}, await lease(client, study.id, 3)
    )
    gapped = await enrolled(
        {"epsilons": [1.0] * 2, "participant_ids": [6, 8]}, await lease(client, study.id, 3)
    )
    single = await enrolled(
        {"participants": [{"epsilon": 1.0, "participant_id": 10}]}, await lease(client, study.id, 2)
    )
    assert [(b.start, b.stop) if b else None for b in (numbered.block, explicit.block)] == [
        (0, 3),
        (3, 6),
    ]
    assert gapped.block is None
    assert single.block is not None
    assert (single.block.start, single.block.stop) == (10, 11)
    tokens = {b.token for b in (numbered.block, explicit.block, single.block) if b is not None}
    assert len(tokens) == 3
    assert not tokens & {*numbered.tokens, *explicit.tokens, *single.tokens}


async def test_enrollment_may_answer_with_the_block_token_only(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr", enrollment_target=12)
    url = f"/v1/studies/{study.id}/participants/batch"
    numbered = await client.post(url, json={"epsilons": [1.0] * 3, "block_only": True})
    assert numbered.status_code == 201, numbered.text
    answer = EnrollmentBatch.model_validate_json(numbered.content)
    assert (answer.participant_ids, answer.tokens) == ([0, 1, 2], [])
    assert answer.block is not None
    assert (answer.block.start, answer.block.stop) == (0, 3)
    with pytest.raises(ValueError, match="block token only"):
        _ = answer.enrollments
    block = await lease(client, study.id, 3)
    listed = await client.post(
        url,
        json={
            "participants": [{"epsilon": 1.0, "participant_id": p} for p in (4, 3)],
            "block_only": True,
        },
        headers=bearer(block.token),
    )
    assert listed.status_code == 201, listed.text
    assert EnrollmentBatch.model_validate_json(listed.content).tokens == []
    gapped = {"epsilons": [1.0] * 2, "participant_ids": [3, 5], "block_only": True}
    response = await client.post(url, json=gapped, headers=bearer(block.token))
    expect_error(response, 422, "invalid_request")
    assert (await study_view(client, study.id)).n_participants == 5


async def test_start_refuses_leased_blocks_with_gaps(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr", enrollment_target=6)
    first = await lease(client, study.id, 3)
    await enroll_lease(client, study.id, await lease(client, study.id, 3))
    error = expect_error(await client.post(f"/v1/studies/{study.id}/start"), 422, "plan_infeasible")
    assert "contiguous" in error.detail
    view = await study_view(client, study.id)
    assert (view.phase, view.failure_reason) == ("enrolling", None)
    await enroll_lease(client, study.id, first)  # the gap filled: the target starts it
    assert (await study_view(client, study.id)).phase == "running"


async def test_an_enrollment_target_below_the_minimum_population_is_refused(
    client: httpx.AsyncClient,
) -> None:
    """user-mean with 4 stage-one bins needs 2·⌈300/min(ε², 1)⌉ participants (§1.5): 600 at
    the most favourable ε the study accepts (ε ≥ 1), 60 000 if it accepts only ε ≤ 0.1."""
    params = {"samples_per_user": 64}
    body = {"protocol": "user-mean", "params": params, "seed": 1, "enrollment_target": 599}
    error = expect_error(await client.post("/v1/studies", json=body), 422, "population_too_small")
    assert "at least 600" in error.detail
    await create_study(client, "user-mean", params, enrollment_target=600)
    capped = {**body, "enrollment_target": 59_999, "epsilon_max": 0.1}
    error = expect_error(await client.post("/v1/studies", json=capped), 422, "population_too_small")
    assert "at least 60000" in error.detail
    await create_study(client, "user-mean", params, enrollment_target=60_000, epsilon_max=0.1)
    # 16 samples: 2 bins, where stage one cannot fail; 2 participants are enough
    await create_study(client, "user-mean", {"samples_per_user": 16}, enrollment_target=2)
    expect_error(
        await client.post("/v1/studies", json={**body, "params": {"samples_per_user": 16},
                                               "enrollment_target": 1}),
        422,
        "population_too_small",
    )  # fmt: skip


@pytest.mark.parametrize("name", sorted(CATALOGUE))
async def test_every_protocol_refuses_an_enrollment_target_below_its_minimum(
    client: httpx.AsyncClient, name: str
) -> None:
    """At ε ≤ 1 (epsilon_max): a target of the protocol's minimum is created, one below is
    refused (with the catalogue's probed parameters, and a dimension where the minimum
    depends on one)."""
    protocol = CATALOGUE[name]
    params = {**protocol.population_probe, **dict.fromkeys(protocol.population_depends_on(), 3)}
    if "samples_per_user" in protocol.params_model.model_fields:
        params["samples_per_user"] = 64
    needed = protocol.min_participants(1.0, protocol.parse_params(params))
    assert needed is not None
    body = {"protocol": name, "params": params, "seed": 1, "epsilon_max": 1.0}
    if needed > 1:
        below = {**body, "enrollment_target": needed - 1}
        error = expect_error(await client.post("/v1/studies", json=below), 422,
                             "population_too_small")  # fmt: skip
        assert f"at least {needed}" in error.detail
    await create_study(client, name, params, seed=1, epsilon_max=1.0, enrollment_target=needed)


async def test_study_names_are_unique(client: httpx.AsyncClient) -> None:
    await create_study(client, "hetero-mean-rr", name="shared")
    expect_error(  # the same declaration: the caller may join it
        await client.post(
            "/v1/studies", json={"protocol": "hetero-mean-rr", "seed": 7, "name": "shared"}
        ),
        409,
        "study_exists",
    )
    error = expect_error(  # another one: refused, naming what differs
        await client.post(
            "/v1/studies", json={"protocol": "hetero-mean-laplace", "seed": 2, "name": "shared"}
        ),
        409,
        "study_mismatch",
    )
    assert "protocol" in error.detail
    await create_study(client, "hetero-mean-rr")  # unnamed studies never clash
    await create_study(client, "hetero-mean-rr")
    listed = StudyList.model_validate_json((await client.get("/v1/studies")).content)
    assert [s.name for s in listed.studies] == ["shared", None, None]


@pytest.mark.parametrize(
    ("field", "value"),
    [("quorum", 0.5), ("round_deadline_s", 30.0), ("epsilon_min", 0.5), ("epsilon_max", 2.0)],
)
async def test_a_join_declares_the_rules_of_the_rounds(
    client: httpx.AsyncClient, field: str, value: float
) -> None:
    """Joining a study by name with another quorum, round deadline or ε range would run the
    joiner's users under the creator's rules and print the creator's result under the joiner's
    flags: ``study_mismatch`` naming the field; the same declaration may join."""
    body = {"protocol": "hetero-mean-rr", "seed": 7, "name": "rules"}
    await create_study(client, "hetero-mean-rr", name="rules")
    expect_error(await client.post("/v1/studies", json=body), 409, "study_exists")
    other = {**body, field: value}
    error = expect_error(await client.post("/v1/studies", json=other), 409, "study_mismatch")
    assert field in error.detail

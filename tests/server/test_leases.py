"""Leases are enforced (fedldp.server.services.leases): explicit ids need their lease's token and
must lie in it, server-numbered ids never fall in a leased block and never get stuck, and a lease
not fully enrolled in time expires and goes to the next caller."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import update

from fedldp.protocol.core.wire import EnrollmentBatch, Lease, StudyView
from fedldp.server.store.tables import LeaseRow, utcnow
from tests.server.helpers import app_context, create_study, expect_error


async def lease(client: httpx.AsyncClient, study_id: str, size: int) -> Lease:
    response = await client.post(f"/v1/studies/{study_id}/leases", json={"size": size})
    assert response.status_code == 201, response.text
    return Lease.model_validate_json(response.content)


async def enroll(
    client: httpx.AsyncClient, study_id: str, ids: list[int] | None, token: str | None = None
) -> httpx.Response:
    body: dict[str, Any] = {"epsilons": [1.0] * (len(ids) if ids else 1)}
    if ids is not None:
        body["participant_ids"] = ids
    headers = None if token is None else {"Authorization": f"Bearer {token}"}
    return await client.post(
        f"/v1/studies/{study_id}/participants/batch", json=body, headers=headers
    )


def ids_of(response: httpx.Response) -> list[int]:
    assert response.status_code == 201, response.text
    return EnrollmentBatch.model_validate_json(response.content).participant_ids


async def enrolled(client: httpx.AsyncClient, study: StudyView) -> int:
    response = await client.get(f"/v1/studies/{study.id}")
    return StudyView.model_validate_json(response.content).n_participants


async def test_no_caller_enrolls_another_callers_ids(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr", enrollment_target=10)
    mine, theirs = await lease(client, study.id, 5), await lease(client, study.id, 5)
    assert (mine.start, mine.stop, theirs.start, theirs.stop) == (0, 5, 5, 10)
    assert mine.token != theirs.token
    expect_error(await enroll(client, study.id, [7]), 401, "token_required")
    expect_error(await enroll(client, study.id, [7], mine.token), 403, "not_leased")  # theirs
    expect_error(await enroll(client, study.id, [4, 5], mine.token), 403, "not_leased")  # across
    expect_error(await enroll(client, study.id, [2], "forged"), 403, "not_leased")
    single = await client.post(
        f"/v1/studies/{study.id}/participants",
        json={"epsilon": 1.0, "participant_id": 6},
        headers={"Authorization": f"Bearer {mine.token}"},
    )
    expect_error(single, 403, "not_leased")
    assert await enrolled(client, study) == 0
    assert ids_of(await enroll(client, study.id, [3, 4], mine.token)) == [3, 4]
    assert ids_of(await enroll(client, study.id, [9], theirs.token)) == [9]


async def test_an_id_enrolls_once(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    block = await lease(client, study.id, 3)
    assert ids_of(await enroll(client, study.id, [1], block.token)) == [1]
    expect_error(await enroll(client, study.id, [1], block.token), 409, "participant_exists")
    expect_error(await enroll(client, study.id, [0, 1], block.token), 409, "participant_exists")
    assert await enrolled(client, study) == 1


async def test_server_numbered_ids_skip_leased_blocks_and_never_get_stuck(
    client: httpx.AsyncClient,
) -> None:
    """Issue 14: after one explicit enrollment of id 5, server numbering gave 1-4 and then 409
    for ever (it counted participants and ran into id 5)."""
    study = await create_study(client, "hetero-mean-rr")
    block = await lease(client, study.id, 6)  # ids 0..5
    assert ids_of(await enroll(client, study.id, [5], block.token)) == [5]
    numbered = [pid for _ in range(8) for pid in ids_of(await enroll(client, study.id, None))]
    assert numbered == list(range(6, 14))  # outside the lease, distinct, no 409
    later = await lease(client, study.id, 2)
    assert (later.start, later.stop) == (14, 16)  # and leases skip server-numbered ids
    assert ids_of(await enroll(client, study.id, None)) == [16]
    assert await enrolled(client, study) == 10


async def test_server_numbering_stops_at_the_target_outside_leases(
    client: httpx.AsyncClient,
) -> None:
    study = await create_study(client, "hetero-mean-rr", enrollment_target=4)
    await lease(client, study.id, 3)
    assert ids_of(await enroll(client, study.id, None)) == [3]
    expect_error(await enroll(client, study.id, None), 409, "enrollment_full")


async def test_an_expired_lease_goes_to_the_next_caller(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    study = await create_study(client, "hetero-mean-rr", enrollment_target=4)
    first = await lease(client, study.id, 4)
    assert first.expires_at is not None
    ttl = app_context(app).settings.lease_ttl_s
    assert abs((first.expires_at - utcnow()).total_seconds() - ttl) < 60
    expect_error(
        await client.post(f"/v1/studies/{study.id}/leases", json={"size": 4}),
        409,
        "nothing_to_lease",
    )
    assert ids_of(await enroll(client, study.id, [0], first.token)) == [0]
    with app_context(app).transaction() as session:  # the TTL passes
        session.execute(update(LeaseRow).values(expires_at=utcnow() - timedelta(seconds=1)))
    expect_error(await enroll(client, study.id, [1], first.token), 409, "lease_expired")
    second = await lease(client, study.id, 4)
    assert (second.start, second.stop) == (first.start, first.stop)
    assert second.token != first.token
    expect_error(await enroll(client, study.id, [1], first.token), 403, "not_leased")
    expect_error(await enroll(client, study.id, [0], second.token), 409, "participant_exists")
    assert ids_of(await enroll(client, study.id, [1, 2, 3], second.token)) == [1, 2, 3]
    response = await client.get(f"/v1/studies/{study.id}")
    assert StudyView.model_validate_json(response.content).phase == "running"  # target met


async def test_a_fully_enrolled_lease_does_not_expire(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    study = await create_study(client, "hetero-mean-rr", enrollment_target=6)
    first = await lease(client, study.id, 2)
    assert ids_of(await enroll(client, study.id, [0, 1], first.token)) == [0, 1]
    with app_context(app).transaction() as session:
        session.execute(update(LeaseRow).values(expires_at=utcnow() - timedelta(seconds=1)))
    second = await lease(client, study.id, 2)
    assert (second.start, second.stop) == (2, 4)  # the enrolled block is not handed out again


async def test_a_leased_study_enrolls_only_lease_holders(client: httpx.AsyncClient) -> None:
    """Issue 23 item 0: in a study whose policy is ``leased`` an anonymous enrollment (single or
    batch, server-numbered) is refused with 403 ``enrollment_closed`` and stores nothing; the
    lease holders enroll their block as before, and the view states the policy."""
    study = await create_study(client, "hetero-mean-rr", enrollment_target=6, enrollment="leased")
    assert study.enrollment == "leased"
    block = await lease(client, study.id, 6)
    single = await client.post(f"/v1/studies/{study.id}/participants", json={"epsilon": 1.0})
    error = expect_error(single, 403, "enrollment_closed")
    assert "leased" in error.detail
    expect_error(await enroll(client, study.id, None), 403, "enrollment_closed")
    assert await enrolled(client, study) == 0
    assert ids_of(await enroll(client, study.id, [0, 1, 2], block.token)) == [0, 1, 2]
    expect_error(await enroll(client, study.id, [3]), 401, "token_required")
    assert ids_of(await enroll(client, study.id, [3, 4, 5], block.token)) == [3, 4, 5]
    view = StudyView.model_validate_json((await client.get(f"/v1/studies/{study.id}")).content)
    assert (view.phase, view.enrollment) == ("running", "leased")


async def test_open_is_the_default_policy_and_a_join_declares_it(
    client: httpx.AsyncClient,
) -> None:
    """A study created without a policy is open (anyone enrolls, numbered outside the leases);
    joining a study by name with another policy than its creator's is ``study_mismatch``
    naming the field, so a leasing swarm never joins a study that anyone may enroll in."""
    study = await create_study(client, "hetero-mean-rr", name="policy")
    assert study.enrollment == "open"
    block = await lease(client, study.id, 2)
    assert ids_of(await enroll(client, study.id, None)) == [2]
    assert ids_of(await enroll(client, study.id, [0, 1], block.token)) == [0, 1]
    body = {"protocol": "hetero-mean-rr", "seed": 7, "name": "policy", "enrollment": "leased"}
    error = expect_error(await client.post("/v1/studies", json=body), 409, "study_mismatch")
    assert "enrollment" in error.detail
    body["enrollment"] = "anyone"
    expect_error(await client.post("/v1/studies", json=body), 422, "invalid_request")

"""The API client (client/api/client.py): error codes map to the exception tree, retries follow the
policy.

Everything runs against ``httpx.MockTransport``; ``sleep`` is replaced by a recorder, so the tests
see every backoff delay without waiting for it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from fedldp.client.api.client import (
    ApiClient,
    ApiError,
    AuthError,
    InvalidRequestError,
    NotFoundError,
    PhaseError,
    ReportRejectedError,
    RetryPolicy,
    ServerError,
    StudyConfigError,
    UnavailableError,
    error_for,
    parse_retry_after,
)
from fedldp.client.api.retry import failure_reason
from fedldp.protocol.core.wire import EnrollRequest, ReportSubmit, ScalarPayload, StudyCreate

Handler = Callable[[httpx.Request], httpx.Response]

RECEIPT = {
    "participant_id": 3,
    "round": 1,
    "digest": "abc",
    "received_at": "2024-01-01T00:00:00Z",
    "duplicate": False,
}
REPORT = ReportSubmit(participant_id=3, token="t3", round=1, payload=ScalarPayload(value=0.25))


class Recorder:
    """Stands in for asyncio.sleep: records the delays instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def make_client(
    handler: Handler, policy: RetryPolicy | None = None, admin_key: str | None = None
) -> tuple[ApiClient, Recorder, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    sleep = Recorder()
    client = ApiClient(
        "http://fedldp.test",
        transport=httpx.MockTransport(record),
        retry=policy or RetryPolicy(attempts=4, base_delay=0.1, max_delay=1.0),
        sleep=sleep,
        rng=random.Random(7),
        admin_key=admin_key,
    )
    return client, sleep, seen


def error(status: int, code: str, detail: str = "why", **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"code": code, "detail": detail}, headers=headers)


def sequence(*responses: httpx.Response | Exception) -> Handler:
    """A handler that plays the given answers (or raises the given errors) in order."""
    queue = list(responses)

    def handler(request: httpx.Request) -> httpx.Response:
        item = queue.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    return handler


# --------------------------------------------------------------------------- error codes

CODES: list[tuple[str, int, type[ApiError]]] = [
    ("unknown_study", 404, NotFoundError),
    ("unknown_participant", 404, NotFoundError),
    ("invalid_token", 401, AuthError),
    ("admin_key_required", 401, AuthError),
    ("admin_key_invalid", 403, AuthError),
    ("study_not_enrolling", 409, PhaseError),
    ("study_not_running", 409, PhaseError),
    ("round_closed", 409, PhaseError),
    ("wrong_round", 409, PhaseError),
    ("not_finished", 409, PhaseError),
    ("duplicate_conflict", 409, ReportRejectedError),
    ("invalid_payload", 422, ReportRejectedError),
    ("invalid_epsilon", 422, ReportRejectedError),
    ("budget_exceeded", 409, ReportRejectedError),
    ("unknown_protocol", 404, StudyConfigError),
    ("invalid_params", 422, StudyConfigError),
    ("plan_infeasible", 422, StudyConfigError),
    ("population_too_small", 422, StudyConfigError),
    ("invalid_request", 422, InvalidRequestError),
    ("epsilon_out_of_range", 422, InvalidRequestError),
    ("internal_error", 500, ServerError),
]


@pytest.mark.parametrize(("code", "status", "family"), CODES)
async def test_error_codes_map_to_the_exception_tree(
    code: str, status: int, family: type[ApiError]
) -> None:
    client, sleep, seen = make_client(lambda _: error(status, code, "the reason"))
    async with client:
        with pytest.raises(ApiError) as info:
            await client.submit_report("s1", REPORT)
    assert type(info.value) is family
    assert (info.value.code, info.value.status, info.value.detail) == (code, status, "the reason")
    assert info.value.server_side is (status >= 500)
    assert len(seen) == 1  # a 4xx (or a 500) is never retried
    assert sleep.delays == []


def test_error_families_cover_every_documented_code() -> None:
    for code, status, family in CODES:
        assert type(error_for(code, "d", status)) is family


@pytest.mark.parametrize(
    ("status", "family"),
    [(404, NotFoundError), (401, AuthError), (409, PhaseError), (400, InvalidRequestError),
     (502, ServerError), (418, ApiError)],
)  # fmt: skip
def test_unknown_codes_fall_back_on_the_status(status: int, family: type[ApiError]) -> None:
    assert type(error_for("new_code", "d", status)) is family


async def test_a_body_that_is_not_an_error_body_still_maps() -> None:
    client, _, _ = make_client(lambda _: httpx.Response(502, text="<html>bad gateway</html>"))
    async with client:
        with pytest.raises(ServerError) as info:
            await client.study("s1")
    assert info.value.code == "http_502"
    assert "bad gateway" in info.value.detail


async def test_a_success_with_a_wrong_body_is_a_server_error() -> None:
    client, _, _ = make_client(lambda _: httpx.Response(200, json={"status": "fine"}))
    async with client:
        with pytest.raises(ServerError) as info:
            await client.health()
    assert info.value.code == "invalid_response"


# --------------------------------------------------------------------------- retries


async def test_503_is_retried_with_growing_jittered_backoff() -> None:
    client, sleep, seen = make_client(
        sequence(
            error(503, "busy"), error(503, "busy"), error(503, "busy"),
            httpx.Response(201, json=RECEIPT),
        )
    )  # fmt: skip
    async with client:
        receipt = await client.submit_report("s1", REPORT)
    assert receipt.participant_id == 3
    assert len(seen) == 4
    assert client.retries == 3
    # equal jitter: retry r waits in [½, 1] × min(max_delay, base·2^(r−1))
    for r, delay in enumerate(sleep.delays, start=1):
        step = min(1.0, 0.1 * 2 ** (r - 1))
        assert step / 2 <= delay <= step
    assert sleep.delays[0] < sleep.delays[1] < sleep.delays[2]
    # every try carries the same body
    assert len({req.content for req in seen}) == 1


async def test_429_honours_retry_after() -> None:
    client, sleep, seen = make_client(
        sequence(
            error(429, "slow_down", **{"Retry-After": "2.5"}), httpx.Response(201, json=RECEIPT)
        )
    )
    async with client:
        await client.submit_report("s1", REPORT)
    assert sleep.delays == [2.5]
    assert len(seen) == 2


async def test_retry_after_is_capped() -> None:
    policy = RetryPolicy(attempts=2, max_retry_after=3.0)
    client, sleep, _ = make_client(
        sequence(error(503, "busy", **{"Retry-After": "3600"}), httpx.Response(201, json=RECEIPT)),
        policy,
    )
    async with client:
        await client.submit_report("s1", REPORT)
    assert sleep.delays == [3.0]


def test_retry_after_accepts_http_dates() -> None:
    now = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after(later, now) == 30.0
    assert parse_retry_after("7", now) == 7.0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None


async def test_gives_up_after_the_last_attempt() -> None:
    client, sleep, seen = make_client(lambda _: error(503, "overloaded", "try later"))
    async with client:
        with pytest.raises(UnavailableError) as info:
            await client.study("s1")
    assert (info.value.code, info.value.status, info.value.detail) == (
        "overloaded",
        503,
        "try later",
    )
    assert info.value.server_side
    assert len(seen) == 4
    assert len(sleep.delays) == 3


async def test_connection_errors_are_retried_even_for_non_idempotent_requests() -> None:
    refused = httpx.ConnectError("connection refused")
    enrolled = httpx.Response(201, json={"participant_id": 0, "token": "tok"})
    client, sleep, seen = make_client(sequence(refused, refused, enrolled))
    async with client:
        enrollment = await client.enroll("s1", EnrollRequest(epsilon=1.0))
    assert enrollment.token == "tok"
    assert len(seen) == 3
    assert len(sleep.delays) == 2


async def test_connection_errors_give_up_as_unreachable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client, _, seen = make_client(refuse)
    async with client:
        with pytest.raises(UnavailableError) as info:
            await client.health()
    assert info.value.code == "unreachable"
    assert "connection refused" in info.value.detail
    assert len(seen) == 4


@pytest.mark.parametrize(
    "failure", [httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("server disconnected")]
)
async def test_idempotent_requests_are_retried_after_a_lost_answer(failure: Exception) -> None:
    client, _, seen = make_client(sequence(failure, httpx.Response(200, json=RECEIPT)))
    async with client:
        receipt = await client.submit_report("s1", REPORT)  # idempotent by design
    assert receipt.round == 1
    assert len(seen) == 2


@pytest.mark.parametrize(
    "failure", [httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("server disconnected")]
)
async def test_non_idempotent_requests_are_not_retried_after_a_lost_answer(
    failure: Exception,
) -> None:
    client, sleep, seen = make_client(sequence(failure, httpx.Response(201, json={})))
    create = StudyCreate(protocol="user-mean", seed=1)
    async with client:
        with pytest.raises(UnavailableError) as info:
            await client.create_study(create)  # might have been created: must not be resent
    assert info.value.code == "unreachable"
    assert len(seen) == 1
    assert sleep.delays == []


def test_retry_policy_validates() -> None:
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="base_delay"):
        RetryPolicy(base_delay=2.0, max_delay=1.0)


# --------------------------------------------------------------------------- requests


async def test_requests_carry_tokens_admin_key_and_wire_json() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/task"):
            body = {"kind": "wait", "reason": "enrolling", "retry_after_s": 1.5}
            return httpx.Response(200, json=body)
        return error(404, "unknown_study")

    client, _, seen = make_client(handler, admin_key="secret")
    async with client:
        task = await client.task("s1", 5, "tok5")
        with pytest.raises(NotFoundError):
            await client.cancel_study("s1")
        with pytest.raises(NotFoundError):
            await client.submit_report("s1", REPORT)
    assert task.kind == "wait"
    assert task.retry_after_s == 1.5
    get_task, cancel, report = seen
    assert get_task.url.path == "/v1/studies/s1/participants/5/task"
    assert get_task.headers["authorization"] == "Bearer tok5"
    assert "x-admin-key" not in get_task.headers
    assert cancel.headers["x-admin-key"] == "secret"
    assert "x-admin-key" not in report.headers  # the admin key goes only where it is needed
    assert report.headers["authorization"] == "Bearer t3"  # not in the body (deprecated there)
    assert json.loads(report.content) == {
        "participant_id": 3,
        "round": 1,
        "payload": {"kind": "scalar", "value": 0.25},
    }


class Clock:
    """Stands in for time.monotonic and asyncio.sleep together: sleeping advances the clock."""

    def __init__(self) -> None:
        self.now = 100.0
        self.delays: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        self.now += seconds


def refusing_client(policy: RetryPolicy, clock: Clock) -> tuple[ApiClient, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        clock.now += 0.25  # each failed connect takes a while
        raise httpx.ConnectError("connection refused", request=request)

    client = ApiClient(
        "http://fedldp.test",
        transport=httpx.MockTransport(refuse),
        retry=policy,
        sleep=clock.sleep,
        clock=clock,
        rng=random.Random(3),
    )
    return client, seen


async def test_every_retry_is_announced_with_its_delay_and_reason() -> None:
    lines: list[str] = []
    clock = Clock()
    client, seen = refusing_client(RetryPolicy(attempts=4, notify=lines.append), clock)
    async with client:
        with pytest.raises(UnavailableError) as info:
            await client.list_studies()
    assert len(seen) == 4
    assert len(lines) == len(clock.delays) == 3  # one line before each wait, none at the end
    for n, (line, delay) in enumerate(zip(lines, clock.delays, strict=True), start=2):
        assert line == (
            f"GET http://fedldp.test/v1/studies: retrying in {delay:.2g} s "
            f"(connection refused; attempt {n} of 4)…"
        )
    assert "failed 4 times" in info.value.detail


@pytest.mark.parametrize("deadline", [0.0, 1.0, 3.0])
async def test_a_deadline_gives_up_before_the_next_try_would_start_past_it(
    deadline: float,
) -> None:
    lines: list[str] = []
    clock = Clock()
    policy = RetryPolicy(attempts=1000, deadline_s=deadline, notify=lines.append)
    client, seen = refusing_client(policy, clock)
    async with client:
        with pytest.raises(UnavailableError) as info:
            await client.list_studies()
    assert info.value.code == "unreachable"
    elapsed = clock.now - 100.0
    assert elapsed <= deadline + 0.25  # the last try ends at most one connect past the deadline
    # it gave up because the next wait (at most the full backoff step) would have passed it
    step = min(policy.max_delay, policy.base_delay * 2.0 ** (len(seen) - 1))
    assert elapsed + step > deadline
    assert all(f"giving up after {deadline:g} s" in line for line in lines)
    assert len(lines) == len(seen) - 1


def test_connect_failures_are_named() -> None:
    request = httpx.Request("GET", "http://fedldp.test/")
    try:
        try:
            raise ExceptionGroup("connect", [ConnectionRefusedError(111, "refused")])
        except ExceptionGroup as group:
            raise OSError("All connection attempts failed") from group
    except OSError as cause:
        wrapped = httpx.ConnectError("All connection attempts failed", request=request)
        wrapped.__cause__ = cause
    assert failure_reason(wrapped) == "connection refused"
    assert failure_reason(httpx.ConnectError("boom", request=request)) == "cannot connect"
    assert failure_reason(httpx.ConnectTimeout("slow", request=request)) == "connect timed out"
    assert failure_reason(httpx.ReadTimeout("slow", request=request)) == "read timed out"

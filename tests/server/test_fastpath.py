"""The per-user fast path (server/web/fastpath.py) answers byte for byte as FastAPI's routes do.

Each request is sent twice on the same state: to the app (whose ``FastPath`` middleware answers
the well-formed per-user requests) and to a copy of it without that middleware (FastAPI's
routes). Status, headers (but the request id, which differs by design) and body must be equal,
refusals included; a counter on ``FastPath._reply`` shows which requests the fast path served.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import sqlalchemy.exc
from fastapi import FastAPI

from fedldp.protocol.core.wire import Enrollment
from fedldp.server.services import tasks
from fedldp.server.services.grouping import ReportGrouper
from fedldp.server.web.fastpath import FastPath
from tests.server.helpers import create_study, enroll, start

Pair = tuple[httpx.AsyncClient, httpx.AsyncClient]


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths the fast path answered, in order."""
    seen: list[str] = []
    reply = FastPath._reply

    async def counted(scope: Any, receive: Any, send: Any, answer: Any) -> None:
        seen.append(scope["path"])
        await reply(scope, receive, send, answer)

    monkeypatch.setattr(FastPath, "_reply", staticmethod(counted))
    return seen


@pytest.fixture
async def pair(app: FastAPI) -> AsyncIterator[Pair]:
    """A client of the app and one of the same app (same state) without the fast path; both
    get a 500 answer rather than the app's exception."""
    slow = copy.copy(app)
    slow.user_middleware = [m for m in app.user_middleware if m.cls is not FastPath]  # type: ignore[comparison-overlap]
    slow.middleware_stack = None
    assert len(slow.user_middleware) == len(app.user_middleware) - 1
    base = "http://fedldp.test"
    fast_transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    slow_transport = httpx.ASGITransport(app=slow, raise_app_exceptions=False)
    async with (
        httpx.AsyncClient(transport=fast_transport, base_url=base) as fast_client,
        httpx.AsyncClient(transport=slow_transport, base_url=base) as slow_client,
    ):
        yield fast_client, slow_client


def _headers(response: httpx.Response) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in response.headers.raw if k.lower() != b"x-request-id"]


async def same(pair: Pair, method: str, url: str, **kwargs: Any) -> httpx.Response:
    """Ask both; assert the answers are byte for byte equal; the fast path's answer."""
    fast, slow = pair
    a = await fast.request(method, url, **kwargs)
    b = await slow.request(method, url, **kwargs)
    assert (a.status_code, _headers(a), a.content) == (b.status_code, _headers(b), b.content)
    ids = [r.headers.get("x-request-id") for r in (a, b)]
    assert [len(i) if i else None for i in ids] == [32, 32] or ids == [None, None]  # 413: none
    return a


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def report(e: Enrollment, payload: dict[str, Any], round_index: int = 0) -> dict[str, Any]:
    return {"participant_id": e.participant_id, "round": round_index, "payload": payload}


async def test_task_answers_and_refusals_are_fastapis(pair: Pair, served: list[str]) -> None:
    client = pair[0]
    study = await create_study(client, "user-mean", {"samples_per_user": 4})
    people = await enroll(client, study.id, [1.0] * 8)
    url = f"/v1/studies/{study.id}/participants/{{}}/task"
    me = bearer(people[0].token)

    wait = await same(pair, "GET", url.format(0), headers=me)
    assert json.loads(wait.content)["kind"] == "wait"
    await same(pair, "GET", url.format(0) + "?hold=0.05", headers=me)  # held, then "wait"
    assert len(served) == 2
    refusals = [
        ("GET", url.format(0), {}, 401),  # no token
        ("GET", url.format(0), {"Authorization": "Basic abc"}, 401),
        ("GET", url.format(0), {"Authorization": "Bearer "}, 401),
        ("GET", url.format(0), bearer(people[1].token), 401),  # another's token
        ("GET", url.format(99), me, 404),  # no such participant
        ("GET", url.format("00000000000000000099"), me, 404),  # past 18 digits: FastAPI's
        ("GET", f"/v1/studies/{'0' * 32}/participants/0/task", me, 404),
        ("GET", url.format("x"), me, 422),
        ("GET", url.format(0) + "?hold=10.5", me, 422),
        ("GET", url.format(0) + "?hold=-1", me, 422),
        ("GET", url.format(0) + "?hold=soon", me, 422),
        ("PUT", url.format(0), me, 405),
    ]
    for method, path, headers, status in refusals:
        answer = await same(pair, method, path, headers=headers)
        assert answer.status_code == status, (path, headers, answer.text)
    assert len(served) == 2 + 6  # the FastAPI's ones: the 20 digits, "x", the holds, PUT
    fallbacks = ["?hold=1e-3", "?hold=0.05&other=1", "?hold=00.0500"]
    for query in fallbacks:
        assert (await same(pair, "GET", url.format(0) + query, headers=me)).status_code == 200
    assert len(served) == 2 + 6 + 1  # only the last, a plain decimal

    await start(client, study.id)
    kinds = []
    for e in people:
        answer = await same(pair, "GET", url.format(e.participant_id), headers=bearer(e.token))
        kinds.append(json.loads(answer.content)["kind"])
    assert sorted(kinds) == ["report"] * 4 + ["wait"] * 4  # stage one's half reports
    assert len(served) == 2 + 6 + 1 + 8


async def test_report_answers_and_refusals_are_fastapis(pair: Pair, served: list[str]) -> None:
    client = pair[0]
    study = await create_study(client, "hetero-mean-rr")
    people = await enroll(client, study.id, [1.0] * 4)
    url = f"/v1/studies/{study.id}/reports"
    bit = {"kind": "bit", "bit": 1}

    early = await same(
        pair, "POST", url, json=report(people[0], bit), headers=bearer(people[0].token)
    )
    assert early.status_code == 409  # enrolling: not running yet
    await start(client, study.id)
    me = bearer(people[0].token)
    refusals: list[tuple[dict[str, Any], int]] = [
        ({"json": report(people[0], bit)}, 401),  # no token
        ({"json": report(people[0], bit), "headers": bearer(people[1].token)}, 401),
        ({"content": b"{not json", "headers": me}, 422),
        ({"content": b'{"a": "\xff"}', "headers": me}, 415),
        ({"content": b'{"round": 0, "round": 1}', "headers": me}, 422),
        (
            {
                "json": report(people[1], {"kind": "scalar", "value": 0.5}),
                "headers": bearer(people[1].token),
            },
            422,
        ),
        ({"json": report(people[1], bit, 1), "headers": bearer(people[1].token)}, 409),
        ({"json": {**report(people[1], bit), "participant_id": "1"}, "headers": me}, 422),
        (
            {
                "json": report(people[1], {"kind": "bit", "bit": 3}),
                "headers": bearer(people[1].token),
            },
            422,
        ),
        ({"content": b"x" * ((1 << 20) + 1), "headers": me}, 413),
    ]
    for kwargs, status in refusals:
        answer = await same(pair, "POST", url, **kwargs)
        assert answer.status_code == status, (kwargs, answer.text)
    fast, slow = pair
    in_body = {**report(people[0], bit), "token": people[0].token}  # the deprecated place
    assert (await fast.post(url, json=in_body)).status_code == 201
    assert (await same(pair, "POST", url, json=in_body)).status_code == 200  # a resend
    resend = await same(pair, "POST", url, json=report(people[0], bit), headers=me)
    assert resend.status_code == 200
    assert json.loads(resend.content)["duplicate"] is True
    conflict = {"json": report(people[0], {"kind": "bit", "bit": -1}), "headers": me}
    assert (await same(pair, "POST", url, **conflict)).status_code == 409
    other = await same(
        pair, "POST", f"/v1/studies/{'0' * 32}/reports", json=report(people[0], bit), headers=me
    )
    assert other.status_code == 404
    first = await fast.post(url, json=report(people[1], bit), headers=bearer(people[1].token))
    second = await slow.post(url, json=report(people[2], bit), headers=bearer(people[2].token))
    assert first.status_code == second.status_code == 201
    assert _headers(first) == _headers(second)
    a, b = json.loads(first.content), json.loads(second.content)
    assert list(a) == list(b)
    assert a["digest"] == b["digest"]
    assert (
        await fast.post(url + "?x=1", json=report(people[3], bit), headers=bearer(people[3].token))
    ).status_code == 201  # FastAPI's: completes the round
    closed = await same(
        pair, "POST", url, json=report(people[3], bit), headers=bearer(people[3].token)
    )
    assert closed.status_code == 200  # a resend after the round closed: its receipt
    # the fast client's requests but the 413 (BodyLimit's) and "?x=1" (FastAPI's)
    assert served.count(url) == 1 + 9 + 2 + 1 + 1 + 1 + 1
    assert served.count(f"/v1/studies/{'0' * 32}/reports") == 1


@pytest.mark.parametrize(
    ("failure", "status"),
    [
        (sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("database is locked")), 503),
        (sqlalchemy.exc.TimeoutError("QueuePool limit of size 5 overflow 10 reached"), 503),
        (RuntimeError("a bug"), 500),
    ],
)
async def test_database_refusals_and_bugs_are_fastapis(
    pair: Pair, served: list[str], monkeypatch: pytest.MonkeyPatch, failure: Exception, status: int
) -> None:
    client = pair[0]
    study = await create_study(client, "hetero-mean-rr")
    people = await enroll(client, study.id, [1.0] * 2)
    await start(client, study.id)

    async def fail(*args: object) -> None:
        raise failure

    monkeypatch.setattr(tasks, "task_when_ready", fail)
    monkeypatch.setattr(ReportGrouper, "submit", fail)
    me = bearer(people[0].token)
    task = f"/v1/studies/{study.id}/participants/0/task"
    assert (await same(pair, "GET", task, headers=me)).status_code == status
    url = f"/v1/studies/{study.id}/reports"
    answer = await same(
        pair, "POST", url, json=report(people[0], {"kind": "bit", "bit": 1}), headers=me
    )
    assert answer.status_code == status
    assert served == [task, url]

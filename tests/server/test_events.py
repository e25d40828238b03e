"""The study event log and its SSE stream (server/store/eventlog.py, server/services/streams.py).

A swarm runs a two-round study over ``httpx.ASGITransport``; the stored events are then read
through two app instances on one database (as two replicas would), on SQLite and on PostgreSQL:
both serve the same numbered sequence, every resume point gives exactly its suffix, and the
events carry what the REST endpoints show (round outputs, the result).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from fedldp.client.api.client import ApiClient, NotFoundError
from fedldp.client.api.sse import messages
from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population
from fedldp.client.swarm.run import run_swarm
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import (
    EVENT_ADAPTER,
    EpsilonLedgerView,
    PhaseEvent,
    ProgressEvent,
    ResultEvent,
    ResultView,
    RoundClosedEvent,
    RoundOpenedEvent,
    RoundsView,
    StudyEvent,
)
from fedldp.server.services.rounds import sweep
from fedldp.server.settings import Settings
from fedldp.server.store import eventlog
from fedldp.server.web.app import create_app
from tests.server.helpers import app_context, create_study, expect_error

URL = "http://fedldp.test"
SPEC = PopulationSpec(users=400, samples=8, distribution="two-point", mean=0.3)


@pytest.fixture
def replica(settings: Settings) -> Iterator[FastAPI]:
    """A second app on the same database (its own engine and pool, as another replica)."""
    application = create_app(settings, sweeper=False)
    try:
        yield application
    finally:
        app_context(application).db.dispose()


async def run_study(app: FastAPI) -> str:
    protocol = get_protocol("user-mean")
    params = fill_from_population(protocol, {}, build_population(SPEC, 3))
    run = await run_swarm(
        URL,
        population=SPEC,
        seed=3,
        create=("user-mean", params),
        batch=200,
        progress=False,
        transport=httpx.ASGITransport(app=app),
    )
    return run.study_id


async def read_stream(
    app: FastAPI, study_id: str, headers: dict[str, str] | None = None
) -> list[StudyEvent]:
    """Every event of a (finished) study's stream, which then ends by itself."""
    transport = httpx.ASGITransport(app=app)
    path = f"/v1/studies/{study_id}/events"
    async with (
        httpx.AsyncClient(transport=transport, base_url=URL) as http,
        http.stream("GET", path, headers=headers) as r,
    ):
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        return [EVENT_ADAPTER.validate_json(m.data) async for m in messages(r.aiter_lines())]


def stored(events: list[StudyEvent]) -> list[StudyEvent]:
    return [e for e in events if e.id is not None]


async def test_replicas_serve_one_sequence_and_resume_exactly(
    app: FastAPI, replica: FastAPI, client: httpx.AsyncClient
) -> None:
    study_id = await run_study(app)
    one = stored(await read_stream(app, study_id))
    two = stored(await read_stream(replica, study_id))
    assert one == two
    assert [e.id for e in one] == list(range(1, len(one) + 1))
    times = [e.at for e in one]
    assert times == sorted(times), "events numbered in one order are timed in another"
    assert [(e.kind, getattr(e, "index", getattr(e, "phase", None))) for e in one] == [
        ("phase", "enrolling"),
        ("phase", "running"),
        ("round_opened", 0),
        ("round_closed", 0),
        ("round_opened", 1),
        ("round_closed", 1),
        ("result", None),
        ("phase", "finished"),
    ]
    for k in range(len(one) + 1):  # every resume point, on the other replica
        resumed = await read_stream(replica, study_id, {"Last-Event-ID": str(k)})
        assert stored(resumed) == one[k:]
        assert isinstance(resumed[-1], ProgressEvent)  # a snapshot closes each poll
        assert resumed[-1].phase == "finished"

    rounds = RoundsView.model_validate_json(
        (await client.get(f"/v1/studies/{study_id}/rounds")).content
    )
    closed = [e for e in one if isinstance(e, RoundClosedEvent)]
    opened = [e for e in one if isinstance(e, RoundOpenedEvent)]
    assert [e.output for e in closed] == [r.output for r in rounds.rounds]
    assert [e.broadcast for e in opened] == [r.broadcast for r in rounds.rounds]
    assert [e.received for e in closed] == [r.received for r in rounds.rounds]
    result = ResultView.model_validate_json(
        (await client.get(f"/v1/studies/{study_id}/result")).content
    )
    ledger = EpsilonLedgerView.model_validate_json(
        (await client.get(f"/v1/studies/{study_id}/epsilon", params={"bins": 4})).content
    )
    n = result.epsilon_spent.participants
    assert ledger.participants == n == SPEC.users
    assert len(ledger.edges) == 5
    assert ledger.edges[-1] == SPEC.epsilon  # every user declares the same ε
    assert sum(ledger.declared) == sum(ledger.spent) == n
    assert ledger.spent_total == pytest.approx(result.epsilon_spent.mean * n, rel=1e-12)
    assert ledger.spent_max == result.epsilon_spent.max
    bad = await client.get(f"/v1/studies/{study_id}/epsilon", params={"bins": 0})
    expect_error(bad, 422, "invalid_request")
    (ready,) = [e for e in one if isinstance(e, ResultEvent)]
    assert (ready.estimate, ready.error_bar, ready.epsilon_spent) == (
        result.estimate,
        result.error_bar,
        result.epsilon_spent,
    )


async def test_cancel_and_failure_are_events(client: httpx.AsyncClient, app: FastAPI) -> None:
    view = await create_study(client, "hetero-mean-rr")
    assert (await client.post(f"/v1/studies/{view.id}/cancel")).status_code == 200
    events = stored(await read_stream(app, view.id))
    assert events == [
        PhaseEvent(id=1, study_id=view.id, at=events[0].at, phase="enrolling"),
        PhaseEvent(
            id=2,
            study_id=view.id,
            at=events[1].at,
            phase="cancelled",
            reason="cancelled by the administrator",
        ),
    ]
    # An explicit start of an infeasible study leaves it enrolling (recoverable), and so does
    # the start at its enrollment deadline, which is an event with the reason.
    empty = await create_study(client, "hetero-mean-rr", enrollment_deadline_s=0.01)
    expect_error(await client.post(f"/v1/studies/{empty.id}/start"), 422, "plan_infeasible")
    await asyncio.sleep(0.05)
    sweep(app_context(app))
    with app_context(app).transaction() as session:  # its stream stays open: read the log
        snapshot = eventlog.read(session, empty.id, 0, 10)
    assert snapshot is not None
    waiting = snapshot.events
    assert [(e.kind, getattr(e, "phase", None)) for e in waiting] == [
        ("phase", "enrolling"),
        ("phase", "enrolling"),
    ]
    assert isinstance(waiting[1], PhaseEvent)
    assert waiting[1].reason is not None
    assert waiting[1].reason.startswith(
        "not started when its enrollment deadline passed: no participants enrolled"
    )


@pytest.mark.parametrize("header", ["x", "-1", "1.5"])
async def test_a_bad_last_event_id_is_refused(client: httpx.AsyncClient, header: str) -> None:
    view = await create_study(client, "hetero-mean-rr")
    response = await client.get(f"/v1/studies/{view.id}/events", headers={"Last-Event-ID": header})
    expect_error(response, 422, "invalid_request")


async def test_unknown_study_is_404(client: httpx.AsyncClient, app: FastAPI) -> None:
    expect_error(await client.get(f"/v1/studies/{'0' * 32}/events"), 404, "unknown_study")
    async with ApiClient(URL, transport=httpx.ASGITransport(app=app)) as api:
        with pytest.raises(NotFoundError):
            async for _ in api.events("0" * 32):
                pass


class Cutting(httpx.AsyncBaseTransport):
    """Cuts every event stream after its first ``keep`` messages, as a dropped connection (the
    body ends without the study's end); other requests pass through."""

    def __init__(self, app: FastAPI, keep: int) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.keep = keep
        self.resumed_from: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if not request.url.path.endswith("/events"):
            return response
        self.resumed_from.append(request.headers.get("last-event-id", ""))
        body = b"".join([chunk async for chunk in response.aiter_raw()])
        kept = b"".join(part + b"\n\n" for part in body.split(b"\n\n")[: self.keep + 1])
        return httpx.Response(response.status_code, headers=response.headers, content=kept)


async def test_the_client_resumes_a_dropped_stream_without_loss_or_repeats(
    app: FastAPI,
) -> None:
    study_id = await run_study(app)
    full = stored(await read_stream(app, study_id))
    cutting = Cutting(app, keep=3)  # the retry line, then three messages per connection

    async def no_wait(seconds: float) -> None:
        return None

    async with ApiClient(URL, transport=cutting, sleep=no_wait) as api:
        seen: list[Any] = [e async for e in api.events(study_id)]
    assert stored(seen) == full
    assert len(cutting.resumed_from) > 2
    assert cutting.resumed_from[0] == "0"

"""The event stream of a study as Server-Sent Events (``GET /v1/studies/{id}/events``).

The stream polls the database (fedldp.server.store.eventlog), not this process's memory, so every
replica serves the same sequence and a client may resume on any of them: each poll sends the
stored events numbered above the last one sent (``id:`` lines, resumable with ``Last-Event-ID``)
and then a ``progress`` snapshot when the counters changed since the last one sent (no ``id:``:
it is never replayed). Polls are ``events_poll_s`` apart, so a client sees at most that many
snapshots per second however fast reports arrive; a transition made by this process wakes the
poll early. A comment line every ``events_heartbeat_s`` keeps idle connections open through
proxies. The stream ends once the study has ended and its last event was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from fedldp.protocol.core.wire import EventBase
from fedldp.server.errors import UnknownStudy
from fedldp.server.runtime.context import Context
from fedldp.server.store import eventlog

__all__ = ["RETRY_MS", "event_stream", "sse"]

RETRY_MS = 2000
"""How long a disconnected EventSource waits before it reconnects (the SSE ``retry:`` field)."""
PAGE = 500
"""Stored events read per poll (a long backlog is sent over several polls)."""


def sse(event: EventBase) -> bytes:
    """One SSE message: ``id:`` (stored events only), ``event:`` (the kind) and the JSON."""
    kind: str = getattr(event, "kind")  # noqa: B009 (every concrete event has one)
    head = "" if event.id is None else f"id: {event.id}\n"
    return f"{head}event: {kind}\ndata: {event.model_dump_json()}\n\n".encode()


def _poll(ctx: Context, study_id: str, after: int) -> eventlog.Snapshot:
    with ctx.transaction() as session:
        snap = eventlog.read(session, study_id, after, PAGE)
    if snap is None:
        raise UnknownStudy(f"no study {study_id!r}")
    return snap


async def event_stream(ctx: Context, study_id: str, after: int) -> AsyncIterator[bytes]:
    """The study's events after number ``after``, as SSE bytes, until the study has ended
    (UnknownStudy before the first byte if there is no such study)."""
    first = await asyncio.to_thread(_poll, ctx, study_id, after)
    return _messages(ctx, study_id, after, first)


async def _messages(
    ctx: Context, study_id: str, after: int, snap: eventlog.Snapshot
) -> AsyncIterator[bytes]:
    poll_s = ctx.settings.events_poll_s
    heartbeat_s = ctx.settings.events_heartbeat_s
    yield f"retry: {RETRY_MS}\n\n".encode()
    sent = time.monotonic()
    counters: tuple[object, ...] | None = None
    while True:
        out: list[bytes] = []
        for event in snap.events:
            out.append(sse(event))
            after = event.id or after
        p = snap.progress
        now = (p.phase, p.n_participants, p.round, p.received, p.expected)
        if now != counters:
            out.append(sse(p))
            counters = now
        if out:
            yield b"".join(out)
            sent = time.monotonic()
        elif time.monotonic() - sent >= heartbeat_s:
            yield b": keep-alive\n\n"
            sent = time.monotonic()
        if snap.ended:
            return
        if len(snap.events) < PAGE:  # caught up: wait for the next poll (or a transition)
            seen = ctx.transitions.count
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ctx.transitions.wait(seen), poll_s)
            await asyncio.sleep(0)
        snap = await asyncio.to_thread(_poll, ctx, study_id, after)

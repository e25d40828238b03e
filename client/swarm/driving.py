"""What the swarm's agents share in one process: the API client, the study, the request gate, the
wait policy, the threads that privatize and the counters (``fedldp.client.swarm.agents`` for
blocks of users, ``fedldp.client.swarm.peruser`` for one agent per user).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import os
import random
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

from fedldp.client.api.client import ApiClient
from fedldp.client.api.errors import SwarmError
from fedldp.protocol.core.ledger import BudgetExceededError
from fedldp.protocol.core.wire import MAX_BATCH, TaskDone

__all__ = [
    "BATCH_HOLD_S",
    "DELIBERATELY_LATE",
    "LATE",
    "MAX_THREADS",
    "MIN_BLOCK",
    "TASK_HOLD_S",
    "DriveContext",
    "DriveStats",
    "Gate",
    "Quiet",
    "WaitPolicy",
    "auto_batch",
    "checked_threads",
    "default_threads",
    "ended",
    "first_error",
    "refuse_overspend",
    "study_ended_error",
]

TASK_HOLD_S = 5.0
"""How long a task request may wait at the server for the study to move on."""

BATCH_HOLD_S = 10.0
"""How long a block's task request may wait (the server's most, ``MAX_HOLD_S``): each block
polls for the next round as soon as it reported, and every poll that comes back "wait" is a
batch answer worked out again (at 10^7 users, 1,000 blocks' polls through a round, until
``Quiet`` had the waiting blocks share one)."""

P = ParamSpec("P")
R = TypeVar("R")

Told = tuple[str, str]
"""What a batch answer with nothing to do says of the study: its phase and the wait reason."""

LATE = frozenset({"round_closed", "wrong_round"})
"""Report answers that mean "too late for that round" (it closed at its deadline): a dropout."""

DELIBERATELY_LATE = LATE | {"study_not_running"}
"""Answers to a report sent late on purpose (``fedldp.client.behaviour``) or by a slow single
user: the last round may have closed and finished the study by then (the next task request
says whether it finished or failed)."""


@dataclass(frozen=True)
class WaitPolicy:
    """How long an idle agent waits before asking again: the server's hint, growing ×1.5 per
    consecutive wait up to ``max_delay``, with jitter so that agents spread out."""

    min_delay: float = 0.05
    max_delay: float = 2.0

    def delay(self, hint: float, waits: int, rng: random.Random) -> float:
        step = min(self.max_delay, max(self.min_delay, hint) * 1.5 ** max(0, waits - 1))
        return step * (0.5 + 0.5 * rng.random())


@dataclass
class DriveStats:
    """What one process's agents did."""

    reports: int = 0
    late: int = 0
    dropped: int = 0  # users who left (behaviour: dropout)
    refused: int = 0  # attackers' reports the server refused (behaviour: attack)
    joined_late: int = 0  # users refused at enrollment after the start (behaviour: join late)
    task_requests: int = 0
    report_requests: int = 0
    waits: int = 0

    @classmethod
    def total(cls, parts: Iterable[DriveStats]) -> DriveStats:
        """The sum of several processes' (or machines') stats."""
        out = cls()
        for part in parts:
            for name in vars(out):
                setattr(out, name, getattr(out, name) + getattr(part, name))
        return out


class Gate:
    """At most ``capacity`` requests in flight, the urgent ones (reports, which complete rounds)
    let in before the others (task requests, which start more users' work): a swarm of ten
    thousand users queued for their first task request does not hold back the reports of those
    who already have theirs. O(1) per entry and exit."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("concurrency must be >= 1")
        self.free = capacity
        self._queues: tuple[collections.deque[asyncio.Future[None]], ...] = (
            collections.deque(),
            collections.deque(),
        )

    async def enter(self, urgent: bool = False) -> None:
        if self.free > 0 and not any(self._queues):
            self.free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queues[0 if urgent else 1].append(waiter)
        try:
            await waiter  # the slot is handed over by leave()
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.leave()  # handed over as we were cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._queues[0 if urgent else 1].remove(waiter)
            raise

    async def __aenter__(self) -> None:
        await self.enter()

    async def __aexit__(self, *exc_info: object) -> None:
        self.leave()

    @contextlib.asynccontextmanager
    async def urgent(self) -> AsyncIterator[None]:
        """A slot taken as ``async with gate`` does, before the others waiting."""
        await self.enter(urgent=True)
        try:
            yield
        finally:
            self.leave()

    def leave(self) -> None:
        for queue in self._queues:
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self.free += 1


class Quiet:
    """The blocks of a process that are told to wait share one held poll.

    A held task request comes back after ``BATCH_HOLD_S`` with "wait" when the study has not
    moved on, and each block asked again at once: at 10^7 users a thousand blocks waited through
    stage one's minute that way, and 3,367 of the run's 5,367 task requests were such asks, each
    worked out in full by the server (issue 27). Here a block told to wait in the state another
    block's held poll is already watching waits for that poll instead (``wait_unless_polled``);
    any answer that shows the study moved on, or the last poll ending, lets them all ask again.
    """

    def __init__(self) -> None:
        self.told: Told | None = None  # the study's state as the last "wait" answer gave it
        self.polling = 0  # held task requests in flight
        self._moved = asyncio.Event()

    async def wait_unless_polled(self, told: Told | None) -> None:
        """Return once this block should ask: at once unless it was last ``told`` to wait in
        the state the held polls in flight are watching."""
        while told is not None and told == self.told and self.polling > 0:
            await self._moved.wait()

    @contextlib.contextmanager
    def poll(self) -> Iterator[None]:
        """Around a held task request."""
        self.polling += 1
        try:
            yield
        finally:
            self.polling -= 1
            if self.polling == 0:  # nobody watches for the waiting blocks: one of them will
                self._wake()

    def saw(self, told: Told | None) -> None:
        """A held poll's answer: ``told`` to wait (in that state), or None when it had something
        to do (it came back as the study moved on)."""
        if told != self.told:
            self.told = told
            self._wake()

    def _wake(self) -> None:
        self._moved.set()
        self._moved = asyncio.Event()


MAX_THREADS = 4
"""The most threads a swarm process privatizes on by default (``default_threads``)."""


def default_threads() -> int:
    """Threads a batch-mode swarm process privatizes its blocks on: one per CPU, at most
    ``MAX_THREADS``. Drawing a block's data and privatizing it is numpy work, which leaves the
    interpreter lock to the other threads and to the event loop, so a swarm uses the cores its
    server leaves idle; each thread holds one block's data at a time."""
    return max(1, min(MAX_THREADS, os.cpu_count() or 1))


def checked_threads(threads: int | None, batch: int | None) -> int:
    """The threads a swarm process privatizes on: ``threads``, by default ``default_threads()``
    (1 without ``batch``: one agent per user privatizes one user at a time). ValueError if
    ``threads`` is below 1 or given without batch mode."""
    if threads is None:
        return 1 if batch is None else default_threads()
    if batch is None:
        raise ValueError("threads apply to batch mode: give a batch size too")
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    return threads


MIN_BLOCK = 10_000
"""The fewest users ``auto_batch`` puts in a block."""


def auto_batch(users: int, threads: int | None = None, processes: int = 1) -> int:
    """Users per block in batch mode by default: two blocks per privatizing thread (one
    privatized while another's requests are in flight), at least ``MIN_BLOCK`` and at most
    ``MAX_BATCH`` users. Larger blocks mean fewer requests, and a request costs the server about
    2 ms beside its users (routing, its transaction, the answer): 10^6 users in blocks of 50,000
    took 2.2 CPU s of the server's time, in blocks of 10,000 3.5 s (issue 27). ``threads`` as the
    swarm takes it (None: ``default_threads()``; ValueError below 1, as ``checked_threads``);
    ``processes`` below 1 count as one (the swarm refuses them itself)."""
    count = checked_threads(threads, MIN_BLOCK) * max(1, processes)
    per_block = -(-users // (2 * count))
    return max(MIN_BLOCK, min(MAX_BATCH, per_block))


@dataclass
class DriveContext:
    api: ApiClient
    study_id: str
    gate: Gate
    waits: WaitPolicy
    stats: DriveStats
    rng: random.Random = field(default_factory=random.Random)
    pool: concurrent.futures.Executor | None = None
    """Where blocks are privatized; None: on the event loop's thread."""
    quiet: Quiet = field(default_factory=Quiet)

    async def compute(self, function: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``function(*args, **kwargs)`` on the pool's threads (awaited), or here without one."""
        if self.pool is None:
            return function(*args, **kwargs)
        call = functools.partial(function, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self.pool, call)


def ended(task: TaskDone) -> bool:
    """Whether a ``done`` answer means the study failed or was cancelled."""
    return task.phase in ("failed", "cancelled")


async def study_ended_error(api: ApiClient, study_id: str) -> SwarmError:
    """The error for a study that failed or was cancelled, with the server's reason."""
    study = await api.study(study_id)
    reason = study.failure_reason or "no reason given"
    return SwarmError(f"study_{study.phase}", f"study {study_id} {study.phase}: {reason}")


def refuse_overspend(respond: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    try:
        return respond(*args, **kwargs)
    except BudgetExceededError as exc:
        raise SwarmError("budget_exceeded", f"refused to privatize: {exc}") from exc


def first_error(errors: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf of an exception group (the failure that stopped the others)."""
    first = errors.exceptions[0]
    return first_error(first) if isinstance(first, BaseExceptionGroup) else first

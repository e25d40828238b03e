"""The swarm's work loops in one process: users (or blocks of users) poll tasks and post reports.

Two kinds of agent share one loop (ask for work, answer report tasks, back off on ``wait``, stop on
``done``):

* ``UserAgent``: one simulated user over the single-participant endpoints (``GET .../task``,
  ``POST .../reports``), as a real device would;
* ``BlockAgent``: a contiguous block of users over the batch endpoints (``POST .../tasks``,
  ``POST .../reports/batch``), privatizing each round's cohort members of the block in one
  vectorised call. Streams are per participant, so its payloads equal the ``UserAgent``s' bit for
  bit.

``drive`` runs a roster of users with at most ``concurrency`` requests in flight
(``asyncio.Semaphore``). A study that fails or is cancelled stops every agent with a
``SwarmError`` carrying the server's reason.
"""

from __future__ import annotations

import asyncio
import functools
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

import numpy as np

from fedldp.client.http.api import ApiClient, PhaseError, ReportRejectedError
from fedldp.client.http.user import Privatizer, SimulatedUser, UserBlock
from fedldp.protocol.core.base import FloatArray, IntArray
from fedldp.protocol.core.ledger import BudgetExceededError
from fedldp.protocol.core.wire import (
    MAX_BLOCKS,
    BlockToken,
    Credentials,
    ReportBatch,
    ReportSubmit,
    RoundTasks,
    Task,
    TaskBatchRequest,
    TaskDone,
    TaskWait,
    pack_rows,
)

__all__ = ["DriveStats", "Roster", "SwarmError", "WaitPolicy", "drive"]

TASK_HOLD_S = 5.0
"""How long a block's task request may wait at the server for the study to move on."""

LATE = frozenset({"round_closed", "wrong_round"})
"""Report answers that mean "too late for that round" (it closed at its deadline): a dropout."""

DELIBERATELY_LATE = LATE | {"study_not_running"}
"""Answers to a report sent late on purpose (``fedldp.client.behaviour``) or by a slow single
user: the last round may have closed and finished the study by then (the next task request
says whether it finished or failed)."""


class SwarmError(Exception):
    """The swarm cannot go on: a stable ``code`` and a ``detail`` (like ``ApiError``)."""

    def __init__(self, code: str, detail: str, server_side: bool = False) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.server_side = server_side

    def __reduce__(self) -> tuple[type[SwarmError], tuple[str, str, bool]]:
        return (type(self), (self.code, self.detail, self.server_side))  # crosses processes


@dataclass(frozen=True)
class Roster:
    """Enrolled users: slots (population indices), their server ids and tokens, declared ε's,
    and the block tokens the server gave for blocks of them (see ``credentials``). ``tokens``
    is empty when the block tokens cover every user (enrolled with the block tokens only)."""

    slots: IntArray
    participant_ids: list[int]
    tokens: list[str]
    epsilon: FloatArray
    blocks: tuple[BlockToken, ...] = ()

    def __post_init__(self) -> None:
        n = self.slots.shape[0]
        tokens = len(self.tokens) if self.tokens or not self._blocks_cover else n
        if not (len(self.participant_ids) == tokens == self.epsilon.shape[0] == n):
            raise ValueError("a roster needs one id, token (or covering block) and ε per slot")

    def __len__(self) -> int:
        return int(self.slots.shape[0])

    def part(self, start: int, stop: int) -> Roster:
        ids = self.participant_ids[start:stop]
        low, high = (min(ids), max(ids)) if ids else (0, -1)
        return Roster(
            self.slots[start:stop],
            ids,
            self.tokens[start:stop],
            self.epsilon[start:stop],
            tuple(b for b in self.blocks if b.start <= high and b.stop > low),  # its blocks
        )

    @functools.cached_property
    def ids(self) -> IntArray:
        """The participant ids as an array."""
        return np.asarray(self.participant_ids, dtype=np.int64)

    @functools.cached_property
    def _by_id(self) -> IntArray:
        return np.argsort(self.ids, kind="stable")

    def positions(self, participant_ids: Sequence[int]) -> IntArray:
        """Where these participants are in the roster; SwarmError if one is not."""
        wanted = np.asarray(participant_ids, dtype=np.int64)
        order = self._by_id
        found = order[np.minimum(np.searchsorted(self.ids[order], wanted), len(order) - 1)]
        if wanted.size and (not len(order) or np.any(self.ids[found] != wanted)):
            raise SwarmError(
                "unknown_participants",
                "the server answered for participants this swarm did not ask about",
                server_side=True,
            )
        return found

    @functools.cached_property
    def _blocks_cover(self) -> bool:
        """Whether the block tokens cover every user of the roster."""
        if not self.blocks:
            return False
        inside = np.zeros(self.ids.shape, dtype=np.bool_)
        for b in self.blocks:
            inside |= (self.ids >= b.start) & (self.ids < b.stop)
        return bool(inside.all())

    def credentials(self, positions: IntArray) -> Credentials:
        """Credentials of the users at ``positions``: the block tokens of their blocks when the
        roster's blocks cover it (a short string for thousands of users), else their tokens."""
        if self._blocks_cover and positions.size:
            ids = self.ids[positions]
            low, high = int(ids.min()), int(ids.max())
            blocks = [b for b in self.blocks if b.start <= high and b.stop > low]
            if len(blocks) <= MAX_BLOCKS:
                return Credentials(blocks=blocks)
        return Credentials(tokens=[self.tokens[i] for i in positions])


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


@dataclass
class _Context:
    api: ApiClient
    study_id: str
    gate: asyncio.Semaphore
    waits: WaitPolicy
    stats: DriveStats
    rng: random.Random = field(default_factory=random.Random)


def _ended(task: TaskDone) -> bool:
    return task.phase in ("failed", "cancelled")


async def study_ended_error(api: ApiClient, study_id: str) -> SwarmError:
    """The error for a study that failed or was cancelled, with the server's reason."""
    study = await api.study(study_id)
    reason = study.failure_reason or "no reason given"
    return SwarmError(f"study_{study.phase}", f"study {study_id} {study.phase}: {reason}")


class _Agent(ABC):
    def __init__(self, ctx: _Context) -> None:
        self.ctx = ctx

    async def run(self) -> None:
        waits = 0
        while True:
            hint = await self.step()
            if hint is None:
                return
            if hint == 0.0:
                waits = 0
                continue
            waits += 1
            self.ctx.stats.waits += 1
            await asyncio.sleep(self.ctx.waits.delay(hint, waits, self.ctx.rng))

    @abstractmethod
    async def step(self) -> float | None:
        """One round trip: None when finished, 0 after reporting, else the wait hint (s)."""


class UserAgent(_Agent):
    def __init__(self, ctx: _Context, user: SimulatedUser) -> None:
        super().__init__(ctx)
        self.user = user

    async def step(self) -> float | None:
        ctx, user = self.ctx, self.user
        assert user.participant_id is not None
        assert user.token is not None
        async with ctx.gate:
            task: Task = await ctx.api.task(ctx.study_id, user.participant_id, user.token)
        ctx.stats.task_requests += 1
        if isinstance(task, TaskDone):
            if _ended(task):
                raise await study_ended_error(ctx.api, ctx.study_id)
            return None
        if isinstance(task, TaskWait):
            return max(task.retry_after_s, 1e-3)
        delay = 0.0
        roles = user.privatizer.roles
        if roles is not None:
            slot = np.array([user.slot], dtype=np.int64)
            if not roles.present(slot, task.round)[0]:
                ctx.stats.dropped += 1
                return None  # it left: it never answers again
            delay = roles.behaviour.late_delay_s if roles.late(slot)[0] else 0.0
        payload = _refuse_overspend(user.respond, task)
        report = ReportSubmit(
            participant_id=user.participant_id, token=user.token, round=task.round, payload=payload
        )
        if delay:
            await asyncio.sleep(delay)
        try:
            async with ctx.gate:
                await ctx.api.submit_report(ctx.study_id, report)
        except PhaseError as exc:
            if exc.code not in DELIBERATELY_LATE:
                raise
            ctx.stats.late += 1
        except ReportRejectedError:
            if roles is None or not roles.attackers(np.array([user.slot]))[0]:
                raise
            ctx.stats.refused += 1  # behaviour: an attacker's report failed the checks
            return None  # and it gives up
        else:
            ctx.stats.reports += 1
        ctx.stats.report_requests += 1
        return 0.0


class BlockAgent(_Agent):
    def __init__(self, ctx: _Context, roster: Roster, privatizer: Privatizer) -> None:
        super().__init__(ctx)
        self.roster = roster
        self.block = UserBlock(roster.slots, roster.epsilon, privatizer)
        self.active = np.ones(len(roster), dtype=np.bool_)
        # behaviour: users whose late answer is on its way are not asked for tasks meanwhile
        self.holding = np.zeros(len(roster), dtype=np.bool_)
        self.late_posts: list[asyncio.Task[None]] = []

    async def run(self) -> None:
        while True:
            await super().run()
            if not self.late_posts:
                return
            posts, self.late_posts = self.late_posts, []
            await asyncio.gather(*posts)

    async def step(self) -> float | None:
        ctx, roster = self.ctx, self.roster
        positions = np.flatnonzero(self.active & ~self.holding)
        if positions.size == 0:
            return None
        sign = roster.credentials(positions)
        request = TaskBatchRequest(
            participant_ids=roster.ids[positions].tolist(), tokens=sign.tokens, blocks=sign.blocks
        )
        # Outside the gate: a held poll must not keep other blocks from reporting (the pool has a
        # connection per block beside the gate's, see run_swarm).
        answer = await ctx.api.tasks(ctx.study_id, request, hold=TASK_HOLD_S)
        ctx.stats.task_requests += 1
        if answer.done and answer.phase in ("failed", "cancelled"):
            raise await study_ended_error(ctx.api, ctx.study_id)
        self.active[roster.positions(answer.done)] = False
        for tasks in sorted(answer.reports, key=lambda rt: rt.round):
            await self._report(tasks, roster.positions(tasks.participant_ids))
        if not (self.active & ~self.holding).any():
            return None
        if answer.reports or answer.done:  # the block changed: ask again for the rest at once
            return 0.0
        return max(answer.retry_after_s, 1e-3)

    async def _report(self, tasks: RoundTasks, positions: IntArray) -> None:
        k = tasks.round
        epsilons = np.asarray(tasks.epsilons, dtype=np.float64)
        groups = np.asarray(tasks.groups, dtype=np.int64)
        late = np.zeros(positions.shape, dtype=np.bool_)
        roles = self.block.privatizer.roles
        if roles is not None:  # behaviour: who left before round k, who answers late
            slots = self.roster.slots[positions]
            there = roles.present(slots, k)
            self.active[positions[~there]] = False
            self.ctx.stats.dropped += int(np.count_nonzero(~there))
            positions, epsilons, groups = positions[there], epsilons[there], groups[there]
            late = roles.late(slots[there])
        if positions.size == 0:
            return
        rows = _refuse_overspend(self.block.respond, tasks.task(0), positions, epsilons, groups)
        if not late.all():
            await self._post(tasks, positions[~late], rows[~late], LATE)
        if late.any():  # in the background: the others go on to the next rounds meanwhile
            assert roles is not None
            self.holding[positions[late]] = True
            later = self._post_later(
                roles.behaviour.late_delay_s, tasks, positions[late], rows[late]
            )
            self.late_posts.append(asyncio.create_task(later))

    async def _post_later(
        self, delay: float, tasks: RoundTasks, positions: IntArray, rows: FloatArray
    ) -> None:
        await asyncio.sleep(delay)
        try:
            await self._post(tasks, positions, rows, DELIBERATELY_LATE)
        finally:
            self.holding[positions] = False

    async def _post(
        self, tasks: RoundTasks, positions: IntArray, rows: FloatArray, late_codes: frozenset[str]
    ) -> None:
        ctx, roster = self.ctx, self.roster
        k = tasks.round
        sign = roster.credentials(positions)
        batch = ReportBatch(
            round=k,
            kind=tasks.payload_kind,
            participant_ids=roster.ids[positions].tolist(),
            tokens=sign.tokens,
            blocks=sign.blocks,
            packed=pack_rows(rows),
        )
        try:
            async with ctx.gate:
                receipt = await ctx.api.submit_reports(ctx.study_id, batch)
        except PhaseError as exc:
            if exc.code not in late_codes:
                raise
            # The round closed before the batch got in, as for a late UserAgent: at its deadline,
            # or, for a batch resent after a lost answer, because the first send completed it.
            ctx.stats.report_requests += 1
            ctx.stats.late += len(batch.participant_ids)
            return
        ctx.stats.report_requests += 1
        late = [item for item in receipt.items if item.code in LATE]
        failed = [item for item in receipt.items if item.code not in LATE]
        roles = self.block.privatizer.roles
        if failed and roles is not None:  # behaviour: an attacker's refused report is counted
            where = roster.positions([item.participant_id for item in failed])
            attacker = roles.attackers(roster.slots[where])
            ctx.stats.refused += int(np.count_nonzero(attacker))
            self.active[where[attacker]] = False  # a refused fake user gives up
            failed = [item for item, bad in zip(failed, attacker, strict=True) if not bad]
        if failed:
            first = failed[0]
            raise SwarmError(
                "report_rejected",
                f"the server rejected {len(failed)} report(s) of round {k}; participant "
                f"{first.participant_id}: {first.code}: {first.detail}",
            )
        ctx.stats.reports += receipt.accepted + receipt.duplicates
        ctx.stats.late += len(late)


P = ParamSpec("P")
R = TypeVar("R")


def _refuse_overspend(respond: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    try:
        return respond(*args, **kwargs)
    except BudgetExceededError as exc:
        raise SwarmError("budget_exceeded", f"refused to privatize: {exc}") from exc


async def drive(
    api: ApiClient,
    study_id: str,
    roster: Roster,
    privatizer: Privatizer,
    *,
    batch: int | None,
    concurrency: int,
    waits: WaitPolicy | None = None,
) -> DriveStats:
    """Run ``roster``'s users until each is done: one ``UserAgent`` per user (``batch`` None) or
    one ``BlockAgent`` per block of ``batch`` consecutive users."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    ctx = _Context(
        api, study_id, asyncio.Semaphore(concurrency), waits or WaitPolicy(), DriveStats()
    )
    agents: list[_Agent]
    if batch is None:
        if len(roster) and not roster.tokens:
            raise ValueError("single-participant agents need each participant's token")
        agents = [
            UserAgent(
                ctx,
                SimulatedUser(int(slot), float(eps), privatizer, pid, token),
            )
            for slot, pid, token, eps in zip(
                roster.slots, roster.participant_ids, roster.tokens, roster.epsilon, strict=True
            )
        ]
    else:
        if batch < 1:
            raise ValueError("batch size must be >= 1")
        agents = [
            BlockAgent(ctx, roster.part(start, start + batch), privatizer)
            for start in range(0, len(roster), batch)
        ]
    try:
        async with asyncio.TaskGroup() as group:
            for agent in agents:
                group.create_task(agent.run())
    except BaseExceptionGroup as errors:
        raise first_error(errors) from None
    return ctx.stats


def first_error(errors: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf of an exception group (the failure that stopped the others)."""
    first = errors.exceptions[0]
    return first_error(first) if isinstance(first, BaseExceptionGroup) else first

"""The swarm's work loops in one process: users (or blocks of users) ask for tasks and post reports.

Two modes:

* one agent per user (``fedldp.client.swarm.peruser``) over the single-participant endpoints
  (``GET .../task``, ``POST .../reports``), as real devices would;
* ``BlockAgent``: a contiguous block of users over the batch endpoints (``POST .../tasks``,
  ``POST .../reports/batch``), privatizing each round's cohort members of the block in one
  vectorised call. Streams are per participant, so its payloads equal the single users' bit for
  bit.

``drive`` runs a roster of users with at most ``concurrency`` requests in flight (a ``Gate``). A
study that fails or is cancelled stops every agent with a ``SwarmError`` carrying the server's
reason.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedldp.client.api.client import ApiClient
from fedldp.client.api.errors import PhaseError, SwarmError
from fedldp.client.swarm.driving import (
    BATCH_HOLD_S,
    DELIBERATELY_LATE,
    LATE,
    DriveContext,
    DriveStats,
    Gate,
    Told,
    WaitPolicy,
    checked_threads,
    first_error,
    refuse_overspend,
    study_ended_error,
)
from fedldp.client.swarm.peruser import run_users
from fedldp.client.swarm.prefetch import Prefetch
from fedldp.client.swarm.roster import Roster
from fedldp.client.swarm.user import Privatizer, UserBlock
from fedldp.protocol.core.base.records import FloatArray, IntArray
from fedldp.protocol.core.wire import (
    BatchReceipt,
    Credentials,
    RoundTasks,
    TaskReport,
)
from fedldp.protocol.core.wire.binary import encode_batch

__all__ = ["DriveStats", "Roster", "SwarmError", "WaitPolicy", "drive", "first_error"]


class _Agent(ABC):
    def __init__(self, ctx: DriveContext) -> None:
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


class BlockAgent(_Agent):
    def __init__(self, ctx: DriveContext, roster: Roster, privatizer: Privatizer) -> None:
        super().__init__(ctx)
        self.roster = roster
        self.block = UserBlock(roster.slots, roster.epsilon, privatizer)
        self.active = np.ones(len(roster), dtype=np.bool_)
        # behaviour: users whose late answer is on its way are not asked for tasks meanwhile
        self.holding = np.zeros(len(roster), dtype=np.bool_)
        self.late_posts: list[asyncio.Task[None]] = []
        self.asked = False  # whether the block has asked for tasks yet
        self.told: Told | None = None  # the study's state when the block was last told to wait

    async def run(self) -> None:
        while True:
            await super().run()
            if not self.late_posts:
                return
            posts, self.late_posts = self.late_posts, []
            await asyncio.gather(*posts)

    async def step(self) -> float | None:
        ctx, roster = self.ctx, self.roster
        if not (self.active & ~self.holding).any():
            return None
        held = self.asked
        if held:
            # Outside the gate: a held poll must not keep other blocks from reporting (the pool
            # has a connection per block beside the gate's, see run_swarm). The request is made
            # in the call: the client keeps its bytes only, not its list of Python ints, through
            # the poll. A block told to wait lets another block's poll watch for it (Quiet).
            await ctx.quiet.wait_unless_polled(self.told)
            with ctx.quiet.poll():
                answer = await ctx.api.tasks(ctx.study_id, self._ask(), hold=BATCH_HOLD_S)
        else:
            # A block's first ask goes through the gate, after the reports waiting for it, and
            # is answered at once: at the start every block asks, and the server, working out
            # a hundred answers side by side, sent the first ones late while the reports of the
            # blocks it had answered queued behind them (half a second of stage one at 10^6).
            async with ctx.gate:
                answer = await ctx.api.tasks(ctx.study_id, self._ask())
            self.asked = True
        ctx.stats.task_requests += 1
        if answer.done and answer.phase in ("failed", "cancelled"):
            raise await study_ended_error(ctx.api, ctx.study_id)
        self.active[roster.positions(answer.done)] = False
        # the answer's lists as arrays, before waiting for a slot to report: a thousand blocks'
        # answers at 10^7 users held 600 MB of Python ints while the blocks queued (issue 27)
        due = [_Due.of(tasks, roster) for tasks in sorted(answer.reports, key=lambda rt: rt.round)]
        changed, retry_after = bool(answer.reports or answer.done), answer.retry_after_s
        waits = not changed and bool(answer.waiting)
        self.told = (answer.phase, answer.wait_reason) if waits else None
        if held:  # a first ask's tasks say nothing of the study moving on; a held poll's do
            ctx.quiet.saw(self.told)
        del answer
        for tasks in due:
            await self._report(tasks)
        if not (self.active & ~self.holding).any():
            return None
        if changed:  # the block changed: ask again for the rest at once
            return 0.0
        return max(retry_after, 1e-3)

    def _ask(self) -> bytes:
        """The task request of the block's users still going (and not holding a late answer),
        as a binary batch body."""
        positions = np.flatnonzero(self.active & ~self.holding)
        # the swarm's own bodies, from its own arrays, go binary (fedldp.protocol.core.wire.
        # binary): neither side formats or parses each batch's 10^4 ids as text
        ids = self.roster.ids[positions]
        return encode_batch(
            _credentials(self.roster.credentials(positions)), {"participant_ids": ids}
        )

    async def _report(self, due: _Due) -> None:
        tasks, positions, epsilons, groups = due.tasks, due.positions, due.epsilons, due.groups
        k = tasks.round
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
        task = due.task()
        # privatized once a slot is free (the payload rows of blocks queued for one are not held)
        async with self.ctx.gate.urgent():
            rows = await self.ctx.compute(
                refuse_overspend, self.block.respond, task, positions, epsilons, groups
            )
            if not late.all():
                await self._post(tasks, positions[~late], rows[~late], LATE, gated=True)
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
        self,
        tasks: RoundTasks,
        positions: IntArray,
        rows: FloatArray,
        late_codes: frozenset[str],
        gated: bool = False,
    ) -> None:
        """Post the rows of the users at ``positions``; ``gated``: the caller holds a slot of
        the gate (else this takes one)."""
        ctx, roster, k = self.ctx, self.roster, tasks.round
        try:
            async with contextlib.nullcontext() if gated else ctx.gate.urgent():
                receipt = await self._send(tasks, positions, rows)
        except PhaseError as exc:
            if exc.code not in late_codes:
                raise
            # The round closed before the batch got in, as for a late single user: at its deadline,
            # or, for a batch resent after a lost answer, because the first send completed it.
            ctx.stats.report_requests += 1
            ctx.stats.late += int(positions.size)
            self._finish(tasks, positions)
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
        self._finish(tasks, positions)

    def _finish(self, tasks: RoundTasks, positions: IntArray) -> None:
        """The users at ``positions`` are done once their reports of ``tasks`` are in (or
        late) when it was their last task (``final``): the block asks no more for them (at the
        end of a study, one task request less per block)."""
        if tasks.final:
            self.active[positions] = False

    async def _send(self, tasks: RoundTasks, positions: IntArray, rows: FloatArray) -> BatchReceipt:
        """One report batch, built once its slot is taken (its lists are not held while
        queued)."""
        fields = {"round": tasks.round, "kind": tasks.payload_kind}
        fields |= _credentials(self.roster.credentials(positions))
        arrays = {"participant_ids": self.roster.ids[positions], "payloads": rows}
        batch = encode_batch(fields, arrays)  # the rows as float64 arrays, not base64
        return await self.ctx.api.submit_reports(self.ctx.study_id, batch)


def _credentials(sign: Credentials) -> dict[str, Any]:
    """The JSON fields of a batch body's credentials."""
    if sign.blocks is not None:
        return {"blocks": [block.model_dump() for block in sign.blocks]}
    return {"tokens": sign.tokens}


@dataclass(frozen=True)
class _Due:
    """One round's report task for some of a block's users, as arrays: the task without its
    lists, the users' roster positions, ε charges and groups."""

    tasks: RoundTasks
    positions: IntArray
    epsilons: FloatArray
    groups: IntArray

    @classmethod
    def of(cls, tasks: RoundTasks, roster: Roster) -> _Due:
        return cls(
            tasks.model_copy(update={"participant_ids": [], "groups": [], "epsilons": []}),
            roster.positions(tasks.participant_ids),
            np.asarray(tasks.epsilons, dtype=np.float64),
            np.asarray(tasks.groups, dtype=np.int64),
        )

    def task(self) -> TaskReport:
        """The task the users share (``RoundTasks.task(0)``: each one's ε and group come from
        the arrays)."""
        return self.tasks.task_at(int(self.groups[0]), float(self.epsilons[0]))


async def _run_block(agent: BlockAgent) -> None:
    await agent.run()
    data = agent.block.privatizer.population
    if isinstance(data, Prefetch):  # its users' data drawn ahead are no longer needed
        data.release(agent.roster.slots)


async def drive(
    api: ApiClient,
    study_id: str,
    roster: Roster,
    privatizer: Privatizer,
    *,
    batch: int | None,
    concurrency: int,
    waits: WaitPolicy | None = None,
    threads: int | None = None,
) -> DriveStats:
    """Run ``roster``'s users until each is done: one agent per user (``batch`` None) or one
    ``BlockAgent`` per block of ``batch`` consecutive users, privatized on ``threads`` threads
    (default ``default_threads()``; 1: on the event loop's thread). A block's payloads are the
    same on any thread: every user draws from its own stream."""
    ctx = DriveContext(api, study_id, Gate(concurrency), waits or WaitPolicy(), DriveStats())
    if batch is not None and batch < 1:
        raise ValueError("batch size must be >= 1")
    threads = checked_threads(threads, batch)
    try:
        if batch is None:
            await run_users(ctx, roster, privatizer)
        else:
            with contextlib.ExitStack() as stack:
                if threads > 1:
                    ctx.pool = concurrent.futures.ThreadPoolExecutor(
                        threads, thread_name_prefix="fedldp-privatize"
                    )
                    # a failed swarm does not wait for blocks still privatizing
                    stack.callback(ctx.pool.shutdown, wait=False, cancel_futures=True)
                async with asyncio.TaskGroup() as group:
                    for start in range(0, len(roster), batch):
                        agent = BlockAgent(ctx, roster.part(start, start + batch), privatizer)
                        group.create_task(_run_block(agent))
    except BaseExceptionGroup as errors:
        raise first_error(errors) from None
    return ctx.stats

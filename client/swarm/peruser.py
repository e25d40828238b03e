"""The per-user swarm: one agent per simulated user over the single-participant endpoints, as real
devices would talk to the server.

Each user sends its own requests with its own token: ``GET .../participants/{pid}/task``, then for
a report task ``POST .../reports``, until the task says it was the user's last (``final``) or the
server answers ``done``. What the process shares between its users is only scheduling:

* **one gate** (``fedldp.client.swarm.driving.Gate``) bounds the requests in flight and lets
  reports in before task requests, so that users who have their task finish (and close rounds)
  before more users start;
* **held task requests**: up to ``HOLDERS`` users at a time ask with ``?hold=S``, outside the gate
  (a held request must not keep others from reporting); the server answers them as soon as the
  study moves on. A user told to wait while every hold is taken is *parked*: it asks again only
  when some answer shows the study has moved on (a later round, the study's end) or a hold frees
  up, so waiting costs it one request, not one per poll. Until some user has got a task other
  than "wait", only the holders ask (the others would be told to wait while the first round
  opens);
* **one privatization per round and cohort**: the users who got the same round's task within
  ``FLUSH_S`` of each other are privatized in one vectorised call (``UserBlock``: each user's
  own counter-based stream and ledger, so each payload is bit for bit the one it would compute
  alone), then each posts its own report.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from fedldp.client.api.errors import PhaseError, ReportRejectedError, SwarmError
from fedldp.client.swarm.driving import (
    DELIBERATELY_LATE,
    TASK_HOLD_S,
    DriveContext,
    ended,
    study_ended_error,
)
from fedldp.client.swarm.roster import Roster
from fedldp.client.swarm.user import Privatizer, UserBlock
from fedldp.protocol.core.base.records import FloatArray
from fedldp.protocol.core.ledger import BudgetExceededError
from fedldp.protocol.core.wire import (
    ReportSubmit,
    Task,
    TaskDone,
    TaskReport,
    TaskWait,
    payload_from_row,
)

__all__ = ["HOLDERS", "run_users"]

HOLDERS = 8
"""Users whose task requests the server may hold at once (each holds a connection)."""
FLUSH_S = 0.05
"""How long a round's first report task waits for others to privatize with it."""
FLUSH_SIZE = 2048
"""Privatize at once when this many users wait for the same round."""


class _Clock:
    """How far the study has moved, as the users' answers show it; parked users wait on it."""

    def __init__(self, holders: int) -> None:
        self.started = False  # some user got a task other than "wait"
        self.round = -1
        self.epoch = 0
        self.free_holds = holders
        self._changed = asyncio.Event()

    def saw(self, task: Task) -> None:
        if isinstance(task, TaskWait):
            return
        moved = not self.started
        self.started = True
        if isinstance(task, TaskReport) and task.round > self.round:
            self.round = task.round
            moved = True
        elif isinstance(task, TaskDone) and task.phase != "running":
            moved = True
        if moved:
            self._tick()

    def _tick(self) -> None:
        self.epoch += 1
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def take_hold(self) -> bool:
        if self.free_holds == 0:
            return False
        self.free_holds -= 1
        return True

    def give_hold(self) -> None:
        self.free_holds += 1
        self._notify()

    async def park(self, epoch: int) -> None:
        """Until the study has moved on since ``epoch`` or a hold is free."""
        while self.epoch == epoch and self.free_holds == 0:
            await self._changed.wait()


@dataclass
class _Batch:
    """Users waiting for their payload of one round (sharing its public task)."""

    task: TaskReport
    positions: list[int] = field(default_factory=list)
    epsilons: list[float] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)
    futures: list[asyncio.Future[FloatArray]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None

    def shares(self, task: TaskReport) -> bool:
        mine = self.task
        return (
            task.name == mine.name
            and task.payload_kind == mine.payload_kind
            and task.payload_shape == mine.payload_shape
            and task.broadcast == mine.broadcast
        )


class _Cohorts:
    """Privatizes the users who asked for the same round together (see the module docstring)."""

    def __init__(self, roster: Roster, privatizer: Privatizer) -> None:
        self.block = UserBlock(roster.slots, roster.epsilon, privatizer)
        self._open: dict[int, _Batch] = {}

    async def payload(self, position: int, task: TaskReport) -> FloatArray:
        """The payload row of the user at ``position`` for ``task``."""
        batch = self._open.get(task.round)
        if batch is not None and not batch.shares(task):
            self._flush(batch)  # another broadcast for the same round: privatized apart
            batch = None
        if batch is None:
            batch = self._open[task.round] = _Batch(task)
            batch.timer = asyncio.get_running_loop().call_later(FLUSH_S, self._flush, batch)
        future: asyncio.Future[FloatArray] = asyncio.get_running_loop().create_future()
        batch.positions.append(position)
        batch.epsilons.append(task.epsilon)
        batch.groups.append(task.group)
        batch.futures.append(future)
        if len(batch.futures) >= FLUSH_SIZE:
            self._flush(batch)
        return await future

    def _flush(self, batch: _Batch) -> None:
        if self._open.get(batch.task.round) is batch:
            del self._open[batch.task.round]
        if batch.timer is not None:
            batch.timer.cancel()
        try:
            rows = self.block.respond(
                batch.task,
                np.asarray(batch.positions, dtype=np.int64),
                np.asarray(batch.epsilons, dtype=np.float64),
                np.asarray(batch.groups, dtype=np.int64),
            )
        except BudgetExceededError as exc:
            error = SwarmError("budget_exceeded", f"refused to privatize: {exc}")
            for future in batch.futures:
                if not future.done():
                    future.set_exception(error)
            return
        except Exception as exc:  # the users learn it (and stop the swarm) from their futures
            for future in batch.futures:
                if not future.done():
                    future.set_exception(exc)
            return
        for future, row in zip(batch.futures, rows, strict=True):
            if not future.done():
                future.set_result(row)


class _Users:
    """The users of one roster (see the module docstring)."""

    def __init__(self, ctx: DriveContext, roster: Roster, privatizer: Privatizer) -> None:
        self.ctx = ctx
        self.roster = roster
        self.roles = privatizer.roles
        self.cohorts = _Cohorts(roster, privatizer)
        self.clock = _Clock(HOLDERS)

    async def run(self, position: int) -> None:
        """User ``position`` of the roster, from its first task request to its last report."""
        ctx, clock = self.ctx, self.clock
        pid, token = int(self.roster.participant_ids[position]), self.roster.tokens[position]
        loop = asyncio.get_running_loop()
        waits, holding = 0, False
        while True:
            holding = holding or clock.take_hold()
            if not (holding or clock.started):
                # the holders ask first: until one gets its task, the others would only be told
                # to wait (e.g. while the server opens the first round)
                await clock.park(clock.epoch)
                continue
            epoch, began = clock.epoch, loop.time()
            task = await self._ask(pid, token, holding)
            clock.saw(task)
            if isinstance(task, TaskWait):
                waits += 1
                ctx.stats.waits += 1
                if not holding:
                    await clock.park(epoch)
                elif loop.time() - began < TASK_HOLD_S / 2:  # not held (an older server)
                    await asyncio.sleep(ctx.waits.delay(task.retry_after_s, waits, ctx.rng))
                continue
            if holding:
                holding = False
                clock.give_hold()
            waits = 0
            if isinstance(task, TaskDone):
                if ended(task):
                    raise await study_ended_error(ctx.api, ctx.study_id)
                return
            if not await self._report(position, pid, token, task) or task.final:
                return

    async def _ask(self, pid: int, token: str, holding: bool) -> Task:
        ctx = self.ctx
        if holding:
            task = await ctx.api.task(ctx.study_id, pid, token, hold=TASK_HOLD_S)
        else:
            await ctx.gate.enter()
            try:
                task = await ctx.api.task(ctx.study_id, pid, token)
            finally:
                ctx.gate.leave()
        ctx.stats.task_requests += 1
        return task

    async def _report(self, position: int, pid: int, token: str, task: TaskReport) -> bool:
        """Privatize and post the report for ``task``; False if the user gives up (behaviour:
        it left, or it is an attacker whose report was refused)."""
        ctx, roles = self.ctx, self.roles
        delay = 0.0
        if roles is not None:
            slot = self.roster.slots[position : position + 1]
            if not roles.present(slot, task.round)[0]:
                ctx.stats.dropped += 1
                return False  # it left: it never answers again
            delay = roles.behaviour.late_delay_s if roles.late(slot)[0] else 0.0
        row = await self.cohorts.payload(position, task)
        report = ReportSubmit(
            participant_id=pid,
            token=token,
            round=task.round,
            payload=payload_from_row(task.payload_kind, row),
        )
        if delay:
            await asyncio.sleep(delay)
        await ctx.gate.enter(urgent=True)
        try:
            await ctx.api.submit_report(ctx.study_id, report)
        except PhaseError as exc:
            if exc.code not in DELIBERATELY_LATE:
                raise
            ctx.stats.late += 1
        except ReportRejectedError:
            if roles is None or not roles.attackers(self.roster.slots[position : position + 1])[0]:
                raise
            ctx.stats.refused += 1  # behaviour: an attacker's report failed the checks
            return False  # and it gives up
        else:
            ctx.stats.reports += 1
        finally:
            ctx.gate.leave()
            ctx.stats.report_requests += 1
        return True


async def run_users(ctx: DriveContext, roster: Roster, privatizer: Privatizer) -> None:
    """Run every user of ``roster`` until each is done (the first failure stops them all)."""
    if len(roster) and not roster.tokens:
        raise ValueError("single-participant agents need each participant's token")
    users = _Users(ctx, roster, privatizer)
    async with asyncio.TaskGroup() as group:
        for position in range(len(roster)):
            group.create_task(users.run(position))

"""Task services: what each participant should do now (wait, report, or nothing), one at a time
or columnar for a batch, answered at once or held while the answer is "wait" (a long poll).

Every answer is computed from the study's snapshot (``fedldp.server.runtime.states``: phase, current
round, fixed plan) and the one fact that changes with every report, whether the participant has
reported, read from the database. A single participant's task needs no session: on SQLite, whose WAL
readers wait for no writer, it is answered on the event loop when the snapshot is fresh; else (or on
PostgreSQL, whose reads cross the network) in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from fedldp.protocol.core.base.records import BoolArray, IntArray
from fedldp.protocol.core.wire import (
    Credentials,
    RoundTasks,
    Task,
    TaskBatch,
    TaskDone,
    TaskReport,
    TaskWait,
)
from fedldp.server.runtime.context import Context
from fedldp.server.runtime.plans import StudyPlan
from fedldp.server.runtime.states import StudyState
from fedldp.server.services.participants import check_participants, one_token, signed
from fedldp.server.store import report_rows

__all__ = ["task", "task_when_ready", "tasks", "tasks_when_ready"]

_T = TypeVar("_T")
B = TypeVar("B", np.bool_, BoolArray)

ENROLLING_WAIT_S = 0.5
ENROLLING_WAIT = "enrollment is open"
BETWEEN_ROUNDS_WAIT_S = 0.2
POLL_S = 0.25
"""How often a held request asks the database again (for transitions of other processes)."""


def _state(ctx: Context, study_id: str, *, fresh: bool = False) -> StudyState:
    """The study's snapshot, read again when stale or ``fresh`` is asked for (UnknownStudy if
    there is none)."""
    seen = ctx.transitions.count
    state = None if fresh else ctx.states.cached(study_id, seen)
    if state is None:
        with ctx.transaction() as session:
            state = ctx.states.read(session, ctx.plans, study_id, seen)
    return state


def _round_wait(k: int) -> str:
    return f"round {k} is in progress"


def _in_later_round(splan: StudyPlan, k: int, pids: IntArray) -> BoolArray:
    """Which of ``pids`` the fixed plan puts in the cohort of some round after round ``k``."""
    later = np.zeros(pids.shape, dtype=np.bool_)
    for j in range(k + 1, len(splan.plan.rounds)):
        later |= splan.membership(j, pids).member
    return later


def _decide(member: B, reported: B, later: B, is_open: bool) -> tuple[B, B]:
    """The rule of a running study's tasks, for one participant (``numpy.bool_``) or columns of
    them (boolean arrays): whether each has a report task now, and whether it must wait.
    ``member``: in the current round's cohort; ``reported``: it has reported in that round;
    ``later``: a later round of the fixed plan has it; ``is_open``: the round takes reports.
    Neither: nothing is left for it in the study (done)."""
    pending = member & ~reported
    report = pending & is_open
    return report, (pending | later) & ~report


@dataclass(frozen=True)
class _Answer:
    """A batch answer as arrays (``batch`` writes it as the wire's ``TaskBatch``): what a held
    request keeps while it waits. The wire model's lists hold a Python int per participant,
    about 36 bytes each where these arrays take 8 or 1; at 10^7 users a thousand blocks' held
    answers in that form were the server's largest holding (issue 27 item 4)."""

    state: StudyState
    pids: IntArray
    report: BoolArray | None = None  # None: not running (all wait while enrolling, else done)
    waiting: BoolArray | None = None
    later: BoolArray | None = None  # a later round of the fixed plan has them

    @property
    def ready(self) -> bool:
        """Whether a held request answers now: someone has a report task, or nobody waits."""
        if self.report is None or self.waiting is None:
            return self.state.phase != "enrolling"
        return bool(self.report.any()) or not bool(self.waiting.any())

    def batch(self) -> TaskBatch:
        state, pids = self.state, self.pids
        if state.phase == "enrolling":
            return TaskBatch(
                phase="enrolling",
                waiting=pids.tolist(),
                wait_reason=ENROLLING_WAIT,
                retry_after_s=ENROLLING_WAIT_S,
            )
        r, splan, report, waiting = state.round, state.plan, self.report, self.waiting
        if r is None or splan is None or report is None or waiting is None or self.later is None:
            return TaskBatch(phase=state.phase, done=pids.tolist())
        k = r.index
        reports = []
        if report.any():
            rp = splan.plan.rounds[k]
            pos = splan.membership(k, pids[report]).position
            reports.append(
                RoundTasks(
                    round=k,
                    name=r.name,
                    broadcast=r.broadcast,
                    payload_kind=r.payload_kind,
                    payload_shape=list(r.payload_shape),
                    deadline=r.deadline,
                    participant_ids=pids[report].tolist(),
                    groups=rp.groups_at(pos).tolist(),
                    epsilons=rp.epsilon[pos].tolist(),
                    # the reporters' last task: the block need not ask for them again
                    final=not bool(self.later[report].any()),
                )
            )
        return TaskBatch(
            phase="running",
            reports=reports,
            waiting=pids[waiting].tolist(),
            wait_reason=_round_wait(k),
            retry_after_s=BETWEEN_ROUNDS_WAIT_S,
            done=pids[~report & ~waiting].tolist(),  # nothing left for them in this study
        )


def _tasks(
    state: StudyState, ids: IntArray, reported: Callable[[int, IntArray], IntArray]
) -> _Answer:
    """What each participant should do now (see ``_Answer``); ``reported(k, pids)`` says which
    of ``pids`` have reported in round k."""
    pids = np.asarray(ids, dtype=np.int64)
    r, splan = state.round, state.plan
    if state.phase != "running" or r is None or splan is None:
        return _Answer(state, pids)
    k = r.index
    now_in = splan.membership(k, pids)
    members = pids[now_in.member]
    done_k = reported(k, members) if members.size else members
    later = _in_later_round(splan, k, pids)
    report, waiting = _decide(now_in.member, np.isin(pids, done_k), later, r.status == "open")
    return _Answer(state, pids, report, waiting, later)


def _checked(
    ctx: Context, study_id: str, ids: Sequence[int] | IntArray, credentials: Credentials
) -> StudyState:
    """The snapshot, once the credentials are checked; a refusal is decided on a fresh read
    (the participant count of an enrolling study moves with every enrollment)."""
    state = _state(ctx, study_id)
    if not signed(ctx, state, ids, credentials).all():
        state = _state(ctx, study_id, fresh=True)
        check_participants(ctx, state, ids, credentials)
    return state


def _position(splan: StudyPlan, k: int, participant_id: int) -> int | None:
    """The participant's place in round ``k``'s cohort (None: not in it); ``membership`` for one
    participant, without its arrays."""
    cohort = splan.plan.rounds[k].cohort
    pos = int(cohort.searchsorted(participant_id))
    return pos if pos < cohort.size and int(cohort[pos]) == participant_id else None


def _one_task(ctx: Context, state: StudyState, participant_id: int) -> Task:
    """One participant's task (its credentials checked): what ``_tasks`` answers for it, by the
    same rule (``_decide``), worked out for the one participant (the per-user path asks this for
    every user, and the columnar arrays and models cost several times the answer). A report
    task says whether it is the participant's last (``final``: by the fixed plan no later round
    has it)."""
    if state.phase == "enrolling":
        return TaskWait(reason=ENROLLING_WAIT, retry_after_s=ENROLLING_WAIT_S)
    r, splan = state.round, state.plan
    if state.phase == "running" and r is not None and splan is not None:
        k = r.index
        pos = _position(splan, k, participant_id)
        member = np.bool_(pos is not None)
        later = np.bool_(
            any(
                _position(splan, j, participant_id) is not None
                for j in range(k + 1, len(splan.plan.rounds))
            )
        )
        reported = np.bool_(
            pos is not None
            and bool(report_rows.rounds_reported(ctx.db, state.id, [k], participant_id))
        )
        report, waiting = _decide(member, reported, later, r.status == "open")
        if report:
            assert pos is not None
            rp = splan.plan.rounds[k]
            return TaskReport(
                round=k,
                name=r.name,
                broadcast=r.broadcast,
                payload_kind=r.payload_kind,
                payload_shape=list(r.payload_shape),
                group=0 if rp.group is None else int(rp.group[pos]),
                epsilon=float(rp.epsilon[pos]),
                deadline=r.deadline,
                final=not later,
            )
        if waiting:
            return TaskWait(reason=_round_wait(k), retry_after_s=BETWEEN_ROUNDS_WAIT_S)
    rounds = range(state.rounds)
    history = (
        report_rows.rounds_reported(ctx.db, state.id, rounds, participant_id) if rounds else []
    )
    return TaskDone(phase=state.phase, reported_rounds=history)


def task(ctx: Context, study_id: str, participant_id: int, token: str | None) -> Task:
    """What one participant should do now."""
    return _one_task(
        ctx, _checked(ctx, study_id, [participant_id], one_token(token)), participant_id
    )


def _task_at_once(
    ctx: Context, study_id: str, participant_id: int, token: str | None
) -> Task | None:
    """``task`` where it needs no wait: on SQLite, with a fresh snapshot and a valid token (the
    refusals are left to ``task``, which reads the study again to say exactly why). None: ask
    ``task`` in a worker thread."""
    if not ctx.db.is_sqlite or token is None:
        return None
    state = ctx.states.cached(study_id, ctx.transitions.count)
    if state is None or not ctx.tokens.ok(state.secret, study_id, participant_id, token):
        return None
    return _one_task(ctx, state, participant_id)


async def _held(
    ctx: Context,
    first: Callable[[], _T],
    again: Callable[[], _T],
    hold_s: float,
    ready: Callable[[_T], bool],
    at_once: Callable[[], _T | None] = lambda: None,
    basis: Callable[[], object] | None = None,
) -> _T:
    """``first()``, then ``again()`` while the answer is not ``ready`` and ``hold_s`` seconds
    have not passed (a long poll); each ask is ``at_once()`` on the event loop when that can
    answer, else in a worker thread. Transitions committed by this process wake it at once;
    those of other processes (other workers of this server, or replicas) are seen at the next
    ask, every ``POLL_S``. ``basis``: what the answer depends on, cheaper to read than the
    answer (read with it, in the same thread); a wake-up that finds it unchanged keeps the
    answer instead of asking again (a held batch answer is tens of thousands of lookups)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + hold_s
    ask = first
    answer: _T | None = None
    on: object = None  # the basis the answer was worked out on
    while True:
        seen = ctx.transitions.count
        # a wake-up that finds nothing the answer depends on moved keeps it
        if answer is None or basis is None or await asyncio.to_thread(basis) != on:
            answer = at_once()
            if answer is None:
                on, answer = await asyncio.to_thread(_with_basis, basis, ask)
            ask = again
        assert answer is not None
        left = give_up - loop.time()
        if ready(answer) or left <= 0:
            return answer
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(left, POLL_S)):
                await ctx.transitions.wait(seen)


def _with_basis(basis: Callable[[], object] | None, ask: Callable[[], _T]) -> tuple[object, _T]:
    """``basis()`` read before ``ask()`` (so that a change between them is seen next time)."""
    return (None if basis is None else basis()), ask()


async def task_when_ready(
    ctx: Context, study_id: str, participant_id: int, token: str | None, hold_s: float
) -> Task:
    """``task``, held back for up to ``hold_s`` while it says "wait": the answer then comes as
    soon as the study moves on (a round opens, the study starts or ends)."""
    ask = functools.partial(task, ctx, study_id, participant_id, token)
    quick = functools.partial(_task_at_once, ctx, study_id, participant_id, token)
    return await _held(ctx, ask, ask, hold_s, lambda t: not isinstance(t, TaskWait), quick)


def tasks(ctx: Context, study_id: str, ids: list[int], credentials: Credentials) -> TaskBatch:
    """What each of many participants should do now (their credentials checked)."""
    return _tasks_checked(ctx, study_id, np.asarray(ids, dtype=np.int64), credentials).batch()


def _tasks_checked(ctx: Context, study_id: str, ids: IntArray, credentials: Credentials) -> _Answer:
    return _tasks_of(ctx, study_id, ids, _checked(ctx, study_id, ids, credentials))


def _tasks_of(
    ctx: Context, study_id: str, ids: IntArray, state: StudyState | None = None
) -> _Answer:
    """``tasks`` for participants whose credentials were checked already."""
    state = state or _state(ctx, study_id)

    def reported(k: int, pids: IntArray) -> IntArray:
        assert state.plan is not None  # asked for members of a running study's round
        if _whole_span(state.plan, k, pids):
            # only cohort members' reports are stored: counting them tells none from all
            low, high = int(pids.min()), int(pids.max())
            count = report_rows.count_reported(ctx.db, study_id, k, low, high)
            if count in (0, pids.size):
                return pids[:0] if count == 0 else pids
        return report_rows.reported_now(ctx.db, study_id, k, pids)

    return _tasks(state, ids, reported)


def _whole_span(splan: StudyPlan, k: int, members: IntArray) -> bool:
    """Whether ``members`` (of round k's cohort) are all of the cohort's members between the
    least and the greatest of them, each once (a block's members are)."""
    cohort = splan.plan.rounds[k].cohort
    low, high = members.min(), members.max()
    span = int(np.searchsorted(cohort, high, side="right") - np.searchsorted(cohort, low))
    if span != members.size:
        return False
    # each once: a block's ids come in increasing order, which says so without sorting them
    increasing = bool(np.all(members[1:] > members[:-1]))
    return increasing or np.unique(members).size == members.size


async def tasks_when_ready(
    ctx: Context, study_id: str, ids: IntArray, credentials: Credentials, hold_s: float
) -> TaskBatch:
    """``tasks``, held back for up to ``hold_s`` while none of them has a report task and some
    would be told to wait (a long poll): the answer then comes as soon as the study moves on
    (a round opens, the study starts or ends), instead of after the client's next wait. Those
    who are done meanwhile learn it in that answer: a block that has just reported, and whose
    reporters are done, asks once, not once for its done and again for its waiting members.
    The credentials are checked once, on the first ask; the answer is kept as arrays while
    held (``_Answer``) and written out once."""
    answer = await _held(
        ctx,
        functools.partial(_tasks_checked, ctx, study_id, ids, credentials),
        functools.partial(_tasks_of, ctx, study_id, ids),
        hold_s,
        lambda a: a.ready,
        basis=functools.partial(_moves, ctx, study_id),
    )
    return answer.batch()


def _moves(ctx: Context, study_id: str) -> tuple[object, ...]:
    """What a held batch answer (no report task, someone waiting) depends on: the study's phase
    and current round. Only a transition changes it: a waiting participant has no task, so it
    reports nothing meanwhile, and one who is done stays done."""
    state = _state(ctx, study_id)
    r = state.round
    return (state.phase, state.rounds, None if r is None else (r.index, r.status))

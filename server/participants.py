"""Participant services: tasks, report ingestion and the ε ledger.

Batch requests prove who sent them with each participant's token or with block tokens, each of
which stands for a block of consecutive participants (``fedldp.server.auth``). Ingestion is
columnar: a batch of reports for one round (payload rows as lists or one packed matrix) is checked
as arrays (credentials, cohort membership, ledger, the protocol's payload check), then inserted in
one statement that skips keys already stored. A report identical to the stored one is a duplicate
(same receipt); a different one for the same (participant, round) is refused. Nothing of a refused
report is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import numpy as np
from sqlalchemy.orm import Session

from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base import BoolArray, FloatArray, IntArray, PayloadKind, RoundTask
from fedldp.protocol.core.ledger import TOLERANCE
from fedldp.protocol.core.wire import (
    BatchItemStatus,
    BatchReceipt,
    BudgetCharge,
    BudgetView,
    Credentials,
    Receipt,
    ReportBatch,
    ReportSubmit,
    RoundTasks,
    Task,
    TaskBatch,
    TaskDone,
    TaskWait,
    payload_row,
)
from fedldp.server import repository as repo
from fedldp.server.auth import block_token_ok
from fedldp.server.context import Context
from fedldp.server.errors import (
    BudgetExceeded,
    DuplicateConflict,
    FedldpError,
    ImplausibleReport,
    InvalidPayload,
    InvalidRequest,
    InvalidToken,
    KeyUnavailable,
    NotInCohort,
    RoundClosed,
    StudyNotRunning,
    UnknownParticipant,
    WrongRound,
)
from fedldp.server.keys import KeyMissing
from fedldp.server.plans import StudyPlan
from fedldp.server.rounds import advance
from fedldp.server.studies import require_study
from fedldp.server.tables import RoundRow, StudyRow, utcnow

__all__ = [
    "budget",
    "submit_batch",
    "submit_many",
    "task",
    "task_when_ready",
    "tasks",
    "tasks_when_ready",
]

_T = TypeVar("_T")

ENROLLING_WAIT_S = 0.5
BETWEEN_ROUNDS_WAIT_S = 0.2


def _one(token: str | None) -> Credentials:
    """The credentials of a single-participant request (no token: an invalid one)."""
    return Credentials(tokens=[token or ""])


def _signed(ctx: Context, study: StudyRow, ids: list[int], credentials: Credentials) -> BoolArray:
    """Which of the participants ``ids`` the credentials authorise: their own token, or a valid
    block token whose block holds them. A block token costs one HMAC however many participants
    it covers; the tokens' are cached (``TokenCache``)."""
    if credentials.tokens is not None:
        if len(credentials.tokens) != len(ids):
            raise InvalidRequest(f"{len(ids)} participant ids but {len(credentials.tokens)} tokens")
        valid = ctx.tokens.verify(study.secret, study.id, ids, credentials.tokens)
        return np.array(valid, dtype=np.bool_)
    assert credentials.blocks is not None  # the wire model holds one kind or the other
    blocks = sorted(
        (b.start, b.stop)
        for b in credentials.blocks
        if block_token_ok(study.secret, study.id, b.start, b.stop, b.token)
    )
    pids = np.asarray(ids, dtype=np.int64)
    if not blocks:
        return np.zeros(pids.shape, dtype=np.bool_)
    starts = np.array([b[0] for b in blocks], dtype=np.int64)
    reach = np.maximum.accumulate(np.array([b[1] for b in blocks], dtype=np.int64))
    last = np.searchsorted(starts, pids, side="right") - 1  # the last block starting at or below
    # (blocks may overlap: a pid is covered iff a block starting at or below it reaches past it)
    return (last >= 0) & (pids < reach[np.maximum(last, 0)])


def _check_participants(
    ctx: Context, study: StudyRow, ids: list[int], credentials: Credentials
) -> None:
    refused = np.flatnonzero(~_signed(ctx, study, ids, credentials))
    if refused.size == 0:
        return
    # Tokens are only issued at enrollment, so a valid one names an enrolled participant
    # (leased ids may lie above the count while a lower block is still enrolling).
    pid = ids[int(refused[0])]
    if not 0 <= pid < study.n_participants:
        raise UnknownParticipant(f"study {study.id} has no participant {pid}")
    raise InvalidToken(f"the token of participant {pid} is not valid for study {study.id}")


# --------------------------------------------------------------------------- tasks


def _in_later_round(splan: StudyPlan, k: int, pids: IntArray) -> BoolArray:
    """Which of ``pids`` the fixed plan puts in the cohort of some round after round ``k``."""
    later = np.zeros(pids.shape, dtype=np.bool_)
    for j in range(k + 1, len(splan.plan.rounds)):
        later |= splan.membership(j, pids).member
    return later


def _tasks(ctx: Context, session: Session, study: StudyRow, ids: list[int]) -> TaskBatch:
    """What each participant should do now, columnar (see TaskBatch)."""
    if study.phase == "enrolling":
        return TaskBatch(
            phase="enrolling",
            waiting=ids,
            wait_reason="enrollment is open",
            retry_after_s=ENROLLING_WAIT_S,
        )
    if study.phase != "running" or study.current_round is None:
        return TaskBatch(phase=study.phase, done=ids)
    splan = ctx.plans.get(session, study)
    k = study.current_round
    r = repo.get_round(session, study.id, k)
    assert r is not None
    pids = np.asarray(ids, dtype=np.int64)
    now_in = splan.membership(k, pids)
    later = _in_later_round(splan, k, pids)
    reported = repo.reported_pids(session, study.id, k, pids[now_in.member])
    pending = now_in.member & ~np.isin(pids, reported)
    report = pending & (r.status == "open")
    rp = splan.plan.rounds[k]
    pos = now_in.position[report]
    reports = []
    if report.any():
        reports.append(
            RoundTasks(
                round=k,
                name=r.name,
                broadcast=splan.protocol.client_broadcast(r.broadcast or {}),
                payload_kind=r.payload_kind,
                payload_shape=list(r.payload_shape),
                deadline=r.deadline,
                participant_ids=pids[report].tolist(),
                groups=rp.groups()[pos].tolist(),
                epsilons=rp.epsilon[pos].tolist(),
            )
        )
    waiting = (pending | later) & ~report
    return TaskBatch(
        phase="running",
        reports=reports,
        waiting=pids[waiting].tolist(),
        wait_reason=f"round {k} is in progress",
        retry_after_s=BETWEEN_ROUNDS_WAIT_S,
        done=pids[~report & ~waiting].tolist(),  # nothing left for them in this study
    )


def task(ctx: Context, study_id: str, participant_id: int, token: str | None) -> Task:
    """What one participant should do now. A report task says whether it is the participant's
    last (``final``): by the fixed plan, no later round has it in its cohort."""
    with ctx.transaction() as session:
        study = require_study(session, study_id)
        _check_participants(ctx, study, [participant_id], _one(token))
        found = _tasks(ctx, session, study, [participant_id])
        if found.done:
            history = repo.reported_rounds(session, study_id, [participant_id])
            return TaskDone(phase=found.phase, reported_rounds=history[participant_id])
        if found.reports:
            splan = ctx.plans.get(session, study)
            pid = np.array([participant_id], dtype=np.int64)
            final = not bool(_in_later_round(splan, found.reports[0].round, pid)[0])
            return found.reports[0].task(0).model_copy(update={"final": final})
    return found.items()[0].task


async def _held(
    ctx: Context,
    first: Callable[[], _T],
    again: Callable[[], _T],
    hold_s: float,
    ready: Callable[[_T], bool],
) -> _T:
    """``first()``, then ``again()`` while the answer is not ``ready`` and ``hold_s`` seconds
    have not passed (a long poll). Transitions made by this process wake it at once; the
    database is asked again every quarter second for those of other processes (other workers of
    this server, or replicas)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + hold_s
    ask = first
    while True:
        seen = ctx.transitions.count
        answer = await asyncio.to_thread(ask)
        left = give_up - loop.time()
        if ready(answer) or left <= 0:
            return answer
        ask = again
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(left, 0.25)):
                await ctx.transitions.wait(seen)


async def task_when_ready(
    ctx: Context, study_id: str, participant_id: int, token: str | None, hold_s: float
) -> Task:
    """``task``, held back for up to ``hold_s`` while it says "wait": the answer then comes as
    soon as the study moves on (a round opens, the study starts or ends)."""
    ask = functools.partial(task, ctx, study_id, participant_id, token)
    return await _held(ctx, ask, ask, hold_s, lambda t: not isinstance(t, TaskWait))


async def tasks_when_ready(
    ctx: Context, study_id: str, ids: list[int], credentials: Credentials, hold_s: float
) -> TaskBatch:
    """``tasks``, held back for up to ``hold_s`` while none of them has a report task and some
    would be told to wait (a long poll): the answer then comes as soon as the study moves on
    (a round opens, the study starts or ends), instead of after the client's next wait. Those
    who are done meanwhile learn it in that answer: a block that has just reported, and whose
    reporters are done, asks once, not once for its done and again for its waiting members.
    The credentials are checked once, on the first ask."""
    return await _held(
        ctx,
        functools.partial(tasks, ctx, study_id, ids, credentials),
        functools.partial(_tasks_of, ctx, study_id, ids),
        hold_s,
        lambda b: bool(b.reports) or not b.waiting,
    )


def tasks(ctx: Context, study_id: str, ids: list[int], credentials: Credentials) -> TaskBatch:
    with ctx.transaction() as session:
        study = require_study(session, study_id)
        _check_participants(ctx, study, ids, credentials)
        return _tasks(ctx, session, study, ids)


def _tasks_of(ctx: Context, study_id: str, ids: list[int]) -> TaskBatch:
    """``tasks`` for participants whose credentials were checked already."""
    with ctx.transaction() as session:
        return _tasks(ctx, session, require_study(session, study_id), ids)


# --------------------------------------------------------------------------- reports


@dataclass(frozen=True)
class _Outcome:
    errors: list[FedldpError | None]  # each report's refusal; None: accepted or duplicate
    duplicates: set[int]
    stored: dict[int, tuple[str, datetime]]  # digest and time of each accepted or duplicate
    complete: bool


def _row_bytes(payloads: FloatArray) -> list[bytes]:
    """Each payload row as stored: its little-endian float64 bytes."""
    data = np.ascontiguousarray(payloads, dtype="<f8").tobytes()
    size = payloads.shape[1] * 8
    return [data[j * size : (j + 1) * size] for j in range(payloads.shape[0])]


def _digests(kind: str, blobs: list[bytes], key: bytes | None = None) -> list[str]:
    """The receipt digest of each stored row: SHA-256 of ``kind``, a zero byte and the row; for
    a central-trust study an HMAC under a key derived from the study's contribution key
    (``key``), so that a digest left in an old copy of the database cannot test a guess of a
    contribution once that key is destroyed."""
    prefix = (
        hashlib.sha256(kind.encode() + b"\0")
        if key is None
        else hmac.new(key, kind.encode() + b"\0", hashlib.sha256)
    )
    out: list[str] = []
    for blob in blobs:
        h = prefix.copy()
        h.update(blob)
        out.append(h.hexdigest()[:32])
    return out


def _digest_key(ctx: Context, trust: str, study_id: str) -> bytes | None:
    if trust != "central":
        return None
    try:
        return ctx.keys.digest_key(study_id)
    except KeyMissing as exc:
        raise KeyUnavailable(str(exc)) from None


def _open_round(session: Session, study: StudyRow, index: int) -> RoundRow:
    if study.phase != "running":
        raise StudyNotRunning(f"study {study.id} is {study.phase}; it takes no reports")
    r = repo.get_round(session, study.id, index, lock=True)
    if r is None:
        raise WrongRound(f"study {study.id} has no round {index}")
    if r.status == "closed":
        raise RoundClosed(f"round {index} of study {study.id} is closed")
    if r.status == "pending":
        raise WrongRound(f"round {index} of study {study.id} is not open yet")
    if r.deadline is not None and r.deadline <= utcnow():  # the sweeper closes it shortly
        raise RoundClosed(f"round {index} of study {study.id} passed its deadline")
    return r


def _resent(
    ctx: Context,
    session: Session,
    study: StudyRow,
    index: int,
    ids: list[int],
    credentials: Credentials,
    kind: str,
    rows: _Rows,
) -> dict[int, tuple[str, datetime]] | None:
    """The stored receipts of reports sent again after their round closed (the first answer was
    lost, e.g. in a crash): only when every one is stored already, identical, under valid
    credentials. None otherwise (the refusal then stands)."""
    tokens = credentials.tokens
    if tokens is not None and len(tokens) != len(ids):
        return None
    lengths = rows.lengths()
    if len(ids) != len(lengths) or len(set(lengths.tolist())) != 1:
        return None
    if not _signed(ctx, study, ids, credentials).all():
        return None
    payloads, _ = rows.matrix(int(lengths[0]))
    stored = repo.existing_reports(session, study.id, index, ids)
    try:
        key = _digest_key(ctx, CATALOGUE[study.protocol].trust, study.id)
    except KeyUnavailable:
        return None  # the study ended: its receipts' digests are blank
    digests = _digests(kind, _row_bytes(payloads), key)
    if any(stored.get(p, ("",))[0] != d for p, d in zip(ids, digests, strict=True)):
        return None
    return {p: stored[p] for p in ids}


@dataclass(frozen=True)
class _Rows:
    """A batch's payload rows: JSON lists, or one matrix unpacked from ``ReportBatch.packed``
    (whose rows all have its width)."""

    lists: list[list[float]] | None = None
    packed: FloatArray | None = None

    @classmethod
    def of(cls, batch: ReportBatch) -> _Rows:
        if batch.packed is not None:
            return cls(packed=batch.packed_rows())
        return cls(lists=batch.payloads)

    def lengths(self) -> IntArray:
        """How many numbers each row holds."""
        if self.packed is not None:
            return np.full(self.packed.shape[0], self.packed.shape[1], dtype=np.int64)
        assert self.lists is not None
        return np.fromiter(map(len, self.lists), dtype=np.int64, count=len(self.lists))

    def matrix(self, width: int) -> tuple[FloatArray, BoolArray]:
        """The rows as one (n, width) matrix, and which rows have that width (the others stay
        zero, to be refused)."""
        fits = self.lengths() == width
        if self.packed is not None:
            return (self.packed if fits.all() else np.zeros((fits.size, width))), fits
        assert self.lists is not None
        if fits.all():
            return np.array(self.lists, dtype=np.float64).reshape((fits.size, width)), fits
        payloads = np.zeros((fits.size, width), dtype=np.float64)
        for i in np.flatnonzero(fits).tolist():
            payloads[i] = self.lists[i]
        return payloads, fits


def _ingest(
    ctx: Context,
    session: Session,
    study: StudyRow,
    r: RoundRow,
    ids: list[int],
    credentials: Credentials,
    kind: PayloadKind,
    rows: _Rows,
) -> _Outcome:
    lengths = rows.lengths()
    if len(ids) != len(lengths):
        raise InvalidRequest(f"{len(ids)} ids but {len(lengths)} payloads")
    if len(set(ids)) != len(ids):
        raise InvalidRequest("a participant appears twice in the batch")
    if kind != r.payload_kind:
        raise InvalidPayload(f"round {r.index} takes {r.payload_kind} payloads, not {kind}")
    study_id = study.id
    splan: StudyPlan = ctx.plans.get(session, study)
    k = r.index
    shape = tuple(int(s) for s in r.payload_shape)
    width = int(np.prod(shape, dtype=np.int64))
    n = len(ids)
    errors: list[FedldpError | None] = [None] * n

    def reject(i: int, error: FedldpError) -> None:
        errors[i] = error

    pids = np.asarray(ids, dtype=np.int64)  # the wire schema bounds them by MAX_ID
    known = pids < study.n_participants
    safe = np.where(known, pids, 0)  # unknown ids are rejected below; index with a valid one
    membership = splan.membership(k, safe)
    member = membership.member
    signed = _signed(ctx, study, ids, credentials)
    payloads, fits = rows.matrix(width)
    ok = known & signed & member & fits
    for i in np.flatnonzero(~ok).tolist():  # the first failed check of each, in this order
        pid = ids[i]
        if not known[i]:
            reject(i, UnknownParticipant(f"study {study_id} has no participant {pid}"))
        elif not signed[i]:
            reject(i, InvalidToken(f"the token of participant {pid} is not valid"))
        elif not member[i]:
            reject(i, NotInCohort(f"participant {pid} is not in the cohort of round {k}"))
        else:
            reject(i, InvalidPayload(f"payload of {lengths[i]} numbers, expected shape {shape}"))
    pos = membership.position
    rp = splan.plan.rounds[k]
    charge = rp.epsilon[pos]
    # The ledger: what the plan charged before round k plus this round must fit the declared ε.
    # The start-time plan check makes this hold; it is the per-report guard the contract names.
    over = ok & (splan.charged_before[k][safe] + charge > splan.declared[safe] + TOLERANCE)
    for j in np.flatnonzero(over):
        reject(int(j), BudgetExceeded(f"participant {ids[j]}'s report would overspend its ε"))
    ok &= ~over
    if ok.any():
        idx = np.flatnonzero(ok)
        task = RoundTask(k, r.name, r.broadcast or {}, r.payload_kind, shape)
        rows_k = payloads[idx].reshape((idx.size, *shape))
        try:
            valid = splan.protocol.check(splan.params, task, charge[idx], rows_k)
            valid = valid & splan.protocol.check_members(
                splan.params, splan.plan, task, pids[idx], rows_k
            )
        except ValueError as exc:
            raise InvalidPayload(str(exc)) from None
        valid = np.asarray(valid, dtype=np.bool_)
        for i in idx[~valid]:
            reject(
                int(i),
                InvalidPayload(f"participant {ids[i]}'s payload is outside the mechanism's range"),
            )
        ok[idx[~valid]] = False
        idx, rows_k = idx[valid], rows_k[valid]
        # unbounded (Laplace) reports: refused where the honest randomizer almost never lands
        try:
            groups = rp.groups()[pos[idx]]
            plausible = splan.protocol.plausible(splan.params, task, charge[idx], groups, rows_k)
        except ValueError as exc:
            raise InvalidPayload(str(exc)) from None
        for i in idx[~plausible]:
            reject(
                int(i),
                ImplausibleReport(
                    f"participant {ids[i]}'s report lies outside the plausibility bounds of "
                    f"round {k} (probability below 1e-12 under the honest randomizer)"
                ),
            )
        ok[idx[~plausible]] = False
        refused = int(np.count_nonzero(~valid)) + int(np.count_nonzero(~plausible))
        if refused:
            repo.add_refused(session, study_id, k, refused=refused)
    now = utcnow()
    accepted = np.flatnonzero(ok)
    accepted_ids = pids[accepted].tolist()
    blobs = _row_bytes(payloads[accepted])
    digests = _digests(kind, blobs, _digest_key(ctx, splan.protocol.trust, study_id))
    epsilons = charge[accepted].tolist()
    central = splan.protocol.trust == "central"
    stored_blobs = [b""] * len(blobs) if central else blobs  # central: in their own table
    inserted = repo.insert_reports(
        session, study_id, k, now, accepted_ids, stored_blobs, epsilons, digests
    )
    if central:
        fresh = [j for j, pid in enumerate(accepted_ids) if pid in inserted]
        fresh_ids = [accepted_ids[j] for j in fresh]
        try:  # stored encrypted under the study's key (fedldp.server.keys)
            sealed = ctx.keys.encrypt(study_id, k, fresh_ids, [blobs[j] for j in fresh])
        except KeyMissing as exc:
            raise KeyUnavailable(str(exc)) from None
        repo.insert_contributions(session, study_id, k, fresh_ids, sealed)
    stored: dict[int, tuple[str, datetime]] = {}
    conflicts: list[tuple[int, str]] = []  # (position in the batch, digest)
    for i, pid, digest in zip(accepted.tolist(), accepted_ids, digests, strict=True):
        if pid in inserted:
            stored[pid] = (digest, now)
        else:
            conflicts.append((i, digest))
    duplicates: set[int] = set()
    if conflicts:
        before = repo.existing_reports(session, study_id, k, [ids[i] for i, _ in conflicts])
        for i, digest in conflicts:
            pid = ids[i]
            if before[pid][0] == digest:
                duplicates.add(pid)
                stored[pid] = before[pid]
            else:
                reject(
                    i,
                    DuplicateConflict(
                        f"participant {pid} already sent a different report for round {k}"
                    ),
                )
    received = repo.add_received(session, study_id, k, len(inserted)) if inserted else r.received
    return _Outcome(errors, duplicates, stored, received >= r.expected)


def _receipt(pid: int, index: int, stored: tuple[str, datetime], duplicate: bool) -> Receipt:
    digest, at = stored
    return Receipt(
        participant_id=pid, round=index, digest=digest, received_at=at, duplicate=duplicate
    )


def submit_many(
    ctx: Context, study_id: str, reports: list[ReportSubmit]
) -> list[Receipt | FedldpError]:
    """Single-participant reports of one round and kind, from different participants, stored
    in one transaction (the grouping of concurrent requests, see fedldp.server.grouping): a receipt
    or the refusal of each. Whole-group refusals (the round closed, the study ended) fall back to
    each report's stored receipt when it is an identical resend."""
    index, kind = reports[0].round, reports[0].payload.kind
    ids = [r.participant_id for r in reports]
    tokens = [r.token or "" for r in reports]  # the route put each one's token in
    rows = [payload_row(r.payload).tolist() for r in reports]
    with ctx.transaction() as session:
        study = require_study(session, study_id)
        try:
            r = _open_round(session, study, index)
        except (RoundClosed, StudyNotRunning) as exc:
            out: list[Receipt | FedldpError] = []
            for i, pid in enumerate(ids):
                one_row = _Rows(lists=[rows[i]])
                again = _resent(ctx, session, study, index, [pid], _one(tokens[i]), kind, one_row)
                if again is None:
                    out.append(exc)
                else:
                    out.append(_receipt(pid, index, again[pid], duplicate=True))
            if isinstance(exc, RoundClosed):
                repo.add_refused(session, study_id, index, late=sum(o is exc for o in out))
            return out
        outcome = _ingest(
            ctx, session, study, r, ids, Credentials(tokens=tokens), kind, _Rows(lists=rows)
        )
    if outcome.complete:
        advance(ctx, study_id, index)
    results: list[Receipt | FedldpError] = []
    for pid, error in zip(ids, outcome.errors, strict=True):
        if error is not None:
            results.append(error)
            continue
        results.append(_receipt(pid, index, outcome.stored[pid], pid in outcome.duplicates))
    return results


def submit_batch(ctx: Context, study_id: str, batch: ReportBatch) -> BatchReceipt:
    closed: RoundClosed | StudyNotRunning | None = None
    late = 0
    with ctx.transaction() as session:
        study = require_study(session, study_id)
        try:
            r = _open_round(session, study, batch.round)
        except (RoundClosed, StudyNotRunning) as exc:
            args = (batch.participant_ids, batch, batch.kind, _Rows.of(batch))
            if _resent(ctx, session, study, batch.round, *args) is None:
                late = len(batch.participant_ids) if isinstance(exc, RoundClosed) else 0
                closed = exc
            else:
                n = len(batch.participant_ids)
                return BatchReceipt(
                    round=batch.round, accepted=0, duplicates=n, rejected=0, items=[]
                )
        else:
            outcome = _ingest(
                ctx, session, study, r, batch.participant_ids, batch, batch.kind, _Rows.of(batch)
            )
    if closed is not None:
        if late:  # counted in a transaction of its own: the refusal itself stores nothing
            with ctx.transaction() as session:
                repo.add_refused(session, study_id, batch.round, late=late)
        raise closed
    if outcome.complete:
        advance(ctx, study_id, batch.round)
    rejected = [
        BatchItemStatus(participant_id=pid, status="rejected", code=e.code, detail=e.detail)
        for pid, e in zip(batch.participant_ids, outcome.errors, strict=True)
        if e is not None
    ]
    return BatchReceipt(
        round=batch.round,
        accepted=len(outcome.stored) - len(outcome.duplicates),
        duplicates=len(outcome.duplicates),
        rejected=len(rejected),
        items=rejected,
    )


# --------------------------------------------------------------------------- ledger


def budget(ctx: Context, study_id: str, participant_id: int, token: str | None) -> BudgetView:
    with ctx.transaction() as session:
        study = require_study(session, study_id)
        _check_participants(ctx, study, [participant_id], _one(token))
        p = repo.participant(session, study_id, participant_id)
        assert p is not None
        reported = set(repo.reported_rounds(session, study_id, [participant_id])[participant_id])
        planned: list[BudgetCharge] = []
        if repo.list_rounds(session, study_id):  # a plan was fixed
            splan = ctx.plans.get(session, study)
            pid = np.array([participant_id], dtype=np.int64)
            for rp in splan.plan.rounds:
                m = splan.membership(rp.index, pid)
                if m.member[0]:
                    planned.append(
                        BudgetCharge(
                            round=rp.index,
                            name=rp.name,
                            epsilon=float(rp.epsilon[m.position[0]]),
                            messages=int(rp.message_counts()[m.position[0]]),
                            reported=rp.index in reported,
                        )
                    )
        spent = sum(c.epsilon for c in planned if c.reported)
        return BudgetView(
            participant_id=participant_id,
            declared_epsilon=p.epsilon,
            planned=planned,
            spent=spent,
            remaining=max(0.0, p.epsilon - spent),
        )

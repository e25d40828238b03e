"""Report ingestion: single reports grouped by ``fedldp.server.services.grouping`` and report
batches.

Ingestion is columnar: a batch of reports for one round (payload rows as lists or one packed
matrix) is checked as arrays (credentials, cohort membership, ledger, the protocol's payload
check), then inserted in one statement that skips keys already stored. A report identical to the
stored one is a duplicate (same receipt); a different one for the same (participant, round) is
refused. Nothing of a refused report is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from itertools import repeat

import numpy as np
from sqlalchemy.orm import Session

from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base.records import (
    BoolArray,
    FloatArray,
    IntArray,
    PayloadKind,
    RoundTask,
)
from fedldp.protocol.core.ledger import TOLERANCE
from fedldp.protocol.core.wire import (
    BatchItemStatus,
    BatchReceipt,
    Credentials,
    Receipt,
    ReportBatch,
    ReportSubmit,
    payload_row,
)
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
from fedldp.server.runtime.context import Context
from fedldp.server.runtime.keys import KeyMissing
from fedldp.server.runtime.plans import StudyPlan
from fedldp.server.services.participants import one_token
from fedldp.server.services.participants import signed as signed_by
from fedldp.server.services.rounds import advance
from fedldp.server.services.studies import require_study
from fedldp.server.store import report_rows
from fedldp.server.store import repository as repo
from fedldp.server.store.tables import RoundRow, StudyRow, utcnow

__all__ = ["submit_batch", "submit_many"]


@dataclass(frozen=True)
class _Outcome:
    errors: list[FedldpError | None]  # each report's refusal; None: accepted or duplicate
    duplicates: set[int]
    stored: dict[int, tuple[str, datetime]]
    """Digest and time of each accepted or duplicate report, where receipts were asked for
    (a batch's receipt counts them: ``kept``)."""
    kept: int  # reports accepted now or before (duplicates)
    complete: bool
    fresh: tuple[IntArray, FloatArray, FloatArray] | None = None
    """The reports inserted now (ids, payload rows, ε charges) of a local-trust study, for
    ``Context.received`` once committed."""


def _row_bytes(payloads: FloatArray) -> list[bytes]:
    """Each payload row as stored: its little-endian float64 bytes."""
    n, width = payloads.shape
    if width == 0:  # (a refused resend's empty payload)
        return [b""] * n
    data = np.ascontiguousarray(payloads, dtype="<f8")
    rows: list[bytes] = data.view(f"V{width * 8}").reshape(-1).tolist()  # one per row, in C
    return rows


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
    if not signed_by(ctx, study, ids, credentials).all():
        return None
    payloads, _ = rows.matrix(int(lengths[0]))
    stored = report_rows.existing_reports(session, study.id, index, kind, ids)
    try:
        key = _digest_key(ctx, CATALOGUE[study.protocol].trust, study.id)
    except KeyUnavailable:
        return None  # the study ended: its receipts' digests are blank
    digests = report_rows.receipt_digests(kind, _row_bytes(payloads), key)
    if any(stored.get(p, ("",))[0] != d for p, d in zip(ids, digests, strict=True)):
        return None
    return {p: stored[p] for p in ids}


@dataclass(frozen=True)
class _Rows:
    """A batch's payload rows: JSON lists, or one matrix (``ReportBatch.packed`` unpacked, or a
    binary body's rows), whose rows all have its width."""

    lists: list[list[float]] | None = None
    packed: FloatArray | None = None

    @classmethod
    def of(cls, batch: ReportBatch) -> _Rows:
        matrix = batch.matrix()
        return cls(lists=batch.payloads) if matrix is None else cls(packed=matrix)

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
    *,
    receipts: bool,
) -> _Outcome:
    """Check and store a round's reports. ``receipts``: each accepted report's receipt
    digest is wanted (single-report answers carry it; a batch's receipt does not)."""
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
    signed = signed_by(ctx, study, ids, credentials)
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
    over = ok & (splan.charged_before(k, safe) + charge > splan.declared[safe] + TOLERANCE)
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
            groups = rp.groups_at(pos[idx])
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
    key = _digest_key(ctx, splan.protocol.trust, study_id)
    central = splan.protocol.trust == "central"
    # Payload rows as bytes: for the receipt digests (a central-trust report's, an HMAC under
    # the study's key, is stored; a local one's is its payload's SHA-256, worked out when a
    # receipt needs it: ``report_rows.existing_reports``, so a report batch skips it) and the
    # central-trust contributions. A local batch stores its matrix as it is.
    blobs = _row_bytes(payloads[accepted]) if central or receipts else []
    digests = report_rows.receipt_digests(kind, blobs, key) if blobs else None
    fresh_mask = report_rows.insert_reports(
        session,
        study_id,
        k,
        now,
        pids[accepted],
        payloads[accepted][:, :0] if central else payloads[accepted],  # central: own table
        charge[accepted],
        digests if central else None,
    )
    everyone = bool(fresh_mask.all())
    inserted = accepted_ids if everyone else pids[accepted][fresh_mask].tolist()
    if central:
        fresh = np.flatnonzero(fresh_mask).tolist()
        try:  # stored encrypted under the study's key (fedldp.server.runtime.keys)
            sealed = ctx.keys.encrypt(study_id, k, inserted, [blobs[j] for j in fresh])
        except KeyMissing as exc:
            raise KeyUnavailable(str(exc)) from None
        report_rows.insert_contributions(session, study_id, k, inserted, sealed)
    stored: dict[int, tuple[str, datetime]] = {}  # digest "": not worked out (no receipt)
    conflicts: list[tuple[int, int]] = []  # (position in the batch, among the accepted)
    if everyone:  # the usual case: built in C, and only for receipts (a batch's counts them)
        if receipts:
            stored = dict(zip(accepted_ids, zip(digests or repeat(""), repeat(now)), strict=False))
    else:
        for a, (i, pid) in enumerate(zip(accepted.tolist(), accepted_ids, strict=True)):
            if fresh_mask[a]:
                stored[pid] = (digests[a] if digests is not None else "", now)
            else:
                conflicts.append((i, a))
    duplicates: set[int] = set()
    if conflicts:
        resent = _row_bytes(payloads[accepted[[a for _, a in conflicts]]])
        sent = report_rows.receipt_digests(kind, resent, key)
        before = report_rows.existing_reports(
            session, study_id, k, kind, [ids[i] for i, _ in conflicts]
        )
        for (i, _), digest in zip(conflicts, sent, strict=True):
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
    recorded = None
    if inserted and not central:
        new = accepted if everyone else accepted[fresh_mask]
        recorded = (pids[new], payloads[new], charge[new])
    kept = len(accepted_ids) if everyone else len(stored)
    return _Outcome(errors, duplicates, stored, kept, received >= r.expected, recorded)


def _receipt(pid: int, index: int, stored: tuple[str, datetime], duplicate: bool) -> Receipt:
    digest, at = stored
    return Receipt(
        participant_id=pid, round=index, digest=digest, received_at=at, duplicate=duplicate
    )


def submit_many(
    ctx: Context, study_id: str, reports: list[ReportSubmit]
) -> list[Receipt | FedldpError]:
    """Single-participant reports of one round and kind, from different participants, stored in one
    transaction (the grouping of concurrent requests, see fedldp.server.services.grouping): a
    receipt or the refusal of each. Whole-group refusals (the round closed, the study ended) fall
    back to each report's stored receipt when it is an identical resend."""
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
                again = _resent(
                    ctx, session, study, index, [pid], one_token(tokens[i]), kind, one_row
                )
                if again is None:
                    out.append(exc)
                else:
                    out.append(_receipt(pid, index, again[pid], duplicate=True))
            if isinstance(exc, RoundClosed):
                repo.add_refused(session, study_id, index, late=sum(o is exc for o in out))
            return out
        outcome = _ingest(
            ctx,
            session,
            study,
            r,
            ids,
            Credentials(tokens=tokens),
            kind,
            _Rows(lists=rows),
            receipts=True,
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
                ctx,
                session,
                study,
                r,
                batch.participant_ids,
                batch,
                batch.kind,
                _Rows.of(batch),
                receipts=False,
            )
    if closed is not None:
        if late:  # counted in a transaction of its own: the refusal itself stores nothing
            with ctx.transaction() as session:
                repo.add_refused(session, study_id, batch.round, late=late)
        raise closed
    if outcome.fresh is not None:  # committed: the round's close may aggregate them from here
        ctx.received.add(study_id, batch.round, *outcome.fresh)
    if outcome.complete:
        advance(ctx, study_id, batch.round)
    errors = outcome.errors
    rejected = (
        [
            BatchItemStatus(participant_id=pid, status="rejected", code=e.code, detail=e.detail)
            for pid, e in zip(batch.participant_ids, errors, strict=True)
            if e is not None
        ]
        if errors.count(None) != len(errors)
        else []
    )
    return BatchReceipt(
        round=batch.round,
        accepted=outcome.kept - len(outcome.duplicates),
        duplicates=len(outcome.duplicates),
        rejected=len(rejected),
        items=rejected,
    )

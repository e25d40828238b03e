"""Round orchestration, in the database (docs/architecture.md, "Flow of a study", step 3-5).

Each transition is one transaction that starts with a conditional update, so it happens exactly
once across threads, replicas and restarts:

* start: ``phase enrolling → running``; the plan is fixed, round rows are written, round 0 opens.
* close: ``round open → closed``; the reports are streamed in participant order into the
  protocol's server step, the output is stored, and the next round opens (or the result is
  stored and the study finishes). A round closes when its cohort has reported, or at its
  deadline if the quorum is met (the protocol then aggregates who reported); otherwise the study
  fails with the reason. A crash inside the transaction rolls all of it back: the round is still
  open and the next sweep closes it again, to the same output.

Failure isolation: protocol code (plan, broadcast, aggregate, finalize) that raises fails its own
study with the reason, never the request that triggered it or the sweeper. A ``ValueError`` fails
it inside the closing transaction; any other exception (a protocol bug) rolls that transaction
back and fails the study in a transaction of its own. Database errors, a central-trust
study's key missing from this server's key directory, and a study created with other code of its
protocol than this server's (``protocol_version_mismatch``) are not the study's fault: they
propagate, and the round stays open for the next sweep (by a server that has the key, or the
study's version). The sweeper goes on past a study whose transition
raised anyway.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base.records import JSON, ReportChunk, jsonable
from fedldp.protocol.core.ledger import check_plan_fits
from fedldp.server.errors import ProtocolVersionMismatch
from fedldp.server.runtime.context import Context, shred_after_commit
from fedldp.server.runtime.keys import KeyMissing
from fedldp.server.runtime.memory import give_back
from fedldp.server.runtime.plans import Enrolled, StudyPlan, build_plan
from fedldp.server.runtime.protocols import version_mismatch
from fedldp.server.runtime.received import in_chunks
from fedldp.server.store import eventlog, participant_rows, report_rows
from fedldp.server.store import repository as repo
from fedldp.server.store.tables import StudyRow, utcnow

__all__ = [
    "advance",
    "close_round",
    "fail_study",
    "forget_contributions",
    "shred_ended",
    "start_study",
    "sweep",
]

log = logging.getLogger("fedldp.server")


def fail_study(session: Session, study_id: str, reason: str) -> bool:
    log.warning("study %s failed: %s", study_id, reason)
    failed = repo.transition_study(
        session,
        study_id,
        ["enrolling", "running"],
        phase="failed",
        failure_reason=reason,
        current_round=None,
    )
    if failed:
        forget_contributions(session, study_id)
        eventlog.phase_changed(session, study_id, "failed", reason)
    return failed


def forget_contributions(session: Session, study_id: str) -> None:
    """The study ended: delete its contributions now and destroy their key after the commit
    (fedldp.server.runtime.keys), so the copies the database keeps elsewhere become unreadable. A
    local-trust study has neither (its end skips the WAL checkpoint that shredding takes)."""
    deleted = report_rows.forget_contributions(session, study_id)
    name = repo.study_protocol(session, study_id)
    protocol = None if name is None else CATALOGUE.get(name)
    if deleted or protocol is None or protocol.trust == "central":
        shred_after_commit(session, study_id)


def shred_ended(ctx: Context) -> int:
    """Destroy the keys of studies that have ended (a crash, or a failed destruction, between
    the commit that ended one and the destruction of its key leaves it behind): how many. Keys
    of studies this database does not know are left alone (a key directory shared by several
    databases)."""
    held = ctx.keys.studies()
    if not held:
        return 0
    with ctx.transaction() as session:
        ended = report_rows.ended_among(session, held)
        for study_id in ended:
            shred_after_commit(session, study_id)
    return len(ended)


def _crash(exc: Exception) -> str:
    """What a protocol step that raised something other than ValueError (a bug) is reported as;
    database errors, a missing study key and another version of the study's protocol code are
    re-raised: they are not the study's fault (a replica whose FEDLDP_KEY_DIR, or installation,
    is not the study's must not fail it for every replica), and the round stays open for a
    sweep that has the key and the study's code."""
    if isinstance(exc, SQLAlchemyError | KeyMissing | ProtocolVersionMismatch):
        raise exc
    return f"{type(exc).__name__}: {exc}"


def start_study(
    ctx: Context,
    session: Session,
    study: StudyRow,
    now: datetime,
    *,
    recoverable: bool = False,
    enrolling: Enrolled | None = None,
) -> str | None:
    """Close enrollment and open round 0 (inside the caller's transaction): None on success,
    else the reason the plan is infeasible. The study then stays enrolling either way (more
    participants may enroll, then start again): ``recoverable`` is an explicit start, whose
    caller reports the reason; an automatic one (enrollment deadline or target) records it
    (``_postpone``). A protocol that crashes while planning fails it either way. A study
    created with other code of its protocol than this server's is not planned: an explicit
    start raises ProtocolVersionMismatch, an automatic one postpones it with the reason. The
    participants come from what this process enrolled (``Context.enrolled``, with
    ``enrolling``: the caller's own enrollment, in this transaction) when that is all of them,
    else from the database."""

    def refuse(reason: str) -> str:
        if not recoverable:
            _postpone(session, study, reason, now)
        return reason

    mismatch = version_mismatch(study)
    if mismatch is not None:  # not the plan's fault: an explicit start answers 409
        if recoverable:
            raise ProtocolVersionMismatch(mismatch)
        return refuse(mismatch)

    if study.n_participants == 0:
        return refuse("no participants enrolled")
    if participant_rows.max_participant_id(session, study.id) != study.n_participants - 1:
        return refuse(
            "leased participant ids are not contiguous: some leased blocks were not enrolled"
        )
    known = ctx.enrolled.take(study.id, study.n_participants, enrolling)
    epsilon, metadata = known or participant_rows.load_participants(session, study.id)
    give_back()  # the enrolled record's parts, joined and dropped, before the plan's arrays
    try:
        splan = build_plan(study, epsilon, metadata)
        check_plan_fits(splan.plan, epsilon)
    except ValueError as exc:
        return refuse(f"the plan is infeasible: {exc}")
    except Exception as exc:
        reason = f"the protocol failed to plan: {_crash(exc)}"
        log.error("study %s: planning raised", study.id, exc_info=exc)
        fail_study(session, study.id, reason)
        return reason
    if not repo.transition_study(
        session,
        study.id,
        ["enrolling"],
        phase="running",
        current_round=0,
        warnings=[*study.warnings, *splan.plan.warnings],
    ):
        return None  # someone else started (or cancelled) it first
    eventlog.phase_changed(session, study.id, "running", at=now)
    repo.add_rounds(session, study.id, splan.plan.rounds)
    try:
        _open_round(session, study, splan, 0, [], now)
    except Exception as exc:
        reason = f"round 0 could not open: {_crash(exc)}"
        log.error("study %s: round 0's broadcast raised", study.id, exc_info=exc)
        fail_study(session, study.id, reason)
        return reason
    ctx.plans.put(study.id, splan)
    del known, epsilon, metadata
    give_back()  # what the start joined and planned with (fedldp.server.runtime.memory)
    return None


def _postpone(session: Session, study: StudyRow, reason: str, now: datetime) -> None:
    """An automatic start that no plan fits leaves the study enrolling, as an explicit start
    refused does, instead of failing it for good: the reason goes into its warnings (its view
    shows them) and a ``phase`` event (still ``enrolling``, with the reason). A passed
    enrollment deadline is spent (cleared), so the sweeper does not retry it every pass; an
    enrollment target stays the cap it was declared as (the study's fingerprint)."""
    deadline = study.enrollment_deadline
    passed = deadline is not None and deadline <= now
    trigger = "its enrollment deadline passed" if passed else "it reached its enrollment target"
    note = (
        f"not started when {trigger}: {reason}; it is still enrolling (enroll more "
        "participants and start it, or cancel it)"
    )
    values: dict[str, Any] = {"warnings": [*study.warnings, note]}
    if passed:
        values["enrollment_deadline"] = None
    if repo.transition_study(session, study.id, ["enrolling"], **values):
        log.warning("study %s %s", study.id, note)
        eventlog.phase_changed(session, study.id, "enrolling", note)


def _open_round(
    session: Session,
    study: StudyRow,
    splan: StudyPlan,
    index: int,
    outputs: list[JSON],
    now: datetime,
) -> None:
    broadcast = jsonable(splan.protocol.broadcast(splan.params, splan.plan, index, outputs))
    deadline = now + timedelta(seconds=study.round_deadline_s)
    repo.update_round(
        session,
        study.id,
        index,
        status="open",
        opened_at=now,
        deadline=deadline,
        broadcast=broadcast,
    )
    repo.set_study(session, study.id, current_round=index)
    r = repo.get_round(session, study.id, index)
    if r is not None:
        eventlog.round_opened(session, study.id, r, now, deadline, broadcast)


def _chunks(
    ctx: Context, session: Session, study_id: str, splan: StudyPlan, index: int, received: int
) -> Iterator[ReportChunk]:
    """The round's ``received`` reports, ``aggregate_chunk`` at a time in participant order:
    from those this process stored when they are all of them (``Context.received``), else read
    from the database. Each chunk's groups are taken at its positions (``groups_at``): the
    whole cohort's zeros of a round without groups were 40 MB at the close of a round of 5·10^6,
    the server's peak at 10^7 participants (issue 27 item 4)."""
    rp = splan.plan.rounds[index]
    shape = rp.payload_shape
    chunk = ctx.settings.aggregate_chunk
    recorded = ctx.received.round_reports(study_id, index, received)
    if recorded is not None:
        for slots, rows in in_chunks(recorded, chunk):
            where = splan.membership(index, slots).position
            payloads = rows.reshape((slots.size, *shape))
            yield ReportChunk(slots, rp.epsilon[where], rp.groups_at(where), payloads)
        return
    if splan.protocol.trust == "central":
        contributions = report_rows.stream_contributions(session, study_id, index, chunk)
        for ids, blobs in contributions:  # KeyMissing propagates: not the study's fault (_crash)
            opened = ctx.keys.decrypt(study_id, index, ids.tolist(), blobs)
            where = splan.membership(index, ids).position
            payloads = np.frombuffer(b"".join(opened), dtype="<f8").reshape((ids.size, *shape))
            yield ReportChunk(
                ids, rp.epsilon[where], rp.groups_at(where), payloads.astype(np.float64)
            )
        return
    for ids, rows in report_rows.stream_reports(session, study_id, index, chunk):
        where = splan.membership(index, ids).position
        yield ReportChunk(
            ids, rp.epsilon[where], rp.groups_at(where), rows.reshape((ids.size, *shape))
        )


def close_round(ctx: Context, study_id: str, index: int) -> bool:
    """Close an open round that is complete or past its deadline (one transaction): True if
    this call closed it. Protocol code that raises fails the study (module docstring)."""
    try:
        closed = _close_round(ctx, study_id, index)
    except Exception as exc:
        reason = f"round {index} could not be closed: {_crash(exc)}"
        log.error("study %s: closing round %d raised", study_id, index, exc_info=exc)
    else:
        if closed:
            ctx.metrics.rounds_closed.inc()
        return closed
    with ctx.transaction() as session:
        # only if the round is still open: whoever closed it meanwhile decided its fate
        if not repo.close_round_if_open(session, study_id, index, utcnow()):
            return False
        fail_study(session, study_id, reason)
    ctx.metrics.rounds_closed.inc()
    return True


def _close_round(ctx: Context, study_id: str, index: int) -> bool:
    now = utcnow()
    with ctx.transaction() as session:
        study = repo.get_study(session, study_id)
        r = repo.get_round(session, study_id, index)
        if study is None or r is None or study.phase != "running" or r.status != "open":
            return False
        complete = r.received >= r.expected
        late = r.deadline is not None and r.deadline <= now
        if not (complete or late):
            return False
        if not repo.close_round_if_open(session, study_id, index, now):
            return False
        if not complete:
            needed = math.ceil(study.quorum * r.expected - 1e-9)
            if r.received < needed:
                eventlog.round_closed(session, study_id, r, now, None)
                fail_study(
                    session,
                    study_id,
                    f"round {index} ({r.name}) got {r.received} of {r.expected} reports by its "
                    f"deadline; the quorum {study.quorum:g} needs {needed}",
                )
                return True
        splan = ctx.plans.get(session, study)
        outputs: list[JSON] = [
            dict(row.output or {}) for row in repo.list_rounds(session, study_id)[:index]
        ]
        broadcast: JSON = dict(r.broadcast or {})
        try:
            output = splan.protocol.aggregate(
                splan.params,
                splan.plan,
                index,
                broadcast,
                _chunks(ctx, session, study_id, splan, index, r.received),
            )
        except ValueError as exc:
            eventlog.round_closed(session, study_id, r, now, None)
            fail_study(session, study_id, f"round {index} ({r.name}) could not aggregate: {exc}")
            return True
        ctx.received.aggregated(study_id, index)
        output = jsonable(output)
        repo.update_round(session, study_id, index, output=output)
        eventlog.round_closed(session, study_id, r, now, output)
        outputs.append(output)
        if index + 1 < len(splan.plan.rounds):
            _open_round(session, study, splan, index + 1, outputs, now)
        else:
            _finish(ctx, session, study, splan, outputs)
        log.info(
            "study %s: round %d (%s) closed with %d reports", study_id, index, r.name, r.received
        )
        give_back()  # what the round's reports and answers took (fedldp.server.runtime.memory)
        return True


def _finish(
    ctx: Context, session: Session, study: StudyRow, splan: StudyPlan, outputs: list[JSON]
) -> None:
    try:
        result = splan.protocol.finalize(splan.params, splan.plan, outputs)
    except ValueError as exc:
        fail_study(session, study.id, f"the result could not be computed: {exc}")
        return
    n, listed = splan.plan.n_participants, repo.list_rounds(session, study.id)
    spent = ctx.received.spent(study.id, n, [r.received for r in listed])
    if spent is None:  # not all of its reports were stored by this process
        spent = report_rows.spent_per_participant(session, study.id, n, len(splan.plan.rounds))
    participation = {
        "rounds": [
            {
                "round": r.index,
                "name": r.name,
                "planned": r.expected,
                "late": r.late,
                "refused": r.refused,
                "received": r.received,
            }
            for r in listed
        ]
    }
    stored: dict[str, Any] = {
        "estimate": result.estimate,
        "error_bar": None if result.error_bar is None else result.error_bar.as_json(),
        "diagnostics": {**result.diagnostics, "participation": participation},
        "warnings": list(result.warnings),
        "epsilon_spent": {
            "participants": int(spent.size),
            "charged": int(np.count_nonzero(spent > 0)),
            "max": float(spent.max()),
            "mean": float(spent.mean()),
            # last: sorts spent in place, rather than a copy of everyone's (80 MB at 10^7)
            "median": float(np.median(spent, overwrite_input=True)),
        },
    }
    stored = jsonable(stored)
    if repo.transition_study(
        session,
        study.id,
        ["running"],
        phase="finished",
        current_round=None,
        result=stored,
    ):
        eventlog.result_ready(session, study.id, stored)
        eventlog.phase_changed(session, study.id, "finished")
    forget_contributions(session, study.id)
    ctx.received.forget(study.id)
    log.info("study %s finished", study.id)


def advance(ctx: Context, study_id: str, index: int) -> None:
    """Close round ``index`` and any following rounds that are already complete (an empty
    cohort, say), after a report made the round complete. Never raises: the request that
    triggered it succeeded (its reports are stored), and a round that could not be closed now
    (the database failed) is complete, so the sweeper closes it."""
    try:
        while close_round(ctx, study_id, index):
            index += 1
    except Exception:
        log.exception("study %s: round %d stays open for the sweeper", study_id, index)


def sweep(ctx: Context) -> int:
    """One pass of the background sweeper: start studies whose enrollment deadline passed and
    close rounds that are complete or late, then destroy the keys of ended studies and, on
    SQLite, copy the WAL into the database file (``Database.checkpoint``). The number of
    transitions made."""
    now = utcnow()
    done = 0
    with ctx.transaction() as session:
        due_studies = repo.due_enrollments(session, now)
    for study_id in due_studies:
        try:
            with ctx.transaction() as session:
                study = repo.get_study(session, study_id)
                if study is not None and study.phase == "enrolling":
                    start_study(ctx, session, study, now)
                    done += 1
        except Exception:  # one study's trouble must not hold up the others' deadlines
            log.exception("sweep: starting study %s failed; retrying next sweep", study_id)
    with ctx.transaction() as session:
        due = repo.due_rounds(session, now)
    for study_id, index in due:
        try:
            done += int(close_round(ctx, study_id, index))
        except (KeyMissing, ProtocolVersionMismatch) as exc:  # the operator's to fix: one line
            log.error("sweep: round %d of study %s stays open: %s", index, study_id, exc)
        except Exception:
            log.exception("sweep: closing round %d of study %s failed", index, study_id)
    shred_ended(ctx)
    if ctx.db.is_sqlite:  # the WAL into the database file, off the requests' path
        ctx.db.checkpoint(passive=True)
    return done

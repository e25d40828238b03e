"""All SQL of the server (docs/architecture.md, convention 2): small functions over a ``Session``,
no business rules; studies and rounds here, participants in
``fedldp.server.store.participant_rows``, reports and contributions in
``fedldp.server.store.report_rows``, leases in ``fedldp.server.store.lease_rows``, the pieces they
share in ``fedldp.server.store.sql`` and ``fedldp.server.store.blocks``.

Writes that decide a transition are conditional updates (``… WHERE phase = 'enrolling'``, ``…
WHERE status = 'open'``) whose row count says whether this transaction won, so each transition
happens once whatever the number of requests, threads or replicas racing for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    CursorResult,
    func,
    select,
    update,
)
from sqlalchemy.orm import Session

from fedldp.protocol.core.base.records import RoundPlan
from fedldp.server.store.sql import (
    INT_MAX,
    ROUNDS,
    STUDIES,
)
from fedldp.server.store.tables import RoundRow, StudyRow

__all__ = [
    "add_received",
    "add_refused",
    "add_rounds",
    "add_study",
    "close_round_if_open",
    "count_participants",
    "due_enrollments",
    "due_rounds",
    "get_round",
    "get_study",
    "list_rounds",
    "list_studies",
    "set_study",
    "study_named",
    "study_protocol",
    "study_secret",
    "transition_study",
    "update_round",
]

# --------------------------------------------------------------------------- studies


def get_study(session: Session, study_id: str) -> StudyRow | None:
    if "\x00" in study_id:
        return None  # PostgreSQL text cannot hold NUL: binding it is a database error
    return session.get(StudyRow, study_id, populate_existing=True)


def add_study(session: Session, study: StudyRow) -> None:
    """Insert a new study (flushed: a name already taken raises IntegrityError here)."""
    session.add(study)
    session.flush()


def study_protocol(session: Session, study_id: str) -> str | None:
    """The protocol of a study (from the session's identity map when loaded: it never changes)."""
    study = session.get(StudyRow, study_id)
    return None if study is None else study.protocol


def list_studies(session: Session) -> list[StudyRow]:
    return list(session.scalars(select(StudyRow).order_by(StudyRow.created_at, StudyRow.id)))


def count_by_phase(session: Session) -> dict[str, int]:
    rows = session.execute(select(StudyRow.phase, func.count()).group_by(StudyRow.phase))
    return {phase: int(n) for phase, n in rows}


MOVED = "fedldp.moved"
"""Set in a session's ``info`` by the writes that move a study (its phase, its current round, a
round's status): ``Context.transaction`` announces the transition once the session commits."""


def _moved(session: Session) -> None:
    session.info[MOVED] = True


def transition_study(
    session: Session, study_id: str, from_phases: Sequence[str], **values: Any
) -> bool:
    """Set ``values`` (e.g. ``phase``) iff the study is in one of ``from_phases``: did it happen?"""
    stmt = (
        update(StudyRow)
        .where(StudyRow.id == study_id, StudyRow.phase.in_(list(from_phases)))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    result: CursorResult[Any] = session.execute(stmt)  # type: ignore[assignment]
    if result.rowcount == 1:
        _moved(session)
    return result.rowcount == 1


def set_study(session: Session, study_id: str, **values: Any) -> None:
    if "phase" in values or "current_round" in values:
        _moved(session)
    session.execute(
        update(StudyRow)
        .where(StudyRow.id == study_id)
        .values(**values)
        .execution_options(synchronize_session=False)
    )


def count_participants(session: Session, study_id: str, count: int) -> int | None:
    """Add ``count`` explicitly numbered participants to an enrolling study: the new total, or
    None if the study is not enrolling."""
    table = STUDIES  # the table's UPDATE: the ORM's bookkeeping cost each enrollment batch ~1 ms
    stmt = (
        update(table)
        .where(table.c.id == study_id, table.c.phase == "enrolling")
        .values(n_participants=table.c.n_participants + count)
        .returning(table.c.n_participants)
    )
    total = session.execute(stmt).scalar_one_or_none()
    return None if total is None else int(total)


def study_named(session: Session, name: str) -> StudyRow | None:
    return session.execute(select(StudyRow).where(StudyRow.name == name)).scalar_one_or_none()


def study_secret(session: Session, study_id: str) -> str | None:
    return session.execute(
        select(StudyRow.secret).where(StudyRow.id == study_id)
    ).scalar_one_or_none()


def due_enrollments(session: Session, now: datetime) -> list[str]:
    stmt = select(StudyRow.id).where(
        StudyRow.phase == "enrolling", StudyRow.enrollment_deadline <= now
    )
    return list(session.scalars(stmt))


# --------------------------------------------------------------------------- rounds


def add_rounds(session: Session, study_id: str, rounds: Iterable[RoundPlan]) -> None:
    """The rows of a plan's rounds, all pending, none received."""
    session.add_all(
        RoundRow(
            study_id=study_id,
            index=rp.index,
            name=rp.name,
            status="pending",
            payload_kind=rp.payload_kind,
            payload_shape=list(rp.payload_shape),
            expected=int(rp.cohort.size),
            received=0,
            refused=0,
            late=0,
        )
        for rp in rounds
    )
    session.flush()


def list_rounds(session: Session, study_id: str) -> list[RoundRow]:
    stmt = select(RoundRow).where(RoundRow.study_id == study_id).order_by(RoundRow.index)
    return list(session.scalars(stmt.execution_options(populate_existing=True)))


def get_round(
    session: Session, study_id: str, index: int, *, lock: bool = False
) -> RoundRow | None:
    """Round ``index``; ``lock`` locks the row (PostgreSQL) so that the round cannot close
    while this transaction adds reports to it. The lock is ``FOR NO KEY UPDATE``, not ``FOR
    SHARE``: the transaction goes on to update the round's counter, and two transactions that
    both hold a shared lock and then both update the row deadlock."""
    if not 0 <= index <= INT_MAX:
        return None  # binding it would overflow the column's type (a database error)
    stmt = select(RoundRow).where(RoundRow.study_id == study_id, RoundRow.index == index)
    if lock:
        stmt = stmt.with_for_update(key_share=True)
    return session.scalars(stmt.execution_options(populate_existing=True)).one_or_none()


def update_round(session: Session, study_id: str, index: int, **values: Any) -> None:
    if "status" in values:
        _moved(session)
    session.execute(
        update(RoundRow)
        .where(RoundRow.study_id == study_id, RoundRow.index == index)
        .values(**values)
        .execution_options(synchronize_session=False)
    )


def close_round_if_open(session: Session, study_id: str, index: int, now: datetime) -> bool:
    """Close round ``index`` iff it is open: True for the one transaction that closes it."""
    stmt = (
        update(RoundRow)
        .where(RoundRow.study_id == study_id, RoundRow.index == index, RoundRow.status == "open")
        .values(status="closed", closed_at=now)
        .execution_options(synchronize_session=False)
    )
    result: CursorResult[Any] = session.execute(stmt)  # type: ignore[assignment]
    if result.rowcount == 1:
        _moved(session)
    return result.rowcount == 1


def add_received(session: Session, study_id: str, index: int, count: int) -> int:
    """Add ``count`` to the round's report counter; the new count."""
    # the table's, not the entity's: an ORM-enabled UPDATE costs a report batch about a
    # millisecond of bookkeeping (the loaded round's counter is not read after it)
    table = ROUNDS
    stmt = (
        update(table)
        .where(table.c.study_id == study_id, table.c.index == index)
        .values(received=table.c.received + count)
        .returning(table.c.received)
    )
    return int(session.execute(stmt).scalar_one())


def add_refused(
    session: Session, study_id: str, index: int, *, refused: int = 0, late: int = 0
) -> None:
    """Count reports of round ``index`` refused by its checks, or sent after it closed."""
    session.execute(
        update(RoundRow)
        .where(RoundRow.study_id == study_id, RoundRow.index == index)
        .values(refused=RoundRow.refused + refused, late=RoundRow.late + late)
    )


def due_rounds(session: Session, now: datetime) -> list[tuple[str, int]]:
    """Open rounds that are complete or past their deadline."""
    stmt = select(RoundRow.study_id, RoundRow.index).where(
        RoundRow.status == "open",
        (RoundRow.received >= RoundRow.expected) | (RoundRow.deadline <= now),
    )
    return [(str(s), int(k)) for s, k in session.execute(stmt).all()]

"""The repository of leases (SQL only; the rules are in ``fedldp.server.services.leases``): the
study's id counter, from which leases and server-numbered enrollments take their ids, and the lease
rows.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from fedldp.server.store.repository import set_study
from fedldp.server.store.tables import LeaseRow, StudyRow

__all__ = ["add_lease", "count_enrolled", "expired_lease", "lease_of", "take_ids"]


def take_ids(session: Session, study_id: str, size: int, limit: int | None) -> int | None:
    """Hand out the next ``size`` ids never handed out (a lease's block or server-numbered
    enrollments) of an enrolling study, all below ``limit`` when given (fewer when only fewer
    are left): the first, or None when none is left (or the study is not enrolling). The study
    row stays locked to the end of the caller's transaction."""
    stmt = (
        select(StudyRow.leased)
        .where(StudyRow.id == study_id, StudyRow.phase == "enrolling")
        .with_for_update()
    )
    first = session.execute(stmt).scalar_one_or_none()
    if first is None:
        return None
    stop = first + size if limit is None else min(first + size, limit)
    if stop <= first:
        return None
    set_study(session, study_id, leased=stop)
    return int(first)


def expired_lease(session: Session, study_id: str, now: datetime) -> LeaseRow | None:
    """The first lease of the study that expired before all its ids enrolled and that was not
    leased again yet (marked released now, inside the caller's transaction)."""
    stmt = (
        select(LeaseRow)
        .where(
            LeaseRow.study_id == study_id,
            LeaseRow.released.is_(False),
            LeaseRow.expires_at <= now,
            LeaseRow.enrolled < LeaseRow.stop - LeaseRow.start,
        )
        .order_by(LeaseRow.start)
        .limit(1)
        .with_for_update()
    )
    found = session.execute(stmt).scalar_one_or_none()
    if found is not None:
        found.released = True
    return found


def add_lease(
    session: Session, study_id: str, start: int, stop: int, expires_at: datetime
) -> LeaseRow:
    """A new lease of [start, stop), numbered after the study's others."""
    last = session.execute(
        select(func.max(LeaseRow.serial)).where(LeaseRow.study_id == study_id)
    ).scalar_one_or_none()
    row = LeaseRow(
        study_id=study_id,
        serial=(last or 0) + 1,
        start=start,
        stop=stop,
        expires_at=expires_at,
        enrolled=0,
        released=False,
    )
    session.add(row)
    session.flush()
    return row


def lease_of(session: Session, study_id: str, participant_id: int) -> LeaseRow | None:
    """The current lease (not released) whose block holds ``participant_id``."""
    stmt = (
        select(LeaseRow)
        .where(
            LeaseRow.study_id == study_id,
            LeaseRow.released.is_(False),
            LeaseRow.start <= participant_id,
            LeaseRow.stop > participant_id,
        )
        .order_by(LeaseRow.serial.desc())
        .limit(1)
    )
    return session.execute(stmt).scalar_one_or_none()


def count_enrolled(session: Session, study_id: str, serial: int, count: int) -> None:
    table = LeaseRow.metadata.tables[LeaseRow.__tablename__]  # no ORM bookkeeping (~1 ms)
    session.execute(
        update(table)
        .where(table.c.study_id == study_id, table.c.serial == serial)
        .values(enrolled=table.c.enrolled + count)
    )

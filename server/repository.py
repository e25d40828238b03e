"""All SQL of the server (STYLE.md rule 2): small functions over a ``Session``, no business rules.

Writes that decide a transition are conditional updates (``… WHERE phase = 'enrolling'``, ``…
WHERE status = 'open'``) whose row count says whether this transaction won, so each transition
happens once whatever the number of requests, threads or replicas racing for it.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import (
    ColumnElement,
    CursorResult,
    Select,
    Table,
    Text,
    delete,
    func,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from fedldp.protocol.core.base import FloatArray, IntArray
from fedldp.server.db import Database
from fedldp.server.tables import (
    ContributionRow,
    ParticipantRow,
    ReportRow,
    RoundRow,
    StudyRow,
)

__all__ = [
    "INT_MAX",
    "IN_CHUNK",
    "add_participants",
    "add_received",
    "add_refused",
    "close_round_if_open",
    "count_participants",
    "due_enrollments",
    "due_rounds",
    "ended_among",
    "existing_reports",
    "forget_contributions",
    "get_round",
    "get_study",
    "insert_contributions",
    "insert_reports",
    "list_rounds",
    "list_studies",
    "load_participants",
    "max_participant_id",
    "participant",
    "reported_pids",
    "reported_rounds",
    "set_study",
    "spent_per_participant",
    "stream_reports",
    "study_named",
    "study_secret",
    "transition_study",
    "update_round",
]

IN_CHUNK = 900
"""Largest IN-list per statement (below SQLite's historical 999-variable limit)."""

INT_MAX = 2**31 - 1
"""Largest value of an ``Integer`` column on every backend (PostgreSQL's is 32-bit)."""


SQLITE_VARIABLES = 7_000
"""Values per INSERT statement on SQLite (below its limit of 32,766 variables)."""

RANGE_SPAN = 4
"""Ids spread over at most this many times their number (a block of participants) are looked up
with one range condition, others with IN-lists of at most ``IN_CHUNK``."""


def _among(column: ColumnElement[int], ids: Sequence[int]) -> Iterator[ColumnElement[bool]]:
    """Conditions that together select the rows whose ``column`` is one of ``ids``: one range
    (which also selects the values between them: the caller drops those) or IN-lists. A range
    scan reads a block of ids at the cost of one index seek; IN-lists cost one each."""
    if not ids:
        return
    low, high = min(ids), max(ids)
    if high - low < RANGE_SPAN * len(ids):
        yield column.between(low, high)
        return
    for start in range(0, len(ids), IN_CHUNK):
        yield column.in_(list(ids[start : start + IN_CHUNK]))


def _raw(session: Session, stmt: Select[Any]) -> list[Any]:
    """The rows of ``stmt`` as the driver returns them (tuples), for the reads of many rows. A
    Row object per row was most of their cost, and their columns (numbers, text, bytes) need no
    result processing on either backend (the storage tests read them on both)."""
    result: CursorResult[Any] = session.execute(stmt)  # type: ignore[assignment]
    try:
        return list(result.cursor.fetchall())
    finally:
        result.close()


_REPORTS: Table = ReportRow.metadata.tables[ReportRow.__tablename__]
_CONTRIBUTIONS: Table = ContributionRow.metadata.tables[ContributionRow.__tablename__]
_PARTICIPANTS: Table = ParticipantRow.metadata.tables[ParticipantRow.__tablename__]


def _processed(values: Sequence[Any], process: Callable[[Any], Any]) -> list[Any]:
    """Each value through ``process``, once for a run of the same object (participants of an
    enrollment batch share the dict of their equal metadata: one JSON encoding for them all)."""
    out: list[Any] = []
    last: object = _processed  # no value is this function
    done: Any = None
    for value in values:
        if value is not last:
            last, done = value, process(value)
        out.append(done)
    return out


class _Columns:
    """Rows to insert, column by column: the values all rows share (``same``) and one value per
    row (``each``), so that a batch of tens of thousands is never built as one dict per row."""

    def __init__(self, same: dict[str, Any], each: dict[str, Sequence[Any]]) -> None:
        self.same = same
        self.each = each
        self.size = len(next(iter(each.values())))

    def _column(self, name: str, process: Callable[[Any], Any] | None) -> Iterable[Any]:
        if name in self.same:
            value = self.same[name]
            return itertools.repeat(value if process is None else process(value), self.size)
        values = self.each[name]
        return values if process is None else _processed(values, process)

    def dicts(self, table: Table) -> list[dict[str, Any]]:
        """One dict per row, keyed by column name (for SQLAlchemy's ``executemany``)."""
        names = [c.name for c in table.columns]
        rows = zip(*(self._column(name, None) for name in names), strict=True)
        return [dict(zip(names, row, strict=True)) for row in rows]

    def insert_sqlite(self, session: Session, table: Table, tail: str = "") -> list[Any]:
        """Insert the rows on SQLite, at the driver: multi-row ``INSERT … VALUES`` statements
        of up to ``SQLITE_VARIABLES`` values, each followed by ``tail`` (``ON CONFLICT``,
        ``RETURNING``), in the session's transaction; the rows they return. Half the time of
        SQLAlchemy's ``executemany`` on large batches (its per-row parameter handling): the
        values are laid out column by column into one flat list, each through its column's own
        bind processor (so that rows stored at the driver equal SQLAlchemy's; a value all rows
        share is processed once)."""
        connection = session.connection()
        dialect = connection.dialect
        width = len(table.columns)
        values: list[Any] = [None] * (width * self.size)
        for j, column in enumerate(table.columns):
            process = column.type.dialect_impl(dialect).bind_processor(dialect)
            values[j::width] = self._column(column.name, process)
        quote = dialect.identifier_preparer.quote
        head = (
            f"INSERT INTO {dialect.identifier_preparer.format_table(table)} "
            f"({', '.join(quote(c.name) for c in table.columns)}) VALUES "
        )
        marks = "(" + ", ".join("?" * width) + ")"
        step = SQLITE_VARIABLES // width
        returned: list[Any] = []
        for start in range(0, self.size, step):
            rows = min(step, self.size - start)
            sql = head + ", ".join([marks] * rows) + tail
            result = connection.exec_driver_sql(
                sql, tuple(values[start * width : (start + rows) * width])
            )
            if result.returns_rows:
                returned += result.cursor.fetchall()  # plain tuples: no Row per returned row
        return returned


# --------------------------------------------------------------------------- studies


def get_study(session: Session, study_id: str) -> StudyRow | None:
    if "\x00" in study_id:
        return None  # PostgreSQL text cannot hold NUL: binding it is a database error
    return session.get(StudyRow, study_id, populate_existing=True)


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
    stmt = (
        update(StudyRow)
        .where(StudyRow.id == study_id, StudyRow.phase == "enrolling")
        .values(n_participants=StudyRow.n_participants + count)
        .returning(StudyRow.n_participants)
    )
    total = session.execute(stmt).scalar_one_or_none()
    return None if total is None else int(total)


def study_named(session: Session, name: str) -> StudyRow | None:
    return session.execute(select(StudyRow).where(StudyRow.name == name)).scalar_one_or_none()


def study_secret(session: Session, study_id: str) -> str | None:
    return session.execute(
        select(StudyRow.secret).where(StudyRow.id == study_id)
    ).scalar_one_or_none()


def max_participant_id(session: Session, study_id: str) -> int | None:
    stmt = select(func.max(ParticipantRow.participant_id)).where(
        ParticipantRow.study_id == study_id
    )
    value = session.execute(stmt).scalar_one_or_none()
    return None if value is None else int(value)


def due_enrollments(session: Session, now: datetime) -> list[str]:
    stmt = select(StudyRow.id).where(
        StudyRow.phase == "enrolling", StudyRow.enrollment_deadline <= now
    )
    return list(session.scalars(stmt))


# --------------------------------------------------------------------------- participants


def add_participants(
    session: Session,
    study_id: str,
    enrolled_at: datetime,
    participant_ids: Sequence[int],
    epsilons: Sequence[float],
    metadata: Sequence[dict[str, Any]] | dict[str, Any],
) -> None:
    """Bulk insert through the table, not the ORM unit of work (enrollment batches are large),
    and on SQLite at the driver. ``metadata`` is each participant's, or one for all of them."""
    same: dict[str, Any] = {"study_id": study_id, "enrolled_at": enrolled_at}
    each: dict[str, Sequence[Any]] = {"participant_id": participant_ids, "epsilon": epsilons}
    if isinstance(metadata, dict):
        same["metadata"] = metadata
    else:
        each["metadata"] = metadata
    columns = _Columns(same, each)
    table = _PARTICIPANTS
    if session.get_bind().dialect.name == "sqlite":
        columns.insert_sqlite(session, table)
    else:
        session.execute(table.insert(), columns.dicts(table))


def participant(session: Session, study_id: str, participant_id: int) -> ParticipantRow | None:
    return session.get(ParticipantRow, (study_id, participant_id))


def declared_epsilons(session: Session, study_id: str) -> FloatArray:
    """Every participant's declared ε, in participant-id order."""
    table = _PARTICIPANTS
    stmt = (
        select(table.c.epsilon).where(table.c.study_id == study_id).order_by(table.c.participant_id)
    )
    return np.asarray([r[0] for r in _raw(session, stmt)], dtype=np.float64)


def load_participants(session: Session, study_id: str) -> tuple[FloatArray, list[dict[str, Any]]]:
    """Every participant's declared ε and metadata, in participant-id order. The metadata are
    read as JSON text and parsed in one call (per-row JSON decoding was most of a study's start);
    a driver that decodes JSON itself (psycopg) hands back the objects."""
    table = _PARTICIPANTS
    stmt = (
        select(table.c.epsilon, type_coerce(table.c.metadata, Text))
        .where(table.c.study_id == study_id)
        .order_by(table.c.participant_id)
    )
    rows = _raw(session, stmt)
    eps = np.fromiter((r[0] for r in rows), dtype=np.float64, count=len(rows))
    raw: list[Any] = [r[1] for r in rows]
    if raw and isinstance(raw[0], str):
        raw = json.loads("[" + ",".join(raw) + "]")
    return eps, raw


# --------------------------------------------------------------------------- rounds


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
    stmt = (
        update(RoundRow)
        .where(RoundRow.study_id == study_id, RoundRow.index == index)
        .values(received=RoundRow.received + count)
        .returning(RoundRow.received)
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


# --------------------------------------------------------------------------- reports


def insert_reports(
    session: Session,
    study_id: str,
    index: int,
    received_at: datetime,
    participant_ids: Sequence[int],
    payloads: Sequence[bytes],
    epsilons: Sequence[float],
    digests: Sequence[str],
) -> set[int]:
    """Insert the reports of these participants in round ``index`` (payload bytes, ε charged,
    receipt digest each), skipping (study, round, participant) keys already stored: the ids
    that were inserted by this statement."""
    if not participant_ids:
        return set()
    columns = _Columns(
        {"study_id": study_id, "round": index, "received_at": received_at},
        {
            "participant_id": participant_ids,
            "payload": payloads,
            "epsilon": epsilons,
            "digest": digests,
        },
    )
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        return _insert_reports_sqlite(session, columns)
    if dialect != "postgresql":  # pragma: no cover - only SQLite and PostgreSQL are supported
        raise RuntimeError(f"unsupported database {dialect}")
    # A Core insert into the table (multi-row VALUES batches with RETURNING), not an ORM bulk
    # insert of ReportRow: the same statement without the ORM's per-row bookkeeping.
    table = _REPORTS
    stmt = postgresql.insert(table).on_conflict_do_nothing().returning(table.c.participant_id)
    return {int(pid) for pid in session.execute(stmt, columns.dicts(table)).scalars()}


def _insert_reports_sqlite(session: Session, columns: _Columns) -> set[int]:
    """``insert_reports`` on SQLite: ``INSERT … ON CONFLICT DO NOTHING RETURNING`` statements
    at the driver (whose ``executemany`` would drop the RETURNING rows)."""
    table = _REPORTS
    quote = session.get_bind().dialect.identifier_preparer.quote
    tail = f" ON CONFLICT DO NOTHING RETURNING {quote(table.c.participant_id.name)}"
    return {pid for (pid,) in columns.insert_sqlite(session, table, tail)}


def existing_reports(
    session: Session, study_id: str, index: int, participant_ids: Sequence[int]
) -> dict[int, tuple[str, datetime]]:
    """Digest and arrival time of the stored reports of these participants in this round."""
    table = _REPORTS
    wanted = set(participant_ids)
    out: dict[int, tuple[str, datetime]] = {}
    for among in _among(table.c.participant_id, participant_ids):
        stmt = select(table.c.participant_id, table.c.digest, table.c.received_at).where(
            table.c.study_id == study_id, table.c.round == index, among
        )
        for pid, digest, at in session.execute(stmt).all():
            if pid in wanted:
                out[int(pid)] = (str(digest), at)
    return out


def reported_pids(
    session: Session, study_id: str, index: int, participant_ids: IntArray
) -> IntArray:
    """Which of these participants have a report stored in round ``index``."""
    table = _REPORTS
    found: list[int] = []
    for among in _among(table.c.participant_id, participant_ids.tolist()):
        stmt = select(table.c.participant_id).where(
            table.c.study_id == study_id, table.c.round == index, among
        )
        found += (pid for (pid,) in _raw(session, stmt))
    stored = np.fromiter(found, dtype=np.int64, count=len(found))
    return participant_ids[np.isin(participant_ids, stored)]


def rounds_reported(
    db: Database, study_id: str, rounds: Sequence[int], participant_id: int
) -> list[int]:
    """Those of ``rounds`` in which the participant has a report (ascending): one lookup per
    round along the primary key, in one statement through the driver (the task endpoint's
    per-request read; ``Database.read``)."""
    marks = ",".join("?" * len(rounds))
    sql = (
        f"SELECT round FROM {_REPORTS.name} WHERE study_id = ? AND round IN ({marks}) "
        "AND participant_id = ? ORDER BY round"
    )
    return [int(k) for (k,) in db.read(sql, (study_id, *rounds, participant_id))]


def reported_rounds(
    session: Session, study_id: str, participant_ids: Sequence[int]
) -> dict[int, list[int]]:
    """The rounds each of these participants has reported in (ascending), looked up round by
    round along the primary key: a study has few rounds, and the reports need no second index
    (by participant) that every insert would have to update."""
    out: dict[int, list[int]] = {int(p): [] for p in participant_ids}
    ids = np.asarray(list(out), dtype=np.int64)
    indices = select(RoundRow.index).where(RoundRow.study_id == study_id).order_by(RoundRow.index)
    for k in session.scalars(indices).all():
        for pid in reported_pids(session, study_id, k, ids).tolist():
            out[pid].append(k)
    return out


def insert_contributions(
    session: Session,
    study_id: str,
    index: int,
    participant_ids: Sequence[int],
    payloads: Sequence[bytes],
) -> None:
    """Store central-trust contributions (their reports were just inserted, payload-less)."""
    if participant_ids:
        rows = [
            {"study_id": study_id, "round": index, "participant_id": pid, "payload": blob}
            for pid, blob in zip(participant_ids, payloads, strict=True)
        ]
        session.execute(_CONTRIBUTIONS.insert(), rows)


def ended_among(session: Session, study_ids: Sequence[str]) -> list[str]:
    """Those of ``study_ids`` whose study has finished, failed or been cancelled."""
    out: list[str] = []
    ids = list(study_ids)
    for start in range(0, len(ids), IN_CHUNK):
        stmt = select(StudyRow.id).where(
            StudyRow.id.in_(ids[start : start + IN_CHUNK]),
            StudyRow.phase.in_(["finished", "failed", "cancelled"]),
        )
        out += session.scalars(stmt).all()
    return sorted(out)


def forget_contributions(session: Session, study_id: str) -> int:
    """Delete a study's contributions and blank its reports' digests (a digest would let one
    test a guess of a statistic): only the release and its diagnostics remain. Returns how many
    contributions were deleted (0 for a local-trust study, which has none)."""
    table = _CONTRIBUTIONS
    deleted: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        delete(table).where(table.c.study_id == study_id)
    )
    if deleted.rowcount:
        session.execute(update(_REPORTS).where(_REPORTS.c.study_id == study_id).values(digest=""))
    return int(deleted.rowcount)


def _round_pages(
    session: Session,
    table: Table,
    study_id: str,
    index: int,
    value: ColumnElement[Any],
    chunk: int,
) -> Iterator[tuple[IntArray, list[Any]]]:
    """(ids, values) of one round's rows in participant order, ``chunk`` at a time: keyset
    pagination along the primary key keeps memory flat and works the same on every backend."""
    after = -1
    while True:
        stmt = (
            select(table.c.participant_id, value)
            .where(
                table.c.study_id == study_id,
                table.c.round == index,
                table.c.participant_id > after,
            )
            .order_by(table.c.participant_id)
            .limit(chunk)
        )
        rows = _raw(session, stmt)
        if not rows:
            return
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        yield ids, [r[1] for r in rows]
        after = int(ids[-1])


def stream_reports(
    session: Session, study_id: str, index: int, chunk: int, *, contributions: bool = False
) -> Iterator[tuple[IntArray, list[bytes]]]:
    """The round's reports in participant order, ``chunk`` at a time: (ids, payload bytes);
    ``contributions``: a central-trust study's payloads, kept in their own table."""
    table = _CONTRIBUTIONS if contributions else _REPORTS
    for ids, payloads in _round_pages(session, table, study_id, index, table.c.payload, chunk):
        yield ids, [bytes(p) for p in payloads]


def spent_per_participant(
    session: Session, study_id: str, n: int, rounds: int, chunk: int = 8192
) -> FloatArray:
    """ε charged to each participant by its stored reports in rounds 0..rounds-1 (basic
    composition), read round by round in participant order (cheaper than grouping by
    participant), so memory stays one float per participant."""
    table = _REPORTS
    spent = np.zeros(n, dtype=np.float64)
    for index in range(rounds):
        for ids, charges in _round_pages(session, table, study_id, index, table.c.epsilon, chunk):
            spent[ids] += np.asarray(charges, dtype=np.float64)
    return spent

"""The pieces the repository modules share (``repository``, ``report_rows``): the selection of
a set of ids by ranges or IN-lists, raw reads of many rows, column-wise bulk inserts, and the
tables' handles for SQLAlchemy Core statements."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import ColumnElement, CursorResult, LargeBinary, Select, Table
from sqlalchemy.orm import Session

from fedldp.server.store.tables import (
    ContributionRow,
    ParticipantBlockRow,
    ReportBlockRow,
    RoundRow,
    StudyRow,
)

__all__ = [
    "CONTRIBUTIONS",
    "INT_MAX",
    "IN_CHUNK",
    "PARTICIPANT_BLOCKS",
    "REPORT_BLOCKS",
    "ROUNDS",
    "STUDIES",
    "Columns",
    "among",
    "among_sql",
    "processed",
    "raw_rows",
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


def _spans(ids: Sequence[int]) -> Iterator[tuple[bool, Sequence[int]]]:
    """How ``among`` selects ``ids``: ``(True, (low, high))`` for one range, else
    ``(False, chunk)`` for IN-lists of at most ``IN_CHUNK``."""
    if not ids:
        return
    low, high = min(ids), max(ids)
    if high - low < RANGE_SPAN * len(ids):
        yield True, (low, high)
        return
    for start in range(0, len(ids), IN_CHUNK):
        yield False, ids[start : start + IN_CHUNK]


def among(column: ColumnElement[int], ids: Sequence[int]) -> Iterator[ColumnElement[bool]]:
    """Conditions that together select the rows whose ``column`` is one of ``ids``: one range
    (which also selects the values between them: the caller drops those) or IN-lists. A range
    scan reads a block of ids at the cost of one index seek; IN-lists cost one each."""
    for is_range, values in _spans(ids):
        yield column.between(values[0], values[-1]) if is_range else column.in_(list(values))


def among_sql(column: str, ids: Sequence[int]) -> Iterator[tuple[str, tuple[int, ...]]]:
    """``among`` as SQL text with ``?`` placeholders and its parameters (for ``Database.read``)."""
    for is_range, values in _spans(ids):
        marks = "? AND ?" if is_range else f"({','.join('?' * len(values))})"
        yield f"{column} {'BETWEEN' if is_range else 'IN'} {marks}", tuple(values)


def raw_rows(session: Session, stmt: Select[Any]) -> list[Any]:
    """The rows of ``stmt`` as the driver returns them (tuples), for the reads of many rows. A
    Row object per row was most of their cost, and their columns (numbers, text, bytes) need no
    result processing on either backend (the storage tests read them on both)."""
    result: CursorResult[Any] = session.execute(stmt)  # type: ignore[assignment]
    try:
        return list(result.cursor.fetchall())
    finally:
        result.close()


REPORT_BLOCKS: Table = ReportBlockRow.metadata.tables[ReportBlockRow.__tablename__]
CONTRIBUTIONS: Table = ContributionRow.metadata.tables[ContributionRow.__tablename__]
PARTICIPANT_BLOCKS: Table = ParticipantBlockRow.metadata.tables[ParticipantBlockRow.__tablename__]
ROUNDS: Table = RoundRow.metadata.tables[RoundRow.__tablename__]
STUDIES: Table = StudyRow.metadata.tables[StudyRow.__tablename__]


def processed(values: Sequence[Any], process: Callable[[Any], Any]) -> list[Any]:
    """Each value through ``process``, once for a run of the same object (participants of an
    enrollment batch share the dict of their equal metadata: one JSON encoding for them all)."""
    out: list[Any] = []
    for _, run in itertools.groupby(values, key=id):  # runs of one object, found in C
        same = list(run)
        out += [process(same[0])] * len(same)
    return out


class Columns:
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
        if process is None:
            return values
        if values and isinstance(values[0], dict):  # JSON: runs of one dict encoded once
            return processed(values, process)
        return map(process, values)

    def dicts(self, table: Table) -> list[dict[str, Any]]:
        """One dict per row, keyed by column name (for SQLAlchemy's ``executemany``)."""
        names = [c.name for c in table.columns]
        rows = zip(*(self._column(name, None) for name in names), strict=True)
        return [dict(zip(names, row, strict=True)) for row in rows]

    def insert_sqlite(self, session: Session, table: Table, tail: str = "") -> int:
        """Insert the rows on SQLite, at the driver: multi-row ``INSERT … VALUES`` statements
        of up to ``SQLITE_VARIABLES`` values, each followed by ``tail`` (``ON CONFLICT``), in
        the session's transaction; how many rows were inserted. Half the time of SQLAlchemy's
        ``executemany`` on large batches (its per-row parameter handling): the values are laid
        out column by column into one flat list, each through its column's own bind processor
        (so that rows stored at the driver equal SQLAlchemy's; a value all rows share is
        processed once). No ``RETURNING``: it cost more than the insert itself (the callers
        learn which keys were stored before from a read, under the write lock)."""
        connection = session.connection()
        dialect = connection.dialect
        width = len(table.columns)
        values: list[Any] = [None] * (width * self.size)
        for j, column in enumerate(table.columns):
            process = column.type.dialect_impl(dialect).bind_processor(dialect)
            if isinstance(column.type, LargeBinary):
                process = None  # sqlite3 binds bytes as a BLOB itself (its Binary: a memoryview)
            values[j::width] = self._column(column.name, process)
        quote = dialect.identifier_preparer.quote
        head = (
            f"INSERT INTO {dialect.identifier_preparer.format_table(table)} "
            f"({', '.join(quote(c.name) for c in table.columns)}) VALUES "
        )
        marks = "(" + ", ".join("?" * width) + ")"
        step = SQLITE_VARIABLES // width
        inserted = 0
        for start in range(0, self.size, step):
            rows = min(step, self.size - start)
            sql = head + ", ".join([marks] * rows) + tail
            result = connection.exec_driver_sql(
                sql, tuple(values[start * width : (start + rows) * width])
            )
            inserted += result.rowcount
        return inserted

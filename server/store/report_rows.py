"""The SQL of reports and central-trust contributions (``fedldp.server.store.repository`` has the
rest): bulk inserts that skip stored keys, lookups by participant ids, and pages of a round's
reports for aggregation."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator, Sequence
from datetime import datetime
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np
from sqlalchemy import (
    ColumnElement,
    CursorResult,
    Table,
    delete,
    select,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from fedldp.protocol.core.base.records import FloatArray, IntArray
from fedldp.server.store.db import Database
from fedldp.server.store.sql import (
    CONTRIBUTIONS,
    IN_CHUNK,
    REPORTS,
    Columns,
    among,
    among_sql,
    raw_rows,
)
from fedldp.server.store.tables import RoundRow, StudyRow

__all__ = [
    "count_reported",
    "ended_among",
    "existing_reports",
    "forget_contributions",
    "insert_contributions",
    "insert_reports",
    "receipt_digests",
    "reported_now",
    "reported_pids",
    "reported_rounds",
    "rounds_reported",
    "spent_per_participant",
    "stream_reports",
]


def receipt_digests(kind: str, blobs: list[bytes], key: bytes | None = None) -> list[str]:
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


def insert_reports(
    session: Session,
    study_id: str,
    index: int,
    received_at: datetime,
    participant_ids: Sequence[int],
    payloads: Sequence[bytes],
    epsilons: Sequence[float],
    digests: Sequence[str] | None,
) -> set[int]:
    """Insert the reports of these participants in round ``index`` (payload bytes, ε charged,
    receipt digest each: None for a local-trust study's, whose digest is their payload's, see
    ``existing_reports``), skipping (study, round, participant) keys already stored: the ids
    that were inserted by this statement."""
    if not participant_ids:
        return set()
    same: dict[str, Any] = {"study_id": study_id, "round": index, "received_at": received_at}
    each: dict[str, Sequence[Any]] = {
        "participant_id": list(participant_ids),
        "payload": payloads,
        "epsilon": epsilons,
    }
    if digests is None:
        same["digest"] = ""
    else:
        each["digest"] = digests
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        return _insert_reports_sqlite(session, study_id, index, same, each)
    if dialect != "postgresql":  # pragma: no cover - only SQLite and PostgreSQL are supported
        raise RuntimeError(f"unsupported database {dialect}")
    columns = Columns(same, each)
    # A Core insert into the table (multi-row VALUES batches with RETURNING), not an ORM bulk
    # insert of ReportRow: the same statement without the ORM's per-row bookkeeping.
    table = REPORTS
    stmt = postgresql.insert(table).on_conflict_do_nothing().returning(table.c.participant_id)
    return {int(pid) for pid in session.execute(stmt, columns.dicts(table)).scalars()}


def _insert_reports_sqlite(
    session: Session,
    study_id: str,
    index: int,
    same: dict[str, Any],
    each: dict[str, Sequence[Any]],
) -> set[int]:
    """``insert_reports`` on SQLite (the rows as ``Columns``' ``same`` and ``each``): the keys
    stored already are read first (one range read for a block of ids, which finds none in the
    usual case), and the others inserted at the driver without ``RETURNING`` (which cost more
    than the insert). Every SQLite transaction of the server holds the database's write lock
    from its start (``BEGIN IMMEDIATE``), so no report can be stored between the read and the
    insert."""
    ids = each["participant_id"]
    stored = set(reported_pids(session, study_id, index, np.asarray(ids, dtype=np.int64)).tolist())
    if stored:
        keep = [j for j, pid in enumerate(ids) if pid not in stored]
        each = {name: [values[j] for j in keep] for name, values in each.items()}
        ids = [ids[j] for j in keep]
    if not ids:
        return set()
    tail = " ON CONFLICT DO NOTHING"  # none, under the write lock; a conflict is not an error
    inserted = Columns(same, each).insert_sqlite(session, REPORTS, tail)
    if inserted != len(ids):  # pragma: no cover - the write lock makes this impossible
        raise RuntimeError(f"{len(ids) - inserted} reports appeared during their insert")
    return set(ids)


def existing_reports(
    session: Session, study_id: str, index: int, kind: str, participant_ids: Sequence[int]
) -> dict[int, tuple[str, datetime]]:
    """Receipt digest and arrival time of the stored reports of these participants in round
    ``index`` (whose payloads are of ``kind``): the stored digest of a central-trust report
    (blank once its study ended), else the SHA-256 of the stored payload (``receipt_digests``;
    local-trust reports store none since they store the payload it comes from)."""
    table = REPORTS
    wanted = set(participant_ids)
    out: dict[int, tuple[str, datetime]] = {}
    columns = (table.c.participant_id, table.c.digest, table.c.received_at, table.c.payload)
    for within in among(table.c.participant_id, participant_ids):
        stmt = select(*columns).where(table.c.study_id == study_id, table.c.round == index, within)
        for pid, digest, at, payload in session.execute(stmt).all():
            if pid in wanted:
                if not digest and payload:
                    digest = receipt_digests(kind, [bytes(payload)])[0]
                out[int(pid)] = (str(digest), at)
    return out


def reported_pids(
    session: Session, study_id: str, index: int, participant_ids: IntArray
) -> IntArray:
    """Which of these participants have a report stored in round ``index``."""
    table = REPORTS
    found: list[tuple[int]] = []
    for within in among(table.c.participant_id, participant_ids.tolist()):
        stmt = select(table.c.participant_id).where(
            table.c.study_id == study_id, table.c.round == index, within
        )
        found += raw_rows(session, stmt)
    return _present(participant_ids, found)


def reported_now(db: Database, study_id: str, index: int, participant_ids: IntArray) -> IntArray:
    """``reported_pids`` outside any transaction of the process's (``Database.read``: on SQLite
    a WAL read of the last commit, which waits for no writer), for the task endpoint: what it
    reads may be outdated the moment it is answered anyway (a report sent twice is a
    duplicate)."""
    found: list[tuple[int]] = []
    head = f"SELECT participant_id FROM {REPORTS.name} WHERE study_id = ? AND round = ? AND "
    for condition, params in among_sql("participant_id", participant_ids.tolist()):
        found += db.read(head + condition, (study_id, index, *params))
    return _present(participant_ids, found)


def _present(participant_ids: IntArray, found: list[tuple[int]]) -> IntArray:
    """Those of ``participant_ids`` among the rows ``found`` (a range read also finds others)."""
    stored = np.fromiter(chain.from_iterable(found), dtype=np.int64, count=len(found))
    return participant_ids[np.isin(participant_ids, stored)]


def count_reported(db: Database, study_id: str, index: int, low: int, high: int) -> int:
    """How many reports round ``index`` holds from participants ``low..high`` (counted along
    the primary key, outside any transaction as ``reported_now``)."""
    sql = (
        f"SELECT count(*) FROM {REPORTS.name} WHERE study_id = ? AND round = ? "
        "AND participant_id BETWEEN ? AND ?"
    )
    return int(db.read(sql, (study_id, index, low, high))[0][0])


def rounds_reported(
    db: Database, study_id: str, rounds: Sequence[int], participant_id: int
) -> list[int]:
    """Those of ``rounds`` in which the participant has a report (ascending): one lookup per
    round along the primary key, in one statement through the driver (the task endpoint's
    per-request read; ``Database.read``)."""
    marks = ",".join("?" * len(rounds))
    sql = (
        f"SELECT round FROM {REPORTS.name} WHERE study_id = ? AND round IN ({marks}) "
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
        session.execute(CONTRIBUTIONS.insert(), rows)


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
    table = CONTRIBUTIONS
    deleted: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        delete(table).where(table.c.study_id == study_id)
    )
    if deleted.rowcount:
        session.execute(update(REPORTS).where(REPORTS.c.study_id == study_id).values(digest=""))
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
        rows = raw_rows(session, stmt)
        if not rows:
            return
        ids = np.fromiter(map(itemgetter(0), rows), dtype=np.int64, count=len(rows))
        yield ids, list(map(itemgetter(1), rows))
        after = int(ids[-1])


def stream_reports(
    session: Session, study_id: str, index: int, chunk: int, *, contributions: bool = False
) -> Iterator[tuple[IntArray, list[bytes]]]:
    """The round's reports in participant order, ``chunk`` at a time: (ids, payload bytes);
    ``contributions``: a central-trust study's payloads, kept in their own table."""
    table = CONTRIBUTIONS if contributions else REPORTS
    for ids, payloads in _round_pages(session, table, study_id, index, table.c.payload, chunk):
        yield ids, list(map(bytes, payloads))


def spent_per_participant(
    session: Session, study_id: str, n: int, rounds: int, chunk: int = 8192
) -> FloatArray:
    """ε charged to each participant by its stored reports in rounds 0..rounds-1 (basic
    composition), read round by round in participant order (cheaper than grouping by
    participant), so memory stays one float per participant."""
    table = REPORTS
    spent = np.zeros(n, dtype=np.float64)
    for index in range(rounds):
        for ids, charges in _round_pages(session, table, study_id, index, table.c.epsilon, chunk):
            spent[ids] += np.asarray(charges, dtype=np.float64)
    return spent

"""The SQL of reports and central-trust contributions (``fedldp.server.store.repository`` has the
rest).

Reports are stored in blocks (``tables.ReportBlockRow``): the reports one transaction accepts in
one round, cut where their ids span ``SPAN``, each block one row whose columns are packed arrays.
A batch of 10,000 users is three rows, not 10,000, and a scalar report costs its 8 payload bytes
and its ε (8, or none when a block's reports charged the same) rather than a row of its own.

Exactly once: a participant's report is in at most one block of a round. ``insert_reports``
reads the blocks that could hold its ids (those whose ``low`` lies within ``SPAN`` below an id:
ranges of the primary key) and stores only the others, under the lock every ingesting
transaction holds (SQLite: the database's write lock, taken at ``BEGIN IMMEDIATE``; PostgreSQL:
the round row's, ``repository.get_round(lock=True)``), so nothing is stored between the read and
the insert. Reads for aggregation return the reports in participant order (the order of a round's
slots), whatever the blocks, so every estimate is the same to the last bit.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import (
    CursorResult,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.orm import Session

from fedldp.protocol.core.base.records import BoolArray, FloatArray, IntArray
from fedldp.server.store.blocks import (
    block_ids,
    cuts,
    id_ranges,
    overlapping,
    overlapping_sql,
    pack_ids,
    pack_values,
    sorted_unique,
    unpack_values,
)
from fedldp.server.store.db import Database
from fedldp.server.store.sql import (
    CONTRIBUTIONS,
    IN_CHUNK,
    REPORT_BLOCKS,
    Columns,
    raw_rows,
)
from fedldp.server.store.tables import RoundRow, StudyRow

__all__ = [
    "StoredReport",
    "count_reported",
    "count_reports",
    "ended_among",
    "existing_reports",
    "forget_contributions",
    "insert_contributions",
    "insert_reports",
    "list_reports",
    "receipt_digests",
    "reported_now",
    "reported_pids",
    "reported_rounds",
    "rounds_reported",
    "spent_per_participant",
    "stream_contributions",
    "stream_reports",
]

RANGES_PER_READ = 64
"""Ranges of ids looked up per statement (OR-ed conditions on the primary key)."""

BLOCKS_PER_PAGE = 16
"""Blocks per fetch when a round is read whole (at most ``16 * SPAN`` reports held at once)."""

DIGEST_BYTES = 16
"""Bytes of a stored receipt digest (its 32 hexadecimal digits)."""

_KEY = (REPORT_BLOCKS.c.low, REPORT_BLOCKS.c.high, REPORT_BLOCKS.c.size, REPORT_BLOCKS.c.ids)
_KEY_SQL = "low, high, size, ids"


class StoredReport(NamedTuple):
    """One stored report, unpacked from its block (``list_reports``)."""

    round: int
    participant_id: int
    payload: bytes
    epsilon: float
    digest: str  # the stored digest ("" when none is stored: see ``existing_reports``)
    received_at: datetime


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


# --------------------------------------------------------------------------- block lookups


def _key_rows_over(session: Session, study_id: str, index: int, ids: IntArray) -> list[Any]:
    """The ``low, high, size, ids`` of round ``index``'s blocks that may hold one of ``ids``,
    read in the session's transaction as SQL text at the driver: the OR of a varying number of
    ranges is a new statement to SQLAlchemy's compiler each time, which cost a grouped commit
    of single reports more than the read."""
    ranges = id_ranges(ids)
    connection = session.connection()
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    head = f"SELECT {_KEY_SQL} FROM {REPORT_BLOCKS.name} WHERE study_id = ? AND round = ? AND "
    out: list[Any] = []
    for start in range(0, len(ranges), RANGES_PER_READ):
        condition, params = overlapping_sql(ranges[start : start + RANGES_PER_READ])
        sql = (head + condition).replace("?", mark)
        out += connection.exec_driver_sql(sql, (study_id, index, *params)).fetchall()
    return out


def _present(participant_ids: IntArray, blocks: list[Any]) -> IntArray:
    """Those of ``participant_ids`` held by ``blocks`` (rows of ``_KEY``)."""
    if not blocks:
        return participant_ids[:0]
    stored = np.concatenate([block_ids(*b[:4]) for b in blocks])
    return participant_ids[np.isin(participant_ids, stored)]


# --------------------------------------------------------------------------- writes


def insert_reports(
    session: Session,
    study_id: str,
    index: int,
    received_at: datetime,
    participant_ids: IntArray,
    payloads: FloatArray,
    epsilons: FloatArray,
    digests: Sequence[str] | None,
) -> BoolArray:
    """Store the reports of these participants in round ``index`` (payload rows, an (n, width)
    matrix, width 0 for a central-trust study's; the ε each charged; the receipt digest of each
    central-trust report, None for a local-trust study's, see ``existing_reports``) as blocks,
    except those of participants who have a report stored in the round already: which ones
    were stored now. The caller holds the round's ingestion lock (module docstring)."""
    n = participant_ids.size
    if n == 0:
        return np.zeros(0, dtype=np.bool_)
    fresh = ~np.isin(participant_ids, reported_pids(session, study_id, index, participant_ids))
    keep = np.flatnonzero(fresh)
    if keep.size == 0:
        return fresh
    order = keep[np.argsort(participant_ids[keep], kind="stable")]
    ids = participant_ids[order]
    rows = np.ascontiguousarray(payloads[order], dtype="<f8")
    charges = np.ascontiguousarray(epsilons[order], dtype="<f8")
    tags = None if digests is None else [digests[j] for j in order.tolist()]
    each: dict[str, list[Any]] = {  # the blocks' columns
        name: [] for name in ("low", "high", "size", "ids", "payload", "epsilons", "digests")
    }
    for start, stop in cuts(ids):
        part = ids[start:stop]
        each["low"].append(int(part[0]))
        each["high"].append(int(part[-1]))
        each["size"].append(int(part.size))
        each["ids"].append(pack_ids(part))
        each["payload"].append(rows[start:stop].tobytes())
        each["epsilons"].append(pack_values(charges[start:stop]))
        each["digests"].append(
            b"" if tags is None else b"".join(bytes.fromhex(d) for d in tags[start:stop])
        )
    same = {"study_id": study_id, "round": index, "received_at": received_at}
    columns = Columns(same, dict(each))
    if session.get_bind().dialect.name == "sqlite":
        columns.insert_sqlite(session, REPORT_BLOCKS)
    else:  # a few rows of large values: one multi-row INSERT (SQLAlchemy's insertmanyvalues)
        session.execute(REPORT_BLOCKS.insert(), columns.dicts(REPORT_BLOCKS))
    return fresh


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


def forget_contributions(session: Session, study_id: str) -> int:
    """Delete a study's contributions and blank its reports' digests (a digest would let one
    test a guess of a statistic): only the release and its diagnostics remain. Returns how many
    contributions were deleted (0 for a local-trust study, which has none)."""
    table = CONTRIBUTIONS
    deleted: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        delete(table).where(table.c.study_id == study_id)
    )
    if deleted.rowcount:
        blocks = REPORT_BLOCKS
        session.execute(update(blocks).where(blocks.c.study_id == study_id).values(digests=b""))
    return int(deleted.rowcount)


# --------------------------------------------------------------------------- lookups


def existing_reports(
    session: Session, study_id: str, index: int, kind: str, participant_ids: Sequence[int]
) -> dict[int, tuple[str, datetime]]:
    """Receipt digest and arrival time of the stored reports of these participants in round
    ``index`` (whose payloads are of ``kind``): the stored digest of a central-trust report
    (blank once its study ended), else the SHA-256 of the stored payload (``receipt_digests``;
    local-trust reports store none since they store the payload it comes from)."""
    t = REPORT_BLOCKS
    wanted = sorted_unique(np.asarray(participant_ids, dtype=np.int64))
    out: dict[int, tuple[str, datetime]] = {}
    ranges = id_ranges(wanted)
    for start in range(0, len(ranges), RANGES_PER_READ):
        stmt = select(*_KEY, t.c.payload, t.c.digests, t.c.received_at).where(
            t.c.study_id == study_id,
            t.c.round == index,
            overlapping(REPORT_BLOCKS, ranges[start : start + RANGES_PER_READ]),
        )
        for low, high, size, packed, payload, digests, at in session.execute(stmt).all():
            ids = block_ids(low, high, size, None if packed is None else bytes(packed))
            found = np.flatnonzero(np.isin(ids, wanted)).tolist()
            payload, digests = bytes(payload), bytes(digests)
            width = len(payload) // size
            for j in found:
                if digests:
                    digest = digests[j * DIGEST_BYTES : (j + 1) * DIGEST_BYTES].hex()
                elif width:
                    digest = receipt_digests(kind, [payload[j * width : (j + 1) * width]])[0]
                else:
                    digest = ""  # a central-trust study's, blanked when it ended
                out[int(ids[j])] = (digest, at)
    return out


def reported_pids(
    session: Session, study_id: str, index: int, participant_ids: IntArray
) -> IntArray:
    """Which of these participants have a report stored in round ``index``."""
    return _present(participant_ids, _key_rows_over(session, study_id, index, participant_ids))


def reported_now(db: Database, study_id: str, index: int, participant_ids: IntArray) -> IntArray:
    """``reported_pids`` outside any transaction of the process's (``Database.read``: on SQLite
    a WAL read of the last commit, which waits for no writer), for the task endpoint: what it
    reads may be outdated the moment it is answered anyway (a report sent twice is a
    duplicate)."""
    ranges = id_ranges(participant_ids)
    blocks: list[Any] = []
    head = f"SELECT {_KEY_SQL} FROM {REPORT_BLOCKS.name} WHERE study_id = ? AND round = ? AND "
    for start in range(0, len(ranges), RANGES_PER_READ):
        condition, params = overlapping_sql(ranges[start : start + RANGES_PER_READ])
        blocks += db.read(head + condition, (study_id, index, *params))
    return _present(participant_ids, blocks)


def count_reported(db: Database, study_id: str, index: int, low: int, high: int) -> int:
    """How many reports round ``index`` holds from participants ``low..high`` (outside any
    transaction, as ``reported_now``): blocks within the range count whole, others by id."""
    condition, params = overlapping_sql([(low, high)])
    sql = (
        f"SELECT {_KEY_SQL} FROM {REPORT_BLOCKS.name} WHERE study_id = ? AND round = ? "
        f"AND {condition}"
    )
    total = 0
    for b_low, b_high, size, packed in db.read(sql, (study_id, index, *params)):
        if low <= b_low and b_high <= high:
            total += int(size)
        else:
            ids = block_ids(b_low, b_high, size, packed)
            total += int(np.count_nonzero((ids >= low) & (ids <= high)))
    return total


def rounds_reported(
    db: Database, study_id: str, rounds: Sequence[int], participant_id: int
) -> list[int]:
    """Those of ``rounds`` in which the participant has a report (ascending): the blocks that
    may hold it, in one statement through the driver (the task endpoint's per-request read;
    ``Database.read``)."""
    marks = ",".join("?" * len(rounds))
    condition, params = overlapping_sql([(participant_id, participant_id)])
    sql = (
        f"SELECT round, {_KEY_SQL} FROM {REPORT_BLOCKS.name} WHERE study_id = ? "
        f"AND round IN ({marks}) AND {condition}"
    )
    found: set[int] = set()
    for k, low, high, size, packed in db.read(sql, (study_id, *rounds, *params)):
        if packed is None or participant_id in block_ids(low, high, size, packed):
            found.add(int(k))
    return sorted(found)


def reported_rounds(
    session: Session, study_id: str, participant_ids: Sequence[int]
) -> dict[int, list[int]]:
    """The rounds each of these participants has reported in (ascending), looked up round by
    round (a study has few rounds)."""
    out: dict[int, list[int]] = {int(p): [] for p in participant_ids}
    ids = np.asarray(list(out), dtype=np.int64)
    indices = select(RoundRow.index).where(RoundRow.study_id == study_id).order_by(RoundRow.index)
    for k in session.scalars(indices).all():
        for pid in reported_pids(session, study_id, k, ids).tolist():
            out[pid].append(k)
    return out


def count_reports(session: Session, study_id: str, index: int | None = None) -> int:
    """How many reports the study holds (in round ``index``, if given)."""
    t = REPORT_BLOCKS
    stmt = select(func.coalesce(func.sum(t.c.size), 0)).where(t.c.study_id == study_id)
    if index is not None:
        stmt = stmt.where(t.c.round == index)
    return int(session.execute(stmt).scalar_one())


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


# --------------------------------------------------------------------------- whole rounds


def _block_pages(
    session: Session, study_id: str, index: int, columns: Sequence[Any]
) -> Iterator[list[Any]]:
    """Round ``index``'s blocks (rows of ``low`` and ``columns``) in order of ``low``,
    ``BLOCKS_PER_PAGE`` at a time (keyset pagination along the primary key)."""
    t = REPORT_BLOCKS
    after = -1
    while True:
        stmt = (
            select(t.c.low, *columns)
            .where(t.c.study_id == study_id, t.c.round == index, t.c.low > after)
            .order_by(t.c.low)
            .limit(BLOCKS_PER_PAGE)
        )
        rows = raw_rows(session, stmt)
        if not rows:
            return
        yield rows
        after = int(rows[-1][0])


def _in_pid_order(
    pages: Iterator[list[Any]],
) -> Iterator[tuple[IntArray, FloatArray]]:
    """(ids, payload rows) of blocks read in order of ``low``, as runs in participant order:
    once the blocks up to ``low = L`` are read, every id up to ``L`` is (a block's ids are not
    below its ``low``), so those leave sorted and the rest wait for the next page."""
    held_ids = np.zeros(0, dtype=np.int64)
    held_rows: FloatArray | None = None
    for page in pages:
        ids = [held_ids]
        rows = [] if held_rows is None else [held_rows]
        for low, high, size, packed, payload in page:
            ids.append(block_ids(low, high, size, packed))
            rows.append(np.frombuffer(payload, dtype="<f8").reshape((size, -1)))
        all_ids = np.concatenate(ids)
        all_rows = np.concatenate(rows)
        order = np.argsort(all_ids, kind="stable")
        all_ids, all_rows = all_ids[order], all_rows[order]
        cut = int(np.searchsorted(all_ids, int(page[-1][0]), side="right"))
        if cut:
            yield all_ids[:cut], all_rows[:cut]
        held_ids, held_rows = all_ids[cut:], all_rows[cut:]
    if held_ids.size and held_rows is not None:
        yield held_ids, held_rows


def stream_reports(
    session: Session, study_id: str, index: int, chunk: int
) -> Iterator[tuple[IntArray, FloatArray]]:
    """The round's reports in participant order, ``chunk`` at a time (the last fewer): (ids,
    payload rows as an (n, width) float64 matrix)."""
    columns = (REPORT_BLOCKS.c.high, REPORT_BLOCKS.c.size, REPORT_BLOCKS.c.ids)
    pages = _block_pages(session, study_id, index, (*columns, REPORT_BLOCKS.c.payload))
    ids_parts: list[IntArray] = []
    row_parts: list[FloatArray] = []
    held = 0
    for ids, rows in _in_pid_order(pages):
        ids_parts.append(ids)
        row_parts.append(rows)
        held += ids.size
        if held < chunk:
            continue
        all_ids, all_rows = np.concatenate(ids_parts), np.concatenate(row_parts)
        whole = held - held % chunk
        for start in range(0, whole, chunk):
            yield all_ids[start : start + chunk], all_rows[start : start + chunk].astype(np.float64)
        ids_parts, row_parts, held = [all_ids[whole:]], [all_rows[whole:]], held - whole
    if held:
        yield np.concatenate(ids_parts), np.concatenate(row_parts).astype(np.float64)


def stream_contributions(
    session: Session, study_id: str, index: int, chunk: int
) -> Iterator[tuple[IntArray, list[bytes]]]:
    """A central-trust round's contributions (encrypted payloads, one row each) in participant
    order, ``chunk`` at a time: (ids, payload bytes). Keyset pagination along the primary key."""
    table = CONTRIBUTIONS
    after = -1
    while True:
        stmt = (
            select(table.c.participant_id, table.c.payload)
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
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        yield ids, [bytes(r[1]) for r in rows]
        after = int(ids[-1])


def spent_per_participant(session: Session, study_id: str, n: int, rounds: int) -> FloatArray:
    """ε charged to each participant by its stored reports in rounds 0..rounds-1 (basic
    composition), added round by round, so memory stays one float per participant."""
    t = REPORT_BLOCKS
    spent = np.zeros(n, dtype=np.float64)
    for index in range(rounds):
        pages = _block_pages(session, study_id, index, (t.c.high, t.c.size, t.c.ids, t.c.epsilons))
        for page in pages:
            for low, high, size, packed, charges in page:
                spent[block_ids(low, high, size, packed)] += unpack_values(charges, size)
    return spent


def list_reports(session: Session, study_id: str) -> list[StoredReport]:
    """Every stored report of the study, unpacked, by round and participant (for inspection and
    tests: aggregation reads ``stream_reports``)."""
    t = REPORT_BLOCKS
    stmt = (
        select(t.c.round, *_KEY, t.c.payload, t.c.epsilons, t.c.digests, t.c.received_at)
        .where(t.c.study_id == study_id)
        .order_by(t.c.round, t.c.low)
    )
    out: list[StoredReport] = []
    for k, low, high, size, packed, payload, charges, digests, at in session.execute(stmt):
        ids = block_ids(low, high, size, None if packed is None else bytes(packed))
        payload, digests = bytes(payload), bytes(digests)
        eps = unpack_values(bytes(charges), size)
        width = len(payload) // size
        for j, pid in enumerate(ids.tolist()):
            digest = digests[j * DIGEST_BYTES : (j + 1) * DIGEST_BYTES].hex() if digests else ""
            out.append(
                StoredReport(
                    int(k), pid, payload[j * width : (j + 1) * width], float(eps[j]), digest, at
                )
            )
    out.sort(key=lambda r: (r.round, r.participant_id))
    return out

"""What the stored blocks share (``report_rows``' report blocks, ``participant_rows``' enrollment
blocks): rows that each hold many participants' values as packed arrays, cut where their ids
would span ``SPAN``, and found by ranges of the primary key ``(…, low)``.

A block's ids are ``low..high`` (``size`` of them), packed in ``ids`` as a bitmap of the range or
a list of little-endian int32 (``pack_ids``), or ``ids`` NULL when they are every id of
``low..high``. Float columns are packed little-endian
float64: one value when all the block's are the same, else one each.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from sqlalchemy import ColumnElement, Table, and_, or_

from fedldp.protocol.core.base.records import FloatArray, IntArray

__all__ = [
    "SPAN",
    "block_ids",
    "cuts",
    "id_ranges",
    "overlapping",
    "overlapping_sql",
    "pack_ids",
    "pack_values",
    "sorted_unique",
    "unpack_values",
]

SPAN = 4096
"""A block's ids lie within ``low .. low + SPAN - 1``, so the blocks that may hold an id ``p``
are those with ``p - SPAN < low <= p``: one range of the primary key."""


def block_ids(low: int, high: int, size: int, packed: bytes | None) -> IntArray:
    """A block's participant ids (ascending), from its columns ``low, high, size, ids``."""
    if packed is None:
        return np.arange(low, high + 1, dtype=np.int64)
    if len(packed) == 4 * size:
        return np.frombuffer(packed, dtype="<i4").astype(np.int64)
    bits = np.unpackbits(
        np.frombuffer(packed, dtype=np.uint8), count=high - low + 1, bitorder="little"
    )
    return low + np.flatnonzero(bits).astype(np.int64)


def pack_ids(ids: IntArray) -> bytes | None:
    """The ``ids`` column of a block of these ascending ids: None when they are every id of
    their range; a bitmap of the range (bit ``p - low`` set for each id ``p``) when it is
    shorter than their int32 list (a cohort that takes a fraction of a block of ids: an eighth
    of a byte per id of the range); else the int32 list. The two are told apart by length: the
    list is ``4 * size`` bytes, a bitmap only used when shorter."""
    low, span = int(ids[0]), int(ids[-1]) - int(ids[0]) + 1
    if span == ids.size:
        return None
    if (span + 7) // 8 < 4 * ids.size:
        bits = np.zeros(span, dtype=np.bool_)
        bits[ids - low] = True
        return np.packbits(bits, bitorder="little").tobytes()
    return ids.astype("<i4").tobytes()


def pack_values(values: FloatArray) -> bytes:
    """A block's float column: one value when they are all the same (bit for bit), else each."""
    same = bool((values.view(np.int64) == values.view(np.int64)[0]).all())
    return (values[:1] if same else values).astype("<f8").tobytes()


def unpack_values(packed: bytes, size: int) -> FloatArray:
    """The ``size`` values of a float column (``pack_values``), as a read-only view."""
    values = np.frombuffer(packed, dtype="<f8")
    return np.broadcast_to(values, (size,)) if values.size == 1 else values


def cuts(ids: IntArray) -> Iterator[tuple[int, int]]:
    """Where ascending ``ids`` are cut into blocks: (start, stop) positions, each block's ids
    spanning less than ``SPAN``."""
    i = 0
    while i < ids.size:
        stop = int(np.searchsorted(ids, int(ids[i]) + SPAN, side="left"))
        yield i, stop
        i = stop


def sorted_unique(ids: IntArray) -> IntArray:
    """``np.unique(ids)``, without its sort (or hash table) when the ids are increasing already,
    as a batch's are: 1.5 ms for 10^4 ids against 10 µs for the check."""
    ids = np.asarray(ids, dtype=np.int64)
    if ids.ndim == 1 and bool(np.all(ids[1:] > ids[:-1])):
        return ids
    return np.unique(ids)


def id_ranges(ids: IntArray) -> list[tuple[int, int]]:
    """Ranges ``(a, b)`` covering the ids, a new one where two ids lie ``SPAN`` or more apart
    (so that a range's lookup reads no block far from its ids)."""
    if ids.size == 0:
        return []
    ids = sorted_unique(ids)
    breaks = np.flatnonzero(np.diff(ids) >= SPAN) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [ids.size])) - 1
    return list(zip(ids[starts].tolist(), ids[ends].tolist(), strict=True))


def overlapping(table: Table, ranges: Sequence[tuple[int, int]]) -> ColumnElement[bool]:
    """The blocks of ``table`` that may hold an id of these ranges."""
    c = table.c
    return or_(*(and_(c.low > a - SPAN, c.low <= b, c.high >= a) for a, b in ranges))


def overlapping_sql(ranges: Sequence[tuple[int, int]]) -> tuple[str, tuple[int, ...]]:
    """``overlapping`` as SQL text with ``?`` placeholders (for ``Database.read``)."""
    sql = " OR ".join(["(low > ? AND low <= ? AND high >= ?)"] * len(ranges))
    params = tuple(v for a, b in ranges for v in (a - SPAN, b, a))
    return f"({sql})", params

"""The SQL of enrolled participants (``fedldp.server.store.repository`` has the studies' and
rounds'): each enrollment stored as blocks (``tables.ParticipantBlockRow``, cut as
``fedldp.server.store.blocks`` says), one row per block with the participants' ε's packed and
their metadata as one JSON value (one object for them all, or a list of one each).

A participant id is enrolled at most once: ``add_participants`` reads the blocks that could hold
its ids before it stores any, under the study row's lock the enrolling transaction holds (its
``UPDATE`` of the study's count; on SQLite, the database's write lock)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import Text, func, select, type_coerce
from sqlalchemy.orm import Session

from fedldp.protocol.core.base.records import FloatArray, IntArray
from fedldp.server.store.blocks import (
    block_ids,
    cuts,
    id_ranges,
    overlapping,
    pack_ids,
    pack_values,
    unpack_values,
)
from fedldp.server.store.sql import PARTICIPANT_BLOCKS, Columns, raw_rows

__all__ = [
    "StoredParticipant",
    "add_participants",
    "declared_epsilons",
    "load_participants",
    "max_participant_id",
    "participant",
]

BLOCKS_PER_PAGE = 64
RANGES_PER_READ = 64
_KEY = (
    PARTICIPANT_BLOCKS.c.low,
    PARTICIPANT_BLOCKS.c.high,
    PARTICIPANT_BLOCKS.c.size,
    PARTICIPANT_BLOCKS.c.ids,
)


class StoredParticipant(NamedTuple):
    participant_id: int
    epsilon: float
    metadata: dict[str, Any]
    enrolled_at: datetime


def _taken(session: Session, study_id: str, ids: IntArray) -> bool:
    """Whether any of ``ids`` is enrolled already."""
    t = PARTICIPANT_BLOCKS
    ranges = id_ranges(ids)
    for start in range(0, len(ranges), RANGES_PER_READ):
        stmt = select(*_KEY).where(
            t.c.study_id == study_id, overlapping(t, ranges[start : start + RANGES_PER_READ])
        )
        for row in raw_rows(session, stmt):
            if np.isin(ids, block_ids(*row)).any():
                return True
    return False


def _shared(metadata: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The one dict every participant's metadata is, if so: the wire shares a dict between
    participants whose metadata are equal bit for bit (``EnrollBatch.rows``), so a population
    that declares the same metadata for everyone is stored with it once per block."""
    if not metadata:
        return None
    first = metadata[0]
    runs = itertools.groupby(metadata, key=id)  # runs of one object, found in C
    next(runs)
    return first if next(runs, None) is None else None


def add_participants(
    session: Session,
    study_id: str,
    enrolled_at: datetime,
    participant_ids: Sequence[int] | IntArray,
    epsilons: Sequence[float] | FloatArray,
    metadata: Sequence[dict[str, Any]] | dict[str, Any],
) -> bool:
    """Store an enrollment (``metadata``: each participant's, or one for all of them) as blocks,
    unless one of its ids is enrolled already: False then, and nothing is stored. The caller
    holds the study row's lock (module docstring)."""
    ids = np.asarray(participant_ids, dtype=np.int64)
    if ids.size == 0:
        return True
    if _taken(session, study_id, ids):
        return False
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    eps = np.asarray(epsilons, dtype=np.float64)[order]
    each: dict[str, list[Any]] = {n: [] for n in ("low", "high", "size", "ids", "epsilons")}
    each["metadata"] = []
    if not isinstance(metadata, dict):
        one = _shared(metadata)
        metadata = metadata if one is None else one
    shared = isinstance(metadata, dict)
    listed = [] if isinstance(metadata, dict) else [metadata[j] for j in order.tolist()]
    for start, stop in cuts(ids):
        part = ids[start:stop]
        each["low"].append(int(part[0]))
        each["high"].append(int(part[-1]))
        each["size"].append(int(part.size))
        each["ids"].append(pack_ids(part))
        each["epsilons"].append(pack_values(eps[start:stop]))
        each["metadata"].append(metadata if shared else listed[start:stop])
    same = {"study_id": study_id, "enrolled_at": enrolled_at}
    columns = Columns(same, dict(each))
    if session.get_bind().dialect.name == "sqlite":
        columns.insert_sqlite(session, PARTICIPANT_BLOCKS)
    else:
        session.execute(PARTICIPANT_BLOCKS.insert(), columns.dicts(PARTICIPANT_BLOCKS))
    return True


def participant(session: Session, study_id: str, participant_id: int) -> StoredParticipant | None:
    """One enrolled participant, or None."""
    t = PARTICIPANT_BLOCKS
    pid = np.array([participant_id], dtype=np.int64)
    stmt = select(*_KEY, t.c.epsilons, t.c.metadata, t.c.enrolled_at).where(
        t.c.study_id == study_id, overlapping(t, id_ranges(pid))
    )
    for low, high, size, packed, eps, meta, at in session.execute(stmt).all():
        ids = block_ids(low, high, size, None if packed is None else bytes(packed))
        found = np.flatnonzero(ids == participant_id)
        if found.size:
            j = int(found[0])
            own = meta if isinstance(meta, dict) else meta[j]
            return StoredParticipant(
                participant_id, float(unpack_values(bytes(eps), size)[j]), own, at
            )
    return None


def max_participant_id(session: Session, study_id: str) -> int | None:
    t = PARTICIPANT_BLOCKS
    value = session.execute(
        select(func.max(t.c.high)).where(t.c.study_id == study_id)
    ).scalar_one_or_none()
    return None if value is None else int(value)


def _pages(session: Session, study_id: str, columns: Sequence[Any]) -> Iterator[list[Any]]:
    """The study's blocks (rows of ``low, high, size, ids`` and ``columns``) in order of
    ``low``, ``BLOCKS_PER_PAGE`` at a time."""
    t = PARTICIPANT_BLOCKS
    after = -1
    while True:
        stmt = (
            select(*_KEY, *columns)
            .where(t.c.study_id == study_id, t.c.low > after)
            .order_by(t.c.low)
            .limit(BLOCKS_PER_PAGE)
        )
        rows = raw_rows(session, stmt)
        if not rows:
            return
        yield rows
        after = int(rows[-1][0])


def _in_id_order(ids: list[IntArray]) -> tuple[IntArray, IntArray | None]:
    """All ids, and the order that sorts them (None: they are sorted already)."""
    every = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    if every.size < 2 or bool((np.diff(every) > 0).all()):
        return every, None
    return every, np.argsort(every, kind="stable")


def declared_epsilons(session: Session, study_id: str) -> FloatArray:
    """Every participant's declared ε, in participant-id order."""
    ids: list[IntArray] = []
    eps: list[FloatArray] = []
    for page in _pages(session, study_id, (PARTICIPANT_BLOCKS.c.epsilons,)):
        for low, high, size, packed, charges in page:
            ids.append(block_ids(low, high, size, packed))
            eps.append(unpack_values(charges, size))
    _, order = _in_id_order(ids)
    every = np.concatenate(eps) if eps else np.zeros(0, dtype=np.float64)
    return every if order is None else every[order]


def load_participants(session: Session, study_id: str) -> tuple[FloatArray, list[dict[str, Any]]]:
    """Every participant's declared ε and metadata, in participant-id order.

    Metadata are read as JSON text and parsed once per distinct text (a block's shared object
    serves all its participants, and blocks with the same text share one object): at 10^6
    participants one dict each was the server's peak memory. A driver that decodes JSON itself
    (psycopg) hands back the objects."""
    columns = (PARTICIPANT_BLOCKS.c.epsilons, type_coerce(PARTICIPANT_BLOCKS.c.metadata, Text))
    ids: list[IntArray] = []
    eps: list[FloatArray] = []
    metadata: list[Any] = []
    parsed: dict[str, Any] = {}
    for page in _pages(session, study_id, columns):
        for low, high, size, packed, charges, text in page:
            ids.append(block_ids(low, high, size, packed))
            eps.append(unpack_values(charges, size))
            if isinstance(text, str):
                value = parsed.get(text)
                if value is None:
                    value = parsed[text] = json.loads(text)
            else:
                value = text
            metadata += [value] * size if isinstance(value, dict) else value
    _, order = _in_id_order(ids)
    every = np.concatenate(eps) if eps else np.zeros(0, dtype=np.float64)
    if order is None:
        return np.array(every, dtype=np.float64), metadata
    return every[order], [metadata[j] for j in order.tolist()]

"""Reports this process stored, kept in memory until their study ends, so that closing a round
(aggregation) and finishing a study (the ε ledger) need not read back every report just written:
at 10^5 reports those reads were most of a round's close, a step the swarm waits on.

A record is used only when it is complete: a round's record must hold exactly as many distinct
reports as the round's counter says were stored (by every process); reports stored by other
processes (other workers, replicas), through the single-report endpoint or before this process
started make the close read the database, as do records evicted for memory. Each part is added
after its transaction committed, and holds what was stored: the payload rows (their float64
values are the stored bytes) and the ε each report charged. Central-trust studies keep their
contributions encrypted and are never recorded. Aggregation sees the same chunks either way
(``aggregate_chunk`` reports in participant order, never the whole round copied at once), so
its sums are the same to the last bit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from fedldp.protocol.core.base.records import FloatArray, IntArray

__all__ = ["MAX_BYTES", "ReceivedCache", "in_chunks"]

MAX_BYTES = 64 * 2**20
"""Most bytes of reports the cache holds, over all studies (a study past it is dropped)."""


@dataclass
class _Round:
    ids: list[IntArray] = field(default_factory=list)
    rows: list[FloatArray] = field(default_factory=list)
    charges: list[FloatArray] = field(default_factory=list)
    aggregated: bool = False  # its rows were used and freed


@dataclass
class _Study:
    rounds: dict[int, _Round] = field(default_factory=dict)
    nbytes: int = 0


class ReceivedCache:
    """study id → round → the reports this process stored (see the module docstring)."""

    def __init__(self, max_bytes: int = MAX_BYTES, capacity: int = 8) -> None:
        self.max_bytes = max_bytes
        self.capacity = capacity
        self._studies: OrderedDict[str, _Study | None] = OrderedDict()  # None: given up
        self._bytes = 0
        self._lock = threading.Lock()

    def add(
        self, study_id: str, index: int, ids: IntArray, rows: FloatArray, charges: FloatArray
    ) -> None:
        """Record reports of round ``index`` once their transaction committed."""
        size = ids.nbytes + rows.nbytes + charges.nbytes
        with self._lock:
            if study_id in self._studies and self._studies[study_id] is None:
                return  # incomplete for good: not worth holding more of it
            study = self._studies.setdefault(study_id, _Study())
            self._studies.move_to_end(study_id)
            assert study is not None
            r = study.rounds.setdefault(index, _Round())
            if r.aggregated or self._bytes + size > self.max_bytes:
                self._give_up(study_id)
                return
            r.ids.append(ids)
            r.rows.append(rows)
            r.charges.append(charges)
            study.nbytes += size
            self._bytes += size
            while len(self._studies) > self.capacity:
                oldest = next(iter(self._studies))
                self._drop(oldest)

    def round_reports(
        self, study_id: str, index: int, received: int
    ) -> list[tuple[IntArray, FloatArray]] | None:
        """Round ``index``'s reports as parts (ids, payload rows), each in participant order and
        the parts one after the other, if the record holds exactly its ``received`` reports;
        None otherwise (also for parts that interleave: the database orders those)."""
        with self._lock:
            study = self._studies.get(study_id)
            r = None if study is None else study.rounds.get(index)
            if r is None or r.aggregated:
                return None
            parts = list(zip(r.ids, r.rows, strict=True))
        if sum(ids.size for ids, _ in parts) != received or received == 0:
            return None
        parts.sort(key=lambda part: int(part[0][0]))
        last = -1
        for ids, _ in parts:
            if ids[0] <= last or not bool(np.all(np.diff(ids) > 0)):
                return None
            last = int(ids[-1])
        return parts

    def aggregated(self, study_id: str, index: int) -> None:
        """Round ``index`` is closed: free its payload rows (its ids and charges stay, for the
        ledger)."""
        with self._lock:
            study = self._studies.get(study_id)
            r = None if study is None else study.rounds.get(index)
            if study is None or r is None:
                return
            freed = sum(p.nbytes for p in r.rows)
            r.rows, r.aggregated = [], True
            study.nbytes -= freed
            self._bytes -= freed

    def spent(self, study_id: str, n: int, received: list[int]) -> FloatArray | None:
        """ε charged to each of ``n`` participants by the reports of rounds 0..len(received)-1
        (round k holding ``received[k]``), as ``report_rows.spent_per_participant`` reads it,
        if every round's record is complete; None otherwise."""
        with self._lock:
            study = self._studies.get(study_id)
            if study is None:
                return None
            parts = [
                (list(r.ids), list(r.charges)) if r is not None else None
                for r in (study.rounds.get(k) for k in range(len(received)))
            ]
        spent = np.zeros(n, dtype=np.float64)
        seen = np.zeros(n, dtype=np.bool_)
        for count, part in zip(received, parts, strict=True):
            if count == 0:
                continue
            if part is None or sum(p.size for p in part[0]) != count:
                return None
            ids = np.concatenate(part[0])
            if ids.min() < 0 or ids.max() >= n:
                return None
            seen[:] = False
            seen[ids] = True
            if np.count_nonzero(seen) != count:  # an id twice: not what the database holds
                return None
            spent[ids] += np.concatenate(part[1])
        return spent

    def forget(self, study_id: str) -> None:
        with self._lock:
            self._drop(study_id)

    def _drop(self, study_id: str) -> None:
        study = self._studies.pop(study_id, None)
        if study is not None:
            self._bytes -= study.nbytes

    def _give_up(self, study_id: str) -> None:
        self._drop(study_id)
        self._studies[study_id] = None


def in_chunks(
    parts: list[tuple[IntArray, FloatArray]], size: int
) -> Iterator[tuple[IntArray, FloatArray]]:
    """The parts' (ids, rows) ``size`` at a time, the last chunk shorter (as the database's
    pages of ``size`` reports in participant order), without copying them all at once."""
    ids_due: list[IntArray] = []
    rows_due: list[FloatArray] = []
    due = 0
    for ids, rows in parts:
        start = 0
        while start < ids.size:
            take = min(size - due, ids.size - start)
            ids_due.append(ids[start : start + take])
            rows_due.append(rows[start : start + take])
            due, start = due + take, start + take
            if due == size:
                yield np.concatenate(ids_due), np.concatenate(rows_due)
                ids_due, rows_due, due = [], [], 0
    if due:
        yield np.concatenate(ids_due), np.concatenate(rows_due)

"""Plans of running studies, recomputed from the database and cached per process.

A plan is a pure function of (protocol, parameters, enrolled ε's and metadata, study seed), all of
which are frozen once enrollment closes; so every replica, and a restarted server, derives the
same plan and caching it is safe. The cache holds a bounded number of studies.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray
from sqlalchemy.orm import Session

from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.base.protocol import Params, Protocol
from fedldp.protocol.core.base.records import FloatArray, IntArray, Plan
from fedldp.server.runtime.protocols import check_version
from fedldp.server.store import participant_rows
from fedldp.server.store.tables import StudyRow

__all__ = [
    "EnrolledCache",
    "Membership",
    "MetadataArrays",
    "MetadataRuns",
    "PlanCache",
    "StudyPlan",
    "build_plan",
    "metadata_arrays",
]


@dataclass(frozen=True)
class Membership:
    """Where participants sit in one round's cohort."""

    member: NDArray[np.bool_]  # in the cohort?
    position: IntArray  # index into the cohort (valid where member)


@dataclass(frozen=True)
class StudyPlan:
    protocol: Protocol[Any]
    params: Params
    plan: Plan
    declared: FloatArray  # each participant's declared ε

    def membership(self, index: int, participant_ids: IntArray) -> Membership:
        cohort = self.plan.rounds[index].cohort
        pos = np.searchsorted(cohort, participant_ids)
        clipped = np.minimum(pos, max(cohort.size - 1, 0))
        member = (
            (pos < cohort.size) & (cohort[clipped] == participant_ids)
            if cohort.size
            else (np.zeros(participant_ids.shape, dtype=np.bool_))
        )
        return Membership(np.asarray(member, dtype=np.bool_), clipped.astype(np.int64))

    def charged_before(self, index: int, participant_ids: IntArray) -> FloatArray:
        """The ε the plan charges each of ``participant_ids`` in the rounds before ``index``
        (summed round after round, from 0). Worked out for the ids asked about: one array of
        every participant's per round was 80 MB each at 10^7 participants (issue 27 item 4)."""
        total = np.zeros(participant_ids.shape, dtype=np.float64)
        for j in range(index):
            inside = self.membership(j, participant_ids)
            where = inside.member
            total[where] += self.plan.rounds[j].epsilon[inside.position[where]]
        return total


def metadata_arrays(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, NDArray[Any]]:
    """Public per-participant metadata as arrays (a key missing for anyone is dropped), each
    built when a protocol first reads it (``MetadataArrays``)."""
    if not rows:
        return {}
    # participants often share one object (a block's, an enrollment batch's): runs of one
    # object, found in C, each repeated, with no list of every participant's value (80 MB at
    # 10^7 participants); the values of distinct objects give the arrays' dtype, as all would
    return MetadataArrays(rows.runs if isinstance(rows, MetadataRuns) else runs_of(rows))


class MetadataArrays(Mapping[str, NDArray[Any]]):
    """Participants' metadata, one array per key (a participant's value at its slot), from
    runs of one object. The distinct objects' values are put in arrays at once (a key whose
    values do not make one, e.g. vectors of different lengths, raises ValueError here, as the
    arrays of everyone's did); each key's array of every participant only when a protocol
    reads it, then kept: a protocol that reads no metadata (``user-mean``) never builds one
    (80 MB a key at 10^7 participants, issue 27 item 4)."""

    def __init__(self, runs: Sequence[tuple[Mapping[str, Any], int]]) -> None:
        keys = set(runs[0][0]) if runs else set()
        for row, _ in runs:
            keys &= row.keys()
        self._counts = np.array([count for _, count in runs], dtype=np.int64)
        self._values = {k: np.asarray([row[k] for row, _ in runs]) for k in sorted(keys)}
        self._arrays: dict[str, NDArray[Any]] = {}

    def __getitem__(self, key: str) -> NDArray[Any]:
        array = self._arrays.get(key)
        if array is None:
            array = np.repeat(self._values[key], self._counts, axis=0)  # KeyError: not a key
            self._arrays[key] = array
        return array

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def runs_of(rows: Iterable[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], int]]:
    """``rows`` as runs of one object: (the object, how many times it comes)."""
    return [_run(run) for _, run in itertools.groupby(rows, key=id)]


class MetadataRuns(Sequence[Mapping[str, Any]]):
    """Participants' metadata in id order, held as runs of one object (a sequence of the
    objects, each as many times as its run): a list of one reference per participant is 80 MB
    at 10^7 participants, where an enrollment batch's participants share one object."""

    def __init__(self, runs: Iterable[tuple[Mapping[str, Any], int]]) -> None:
        self.runs = [(row, count) for row, count in runs if count > 0]
        self._ends = np.cumsum([count for _, count in self.runs], dtype=np.int64)

    def __len__(self) -> int:
        return int(self._ends[-1]) if self._ends.size else 0

    @overload
    def __getitem__(self, index: int) -> Mapping[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[Mapping[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> Mapping[str, Any] | list[Mapping[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("participant index out of range")
        return self.runs[int(np.searchsorted(self._ends, i, side="right"))][0]

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        for row, count in self.runs:
            yield from itertools.repeat(row, count)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]


def _run(run: Iterator[Mapping[str, Any]]) -> tuple[Mapping[str, Any], int]:
    """A run's object and its length (counted in C)."""
    first = next(run)
    counter = itertools.count(1)
    collections.deque(zip(run, counter, strict=False), maxlen=0)  # counter: endless
    return first, next(counter)


def build_plan(
    study: StudyRow, epsilon: FloatArray, metadata: Sequence[Mapping[str, Any]]
) -> StudyPlan:
    """The study's plan; ValueError (with the protocol's reason) if it is infeasible,
    ProtocolVersionMismatch if the study was created with other code of its protocol than the
    one installed here (every use of a running study's protocol goes through its plan)."""
    protocol = get_protocol(study.protocol)
    check_version(study)
    params = protocol.parse_params(study.params)
    # a central-trust protocol's only randomness is the server's noise: its secret seed
    seed = study.noise_seed if study.noise_seed is not None else study.seed
    plan = protocol.plan(params, epsilon, metadata_arrays(metadata), seed)
    return StudyPlan(protocol, params, _compact_rounds(plan), _compact(epsilon))


def _compact(values: FloatArray) -> FloatArray:
    """``values``, as a read-only view of one of them when they are all equal (everyone
    declared the same ε: 80 MB at 10^7 participants, held as long as the plan)."""
    if values.size and bool(np.all(values == values[0])):
        return np.broadcast_to(values[0], values.shape)  # the value, of the array's dtype
    return values


def _compact_rounds(plan: Plan) -> Plan:
    """``plan`` with the ε's of each round that charges all its members the same held as one
    value (``_compact``): at equal ε's user-mean's two rounds held 80 MB at 10^7 participants
    for as long as the study ran. The same values: every use indexes or reduces them (a
    reduction of the view sums as the array's does), none writes (the view is read-only)."""
    rounds = []
    for rp in plan.rounds:
        epsilon = _compact(rp.epsilon) if rp.epsilon.ndim == 1 else rp.epsilon
        rounds.append(rp if epsilon is rp.epsilon else dataclasses.replace(rp, epsilon=epsilon))
    return dataclasses.replace(plan, rounds=tuple(rounds))


class PlanCache:
    """study id → StudyPlan, least recently used first out."""

    def __init__(self, capacity: int = 16) -> None:
        self.capacity = capacity
        self._plans: OrderedDict[str, StudyPlan] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, study_id: str, plan: StudyPlan) -> None:
        with self._lock:
            self._plans[study_id] = plan
            self._plans.move_to_end(study_id)
            while len(self._plans) > self.capacity:
                self._plans.popitem(last=False)

    def get(self, session: Session, study: StudyRow) -> StudyPlan:
        """The plan of a started study (computed from its rows on a miss)."""
        with self._lock:
            cached = self._plans.get(study.id)
            if cached is not None:
                self._plans.move_to_end(study.id)
                return cached
        epsilon, metadata = participant_rows.load_participants(session, study.id)
        plan = build_plan(study, epsilon, metadata)
        self.put(study.id, plan)
        return plan


@dataclass(frozen=True)
class Enrolled:
    """Participants of one committed enrollment: ids, declared ε's and metadata, as stored."""

    ids: IntArray
    epsilon: FloatArray
    metadata: Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class _Kept:
    """An ``Enrolled`` as the cache keeps it: consecutive ids as their range (first, size),
    others as their array; the metadata as runs of one object."""

    first: int
    size: int
    ids: IntArray | None  # None: first..first+size-1
    epsilon: FloatArray
    metadata: list[tuple[Mapping[str, Any], int]]

    @classmethod
    def of(cls, enrolled: Enrolled) -> _Kept:
        ids = np.asarray(enrolled.ids, dtype=np.int64)
        consecutive = ids.size > 0 and bool(np.all(np.diff(ids) == 1))
        return cls(
            int(ids[0]) if ids.size else -1,
            int(ids.size),
            None if consecutive else ids,
            enrolled.epsilon,
            # runs given as runs (an enrollment with no metadata: one), else found in the rows
            list(enrolled.metadata.runs)
            if isinstance(enrolled.metadata, MetadataRuns)
            else runs_of(enrolled.metadata),
        )

    def id_array(self) -> IntArray:
        if self.ids is not None:
            return self.ids
        return np.arange(self.first, self.first + self.size, dtype=np.int64)


class EnrolledCache:
    """study id → the participants this process enrolled into it (``Enrolled``, after each
    commit), kept until the study starts, so that a start needs not read back what was just
    written (at 10^5 participants that read was most of a start's time). Only a complete record
    is used: exactly the study's ids 0..n-1, every one of them enrolled here (participants that
    other processes enrolled make the start read the database, as do studies evicted from the
    cache or enrolled before this process started). Bounded to ``capacity`` studies."""

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._studies: OrderedDict[str, list[_Kept]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, study_id: str, enrolled: Enrolled) -> None:
        kept = _Kept.of(enrolled)
        with self._lock:
            self._studies.setdefault(study_id, []).append(kept)
            self._studies.move_to_end(study_id)
            while len(self._studies) > self.capacity:
                self._studies.popitem(last=False)

    def take(
        self, study_id: str, n: int, also: Enrolled | None = None
    ) -> tuple[FloatArray, Sequence[Mapping[str, Any]]] | None:
        """Every participant's ε and metadata in id order, as ``participant_rows.load_participants``
        reads them, if the record (with ``also``: the caller's enrollment, not yet committed)
        holds exactly ids 0..n-1; None otherwise. The record is dropped either way."""
        with self._lock:
            parts = self._studies.pop(study_id, [])
        if also is not None:
            parts = [*parts, _Kept.of(also)]
        if sum(p.size for p in parts) != n or n == 0:
            return None
        # parts of consecutive ids (a swarm's batches are) that tile 0..n-1: joined in order of
        # their first id, with no array of all ids nor its sorting order (at 10^7 participants
        # those, and the copies they index, were 400 MB of a start's peak)
        parts.sort(key=lambda p: p.first)
        if all(p.ids is None for p in parts):
            at = 0
            for p in parts:
                if p.first != at:
                    return None
                at += p.size
            epsilon = np.concatenate([p.epsilon for p in parts])
            return epsilon, MetadataRuns(run for p in parts for run in p.metadata)
        ids = np.concatenate([p.id_array() for p in parts])
        order = np.argsort(ids, kind="stable")
        if not np.array_equal(ids[order], np.arange(n)):
            return None
        epsilon = np.concatenate([p.epsilon for p in parts])[order]
        metadata = [row for p in parts for row, count in p.metadata for _ in range(count)]
        if not np.array_equal(order, np.arange(n)):
            metadata = [metadata[i] for i in order.tolist()]
        return epsilon, metadata

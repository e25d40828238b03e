"""Plans of running studies, recomputed from the database and cached per process.

A plan is a pure function of (protocol, parameters, enrolled ε's and metadata, study seed), all of
which are frozen once enrollment closes; so every replica, and a restarted server, derives the
same plan and caching it is safe. The cache holds a bounded number of studies.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

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
    charged_before: tuple[FloatArray, ...]  # ε charged by the plan in rounds < k, per participant

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


def metadata_arrays(rows: Sequence[Mapping[str, Any]]) -> dict[str, NDArray[Any]]:
    """Public per-participant metadata as arrays (a key missing for anyone is dropped)."""
    if not rows:
        return {}
    keys = set(rows[0])
    # participants often share one object; map and zip loop in C (10^6 participants)
    for distinct in dict(zip(map(id, rows), rows, strict=True)).values():
        keys &= distinct.keys()
    return {k: np.asarray(list(map(itemgetter(k), rows))) for k in sorted(keys)}


def build_plan(study: StudyRow, epsilon: FloatArray, metadata: list[dict[str, Any]]) -> StudyPlan:
    """The study's plan; ValueError (with the protocol's reason) if it is infeasible,
    ProtocolVersionMismatch if the study was created with other code of its protocol than the
    one installed here (every use of a running study's protocol goes through its plan)."""
    protocol = get_protocol(study.protocol)
    check_version(study)
    params = protocol.parse_params(study.params)
    # a central-trust protocol's only randomness is the server's noise: its secret seed
    seed = study.noise_seed if study.noise_seed is not None else study.seed
    plan = protocol.plan(params, epsilon, metadata_arrays(metadata), seed)
    before: list[FloatArray] = []
    total = np.zeros(epsilon.size, dtype=np.float64)
    for rp in plan.rounds:
        before.append(total.copy())
        np.add.at(total, rp.cohort, rp.epsilon)
    return StudyPlan(protocol, params, plan, epsilon, tuple(before))


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
    metadata: list[dict[str, Any]]


class EnrolledCache:
    """study id → the participants this process enrolled into it (``Enrolled``, after each
    commit), kept until the study starts, so that a start needs not read back what was just
    written (at 10^5 participants that read was most of a start's time). Only a complete record
    is used: exactly the study's ids 0..n-1, every one of them enrolled here (participants that
    other processes enrolled make the start read the database, as do studies evicted from the
    cache or enrolled before this process started). Bounded to ``capacity`` studies."""

    def __init__(self, capacity: int = 8) -> None:
        self.capacity = capacity
        self._studies: OrderedDict[str, list[Enrolled]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, study_id: str, enrolled: Enrolled) -> None:
        with self._lock:
            self._studies.setdefault(study_id, []).append(enrolled)
            self._studies.move_to_end(study_id)
            while len(self._studies) > self.capacity:
                self._studies.popitem(last=False)

    def take(
        self, study_id: str, n: int, also: Enrolled | None = None
    ) -> tuple[FloatArray, list[dict[str, Any]]] | None:
        """Every participant's ε and metadata in id order, as ``participant_rows.load_participants``
        reads them, if the record (with ``also``: the caller's enrollment, not yet committed)
        holds exactly ids 0..n-1; None otherwise. The record is dropped either way."""
        with self._lock:
            parts = self._studies.pop(study_id, [])
        if also is not None:
            parts = [*parts, also]
        if sum(p.ids.size for p in parts) != n or n == 0:
            return None
        ids = np.concatenate([p.ids for p in parts])
        order = np.argsort(ids, kind="stable")
        if not np.array_equal(ids[order], np.arange(n)):
            return None
        epsilon = np.concatenate([p.epsilon for p in parts])[order]
        metadata = [m for p in parts for m in p.metadata]
        if not np.array_equal(order, np.arange(n)):
            metadata = [metadata[i] for i in order.tolist()]
        return epsilon, metadata

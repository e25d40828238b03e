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
from fedldp.protocol.core.base import FloatArray, IntArray, Params, Plan, Protocol
from fedldp.server import repository as repo
from fedldp.server.tables import StudyRow

__all__ = ["Membership", "PlanCache", "StudyPlan", "build_plan", "metadata_arrays"]


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
    """The study's plan; ValueError (with the protocol's reason) if it is infeasible."""
    protocol = get_protocol(study.protocol)
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
        epsilon, metadata = repo.load_participants(session, study.id)
        plan = build_plan(study, epsilon, metadata)
        self.put(study.id, plan)
        return plan

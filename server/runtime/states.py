"""What the task endpoints need of a study, read once and shared by the requests that follow.

A participant's task is a function of the study's phase, its current round (status, broadcast,
payload, deadline), the fixed plan and whether the participant has reported: only the last
changes with every report. ``StudyStates`` keeps the rest per study as a frozen ``StudyState``,
read in one transaction, so a task request makes one small query (did this participant report?)
or none at all, instead of loading the study and round rows every time.

Freshness: a snapshot is dropped by every transition this process commits (``Context``'s
transition counter moves) and is otherwise at most ``MAX_AGE_S`` old, which bounds how late a
transition committed by another process (another worker of this server, or a replica) is seen.
A stale snapshot can only lag, never lead: it may tell a participant to wait a fraction of a
second longer, or hand out a report task for a round that has just closed (whose report is then
refused as late, as it would be a moment later anyway). Nothing is decided on a snapshot that
changes the database: reports are checked against the rows themselves, under their locks.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from fedldp.server.errors import UnknownStudy
from fedldp.server.runtime.plans import PlanCache, StudyPlan
from fedldp.server.store import repository as repo
from fedldp.server.store.tables import StudyRow

__all__ = ["MAX_AGE_S", "RoundState", "StudyState", "StudyStates", "read_state"]

MAX_AGE_S = 0.25
"""The oldest a snapshot may be (for transitions made by other processes)."""


@dataclass(frozen=True)
class RoundState:
    index: int
    name: str
    status: str
    broadcast: dict[str, Any]  # what the participants are sent (``Protocol.client_broadcast``)
    payload_kind: str
    payload_shape: tuple[int, ...]
    deadline: datetime | None


@dataclass(frozen=True)
class StudyState:
    id: str
    secret: str
    phase: str
    n_participants: int
    round: RoundState | None  # the current round, while the study runs
    plan: StudyPlan | None  # the fixed plan, while the study runs
    rounds: int  # how many rounds it has (0 before it starts)


def read_state(session: Session, plans: PlanCache, study: StudyRow) -> StudyState:
    """The snapshot of ``study`` (a row read in ``session``)."""
    k = study.current_round
    splan = plans.get(session, study) if study.phase == "running" and k is not None else None
    current = None
    if splan is not None and k is not None:
        r = repo.get_round(session, study.id, k)
        assert r is not None  # rounds are created with the plan
        current = RoundState(
            index=k,
            name=r.name,
            status=r.status,
            broadcast=splan.protocol.client_broadcast(r.broadcast or {}),
            payload_kind=r.payload_kind,
            payload_shape=tuple(int(s) for s in r.payload_shape),
            deadline=r.deadline,
        )
    rounds = (
        len(splan.plan.rounds) if splan is not None else len(repo.list_rounds(session, study.id))
    )
    return StudyState(
        study.id, study.secret, study.phase, study.n_participants, current, splan, rounds
    )


class StudyStates:
    """study id → (its snapshot, when it was read, the transition count it was read under)."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._states: dict[str, tuple[StudyState, float, int]] = {}
        self._lock = threading.Lock()

    def cached(self, study_id: str, transitions: int) -> StudyState | None:
        """The snapshot of ``study_id`` if it is fresh (None: read it again)."""
        found = self._states.get(study_id)
        if found is None:
            return None
        state, at, seen = found
        if seen != transitions or time.monotonic() - at > MAX_AGE_S:
            return None
        return state

    def read(
        self, session: Session, plans: PlanCache, study_id: str, transitions: int
    ) -> StudyState:
        """Read the snapshot in ``session`` and keep it; UnknownStudy if there is no such study.
        ``transitions`` is the counter as it stood before the read (a transition committed
        meanwhile makes the snapshot stale at once)."""
        study = repo.get_study(session, study_id)
        if study is None:
            raise UnknownStudy(f"no study {study_id!r}")
        state = read_state(session, plans, study)
        with self._lock:
            if len(self._states) >= self.capacity and study_id not in self._states:
                self._states.pop(next(iter(self._states)))  # the oldest entry
            self._states[study_id] = (state, time.monotonic(), transitions)
        return state

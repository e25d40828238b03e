"""Database rows → wire models (the only place the two meet)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import (
    EPSILON_MAX,
    EPSILON_MIN,
    EpsilonSummary,
    ErrorBarView,
    ResultView,
    RoundProgress,
    RoundView,
    StudyView,
)
from fedldp.server.store.tables import RoundRow, StudyRow

__all__ = ["result_view", "round_view", "study_view"]


def _seconds_left(deadline: datetime | None, now: datetime) -> float | None:
    return None if deadline is None else max(0.0, (deadline - now).total_seconds())


def study_view(study: StudyRow, rounds: list[RoundRow], now: datetime) -> StudyView:
    progress = [
        RoundProgress(
            index=r.index,
            name=r.name,
            status=r.status,
            expected=r.expected,
            received=r.received,
            refused=r.refused,
            late=r.late,
            deadline=r.deadline,
            seconds_left=_seconds_left(r.deadline, now) if r.status == "open" else None,
        )
        for r in rounds
    ]
    return StudyView(
        id=study.id,
        name=study.name,
        protocol=study.protocol,
        trust=get_protocol(study.protocol).trust,
        params=study.params,
        seed=study.seed,
        phase=study.phase,
        created_at=study.created_at,
        n_participants=study.n_participants,
        enrollment_target=study.enrollment_target,
        enrollment_deadline=study.enrollment_deadline,
        round_deadline_s=study.round_deadline_s,
        quorum=study.quorum,
        current_round=study.current_round,
        rounds=progress,
        failure_reason=study.failure_reason,
        warnings=[str(w) for w in study.warnings],
        epsilon_min=EPSILON_MIN if study.epsilon_min is None else study.epsilon_min,
        epsilon_max=EPSILON_MAX if study.epsilon_max is None else study.epsilon_max,
        population_digest=study.population_digest,
        enrollment="leased" if study.enrollment == "leased" else "open",
        protocol_origin=study.protocol_origin,
        protocol_version=study.protocol_version,
    )


def round_view(r: RoundRow) -> RoundView:
    return RoundView(
        index=r.index,
        name=r.name,
        status=r.status,
        expected=r.expected,
        received=r.received,
        refused=r.refused,
        late=r.late,
        opened_at=r.opened_at,
        closed_at=r.closed_at,
        broadcast=r.broadcast,
        output=r.output,
    )


_NO_SPEND: dict[str, Any] = {
    "participants": 0,
    "charged": 0,
    "max": 0.0,
    "median": 0.0,
    "mean": 0.0,
}


def result_view(study: StudyRow) -> ResultView:
    """The result of a finished study, or the failure of a failed or cancelled one."""
    result: dict[str, Any] = study.result or {}
    bar = result.get("error_bar")
    return ResultView(
        study_id=study.id,
        protocol=study.protocol,
        trust=get_protocol(study.protocol).trust,
        phase=study.phase,
        estimate=result.get("estimate"),
        error_bar=None if bar is None else ErrorBarView(**bar),
        diagnostics=result.get("diagnostics", {}),
        epsilon_spent=EpsilonSummary(**result.get("epsilon_spent", _NO_SPEND)),
        warnings=list(
            dict.fromkeys(str(w) for w in (*study.warnings, *result.get("warnings", [])))
        ),
        failure_reason=study.failure_reason,
    )

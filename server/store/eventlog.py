"""The event log of each study (docs/architecture.md, "Events, behaviour, experiments"): the
repository of the ``events`` table.

Every state change writes its event in its own transaction: a study created (``phase
enrolling``), started, failed, cancelled or finished (``phase``), a round opened or closed
(``round_opened``, ``round_closed`` with the public output), the result stored (``result``). An
event therefore exists iff its change committed, on every replica.

Numbering: a study's events are 1, 2, 3, … The next number comes from ``studies.last_event``,
incremented by a conditional update, which holds the study row's lock until the transaction
ends; two transactions that both write an event of one study thus commit in the order of their
numbers. A reader that has seen event ``n`` can never later find a committed event ``< n`` it
missed, so resuming after ``n`` (SSE ``Last-Event-ID``) loses and repeats nothing. (A global
sequence would not do on PostgreSQL: its numbers are drawn at insert time, not commit time.)

Report counts are not events (one per report would put a write on the reports' hot path): the
stream reads the open round's ``received`` counter instead, as a ``progress`` snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from fedldp.protocol.core.wire import (
    ENDED_PHASES,
    EVENT_ADAPTER,
    EventBase,
    PhaseEvent,
    ProgressEvent,
    ResultEvent,
    RoundClosedEvent,
    RoundOpenedEvent,
    StudyEvent,
)
from fedldp.server.store.tables import EventRow, RoundRow, StudyRow, utcnow

__all__ = [
    "Snapshot",
    "phase_changed",
    "read",
    "record",
    "result_ready",
    "round_closed",
    "round_opened",
]

_ENVELOPE = {"id", "study_id", "at", "kind"}


def record(session: Session, event: EventBase) -> int:
    """Store ``event`` (its ``id`` is ignored) as the study's next one: its number."""
    seq: int = session.execute(
        update(StudyRow)
        .where(StudyRow.id == event.study_id)
        .values(last_event=StudyRow.last_event + 1)
        .returning(StudyRow.last_event)
    ).scalar_one()
    kind: str = getattr(event, "kind")  # noqa: B009 (every concrete event has one)
    session.add(
        EventRow(
            study_id=event.study_id,
            seq=seq,
            kind=kind,
            at=event.at,
            data=event.model_dump(mode="json", exclude=_ENVELOPE),
        )
    )
    return seq


def phase_changed(
    session: Session,
    study_id: str,
    phase: str,
    reason: str | None = None,
    at: datetime | None = None,
) -> int:
    """The study entered ``phase``, at ``at`` (default now): a transition that also opens a
    round passes the round's time, so that the events' times follow their numbers."""
    return record(
        session,
        PhaseEvent.model_validate(
            {"study_id": study_id, "at": at or utcnow(), "phase": phase, "reason": reason}
        ),
    )


def round_opened(
    session: Session,
    study_id: str,
    r: RoundRow,
    opened_at: datetime,
    deadline: datetime,
    broadcast: dict[str, Any],
) -> int:
    """Round ``r`` opened (``r`` as read before: its new columns are passed)."""
    return record(
        session,
        RoundOpenedEvent(
            study_id=study_id,
            at=opened_at,
            index=r.index,
            name=r.name,
            expected=r.expected,
            deadline=deadline,
            broadcast=broadcast,
        ),
    )


def round_closed(
    session: Session, study_id: str, r: RoundRow, closed_at: datetime, output: dict[str, Any] | None
) -> int:
    """Round ``r`` closed with ``output`` (None: it missed its quorum or failed to aggregate)."""
    return record(
        session,
        RoundClosedEvent(
            study_id=study_id,
            at=closed_at,
            index=r.index,
            name=r.name,
            expected=r.expected,
            received=r.received,
            output=output,
        ),
    )


def result_ready(session: Session, study_id: str, stored: dict[str, Any]) -> int:
    return record(
        session,
        ResultEvent.model_validate(
            {
                "study_id": study_id,
                "at": utcnow(),
                "estimate": stored["estimate"],
                "error_bar": stored["error_bar"],
                "epsilon_spent": stored["epsilon_spent"],
            }
        ),
    )


@dataclass(frozen=True)
class Snapshot:
    """What one poll of a study's stream reads in one transaction."""

    events: list[StudyEvent]
    progress: ProgressEvent
    ended: bool
    """The study has ended and ``events`` reaches its last event: the stream is complete."""


def read(session: Session, study_id: str, after: int, limit: int) -> Snapshot | None:
    """The study's events numbered above ``after`` (at most ``limit``) and its counters now;
    None if there is no such study."""
    study = session.get(StudyRow, study_id)
    if study is None:
        return None
    rows = session.scalars(
        select(EventRow)
        .where(EventRow.study_id == study_id, EventRow.seq > after)
        .order_by(EventRow.seq)
        .limit(limit)
    ).all()
    events = [
        EVENT_ADAPTER.validate_python(
            {**row.data, "id": row.seq, "study_id": study_id, "at": row.at, "kind": row.kind}
        )
        for row in rows
    ]
    current = (
        None
        if study.current_round is None
        else session.get(RoundRow, (study_id, study.current_round))
    )
    progress = ProgressEvent.model_validate(
        {
            "study_id": study_id,
            "at": utcnow(),
            "phase": study.phase,
            "n_participants": study.n_participants,
            "round": None if current is None else current.index,
            "received": 0 if current is None else current.received,
            "expected": 0 if current is None else current.expected,
            "deadline": None if current is None else current.deadline,
        }
    )
    last = rows[-1].seq if rows else after
    return Snapshot(events, progress, study.phase in ENDED_PHASES and last >= study.last_event)

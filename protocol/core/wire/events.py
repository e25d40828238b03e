"""Study events (docs/architecture.md, "Events, behaviour, experiments"): what ``GET
/v1/studies/{id}/events`` streams as Server-Sent Events, one model per ``kind`` (a discriminated
union, STYLE rule 3).

Every event but ``progress`` is stored with the study, numbered 1, 2, 3, … per study (``id``, the
SSE ``id:`` field, which a client resumes from with ``Last-Event-ID``). ``progress`` is a snapshot
of the counters (enrolled participants, the open round's received reports) that the server derives
from the database while streaming, at most a few per second; it has no ``id`` and is never
replayed: a resumed stream starts with the current snapshot instead.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from fedldp.protocol.core.wire.common import Model, NonNegInt
from fedldp.protocol.core.wire.studies import EpsilonSummary, ErrorBarView, StudyPhase

__all__ = [
    "ENDED_PHASES",
    "EVENT_ADAPTER",
    "EventBase",
    "PhaseEvent",
    "ProgressEvent",
    "ResultEvent",
    "RoundClosedEvent",
    "RoundOpenedEvent",
    "StudyEvent",
]

ENDED_PHASES: tuple[StudyPhase, ...] = ("finished", "failed", "cancelled")
"""Phases a study never leaves: its event stream ends after the event that entered one."""


class EventBase(Model):
    id: NonNegInt | None = Field(
        None, description="the event's number in its study (1, 2, …); None for progress"
    )
    study_id: str
    at: datetime


class PhaseEvent(EventBase):
    """The study entered ``phase`` (created: ``enrolling``); ``reason`` when it failed or was
    cancelled, or, with ``enrolling`` again, when an automatic start (its enrollment deadline
    or target) was refused and it stays enrolling."""

    kind: Literal["phase"] = "phase"
    phase: StudyPhase
    reason: str | None = None


class RoundOpenedEvent(EventBase):
    """A round opened with its public broadcast."""

    kind: Literal["round_opened"] = "round_opened"
    index: NonNegInt
    name: str
    expected: NonNegInt
    deadline: datetime | None
    broadcast: dict[str, Any]


class RoundClosedEvent(EventBase):
    """A round closed: its public output, or None when it missed its quorum."""

    kind: Literal["round_closed"] = "round_closed"
    index: NonNegInt
    name: str
    expected: NonNegInt
    received: NonNegInt
    output: dict[str, Any] | None


class ResultEvent(EventBase):
    """The study's result is ready (``GET …/result`` has it in full)."""

    kind: Literal["result"] = "result"
    estimate: float | list[float] | None
    error_bar: ErrorBarView | None
    epsilon_spent: EpsilonSummary


class ProgressEvent(EventBase):
    """The counters now (not stored, no ``id``): enrolled participants and, while a round is
    open, its received and expected reports and deadline."""

    kind: Literal["progress"] = "progress"
    phase: StudyPhase
    n_participants: NonNegInt
    round: NonNegInt | None
    received: NonNegInt
    expected: NonNegInt
    deadline: datetime | None


StudyEvent = Annotated[
    PhaseEvent | RoundOpenedEvent | RoundClosedEvent | ResultEvent | ProgressEvent,
    Field(discriminator="kind"),
]
EVENT_ADAPTER: TypeAdapter[StudyEvent] = TypeAdapter(StudyEvent)

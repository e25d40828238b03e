"""Typed SQLAlchemy tables (docs/architecture.md, convention 6). ORM rows never go on the wire (see
fedldp.server.services.views).

A study's plan is not stored: it is a pure function of the protocol, its parameters, the enrolled
ε's and metadata, and the study seed, so any replica (or a restarted server) recomputes the same
plan from these rows. What the rounds produced (broadcasts, outputs, the result) is stored.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "Base",
    "CampaignRow",
    "ContributionRow",
    "DeviceSpendRow",
    "EventRow",
    "LeaseRow",
    "OccurrenceRow",
    "ParticipantBlockRow",
    "ReportBlockRow",
    "RoundRow",
    "StudyRow",
    "utcnow",
]


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite keeps no zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime,
        dict[str, Any]: JSON,
        list[Any]: JSON,
    }


class StudyRow(Base):
    __tablename__ = "studies"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200), unique=True)  # a join key
    protocol: Mapped[str] = mapped_column(String(64))
    params: Mapped[dict[str, Any]]
    seed: Mapped[int] = mapped_column(BigInteger)
    secret: Mapped[str] = mapped_column(String(64))  # HMAC key of the participants' tokens
    # central-trust protocols: the secret seed of the server's noise (never shown)
    noise_seed: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    phase: Mapped[str] = mapped_column(String(16), index=True)
    created_at: Mapped[datetime]
    enrollment_target: Mapped[int | None]
    enrollment_deadline: Mapped[datetime | None]
    round_deadline_s: Mapped[float] = mapped_column(Float)
    quorum: Mapped[float] = mapped_column(Float)
    # the ε range enrollment accepts; None: the global bound (protocol.wire.EPSILON_MIN/MAX)
    epsilon_min: Mapped[float | None] = mapped_column(Float, nullable=True)
    epsilon_max: Mapped[float | None] = mapped_column(Float, nullable=True)
    n_participants: Mapped[int] = mapped_column(Integer, default=0)
    # the next id never handed out: leases and server-numbered enrollments take ids from here
    leased: Mapped[int] = mapped_column(Integer, default=0)
    # what the creator declared of its population: a keyed digest (see StudyCreate)
    population_digest: Mapped[str | None] = mapped_column(String(128), nullable=True)
    # who may enroll: "open" or "leased" (protocol.core.wire.EnrollmentPolicy)
    enrollment: Mapped[str] = mapped_column(String(8), default="open", server_default="open")
    # where the protocol's code came from when the study was created (protocol.catalogue.Origin,
    # within its MAX_PACKAGE and MAX_NAME):
    # "built-in" and fedldp's version, or a plugin's distribution and version; None: made before
    # origins were recorded (not checked)
    protocol_origin: Mapped[str | None] = mapped_column(String(200), nullable=True)
    protocol_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    current_round: Mapped[int | None]
    failure_reason: Mapped[str | None] = mapped_column(Text)
    warnings: Mapped[list[Any]]
    result: Mapped[dict[str, Any] | None]
    # the number of the study's last event (fedldp.server.store.eventlog allocates the next under
    # this row's lock, so a study's events commit in the order of their numbers)
    last_event: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class LeaseRow(Base):
    """A block [start, stop) of participant ids reserved for one caller until ``expires_at``,
    unless all ``stop - start`` of them enroll before (``enrolled`` counts them). ``serial``
    numbers the study's leases (it is in the lease token): an expired block is leased again
    under a new serial, and the old token no longer enrolls it."""

    __tablename__ = "leases"

    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    serial: Mapped[int] = mapped_column(Integer, primary_key=True)
    start: Mapped[int] = mapped_column(Integer)
    stop: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[datetime]
    enrolled: Mapped[int] = mapped_column(Integer, default=0)
    released: Mapped[bool] = mapped_column(default=False)  # expired and leased again


class ParticipantBlockRow(Base):
    """Participants of one enrollment stored together (fedldp.server.store.participant_rows,
    which alone reads and writes them; cut as fedldp.server.store.blocks says): ``size``
    participants ``low..high``, their ``ids`` packed (NULL when every id of ``low..high``), their
    declared ε's packed (``epsilons``: one value when shared, else one each), their metadata as
    one JSON value (an object all of them declared, or a list of each one's), and when they
    enrolled. ``(study, low)`` is a key: an id is enrolled at most once."""

    __tablename__ = "participant_blocks"

    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    low: Mapped[int] = mapped_column(Integer, primary_key=True)
    high: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(Integer)
    ids: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    epsilons: Mapped[bytes] = mapped_column(LargeBinary)
    metadata_: Mapped[Any] = mapped_column("metadata", JSON)
    enrolled_at: Mapped[datetime]


class RoundRow(Base):
    __tablename__ = "rounds"

    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))  # pending, open, closed
    payload_kind: Mapped[str] = mapped_column(String(16))
    payload_shape: Mapped[list[Any]]
    expected: Mapped[int]
    received: Mapped[int] = mapped_column(Integer, default=0)
    # reports refused by the protocol's checks or plausibility bounds, and reports that came
    # after the round had closed (counted until the study ends)
    refused: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    late: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    opened_at: Mapped[datetime | None]
    deadline: Mapped[datetime | None]
    closed_at: Mapped[datetime | None]
    broadcast: Mapped[dict[str, Any] | None]
    output: Mapped[dict[str, Any] | None]


class ContributionRow(Base):
    """A central-trust protocol's contribution (the user-wise statistic's float64 bytes,
    AES-GCM-encrypted under the study's key: fedldp.server.runtime.keys): kept apart from the
    reports, never returned by any endpoint, deleted (and its key destroyed) when the study ends.
    Its report (in a block of ``ReportBlockRow``) holds the receipt (digest, ε charged) and an
    empty payload."""

    __tablename__ = "contributions"

    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    participant_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    payload: Mapped[bytes] = mapped_column(LargeBinary)


class ReportBlockRow(Base):
    """Accepted reports of one round stored together (fedldp.server.store.report_rows, which
    alone reads and writes them): ``size`` reports of participants ``low..high`` (a span below
    ``report_rows.SPAN``), in participant order, each exactly as sent, never raw data.

    * ``ids``: the participant ids as little-endian int32, or NULL when they are every id of
      ``low..high`` (a batch's contiguous block: the usual case);
    * ``payload``: the payload rows, each the float64 bytes sent, one after the other (empty for
      a central-trust study, whose payloads are contributions);
    * ``epsilons``: the ε each report charged, float64: one value shared by all, or one each;
    * ``digests``: a central-trust report's receipt digest (an HMAC under the study's key, blanked
      when the study ends), 16 bytes each; empty for a local-trust study, whose digests are their
      payloads' SHA-256, worked out when read (``report_rows.existing_reports``);
    * ``received_at``: when the block was stored (the receipt's time of each of its reports);
      a block converted from single report rows holds reports of one arrival time.

    A participant's report is in at most one block of a round: ``report_rows.insert_reports``
    reads the blocks that could hold the ids before it stores any (under the database's write
    lock on SQLite, the round row's lock on PostgreSQL), so ``(study, round, low)`` is a key."""

    __tablename__ = "report_blocks"

    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    low: Mapped[int] = mapped_column(Integer, primary_key=True)
    high: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(Integer)
    ids: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    epsilons: Mapped[bytes] = mapped_column(LargeBinary)
    digests: Mapped[bytes] = mapped_column(LargeBinary)
    received_at: Mapped[datetime]


class EventRow(Base):
    """One stored study event (fedldp.protocol.core.wire.events): its number in the study
    (``seq``, 1, 2, …), its kind, when, and the rest of the wire model as JSON. Written in the
    transaction of the state change it reports, so it exists iff that change committed."""

    __tablename__ = "events"

    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    at: Mapped[datetime]
    data: Mapped[dict[str, Any]]


class CampaignRow(Base):
    """A study template repeated on a schedule (protocol.core.wire.CampaignCreate). ``clock`` is
    the simulated day of the last occurrence opened (None before the first): the driver advances
    it by opening the next occurrence, so a restarted server goes on from it."""

    __tablename__ = "campaigns"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200), unique=True)
    protocol: Mapped[str] = mapped_column(String(64))
    params: Mapped[dict[str, Any]]
    seed: Mapped[int] = mapped_column(BigInteger)
    every: Mapped[float] = mapped_column(Float)
    times: Mapped[int] = mapped_column(Integer)
    start: Mapped[float] = mapped_column(Float)
    budget_epsilon: Mapped[float | None] = mapped_column(Float, nullable=True)
    budget_period: Mapped[float | None] = mapped_column(Float, nullable=True)
    budget_delta: Mapped[float | None] = mapped_column(Float, nullable=True)
    noise_seed: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # secret
    round_deadline_s: Mapped[float] = mapped_column(Float)
    quorum: Mapped[float] = mapped_column(Float)
    population_digest: Mapped[str | None] = mapped_column(String(128), nullable=True)
    clock: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime]


class OccurrenceRow(Base):
    """Occurrence ``index`` of a campaign: the study it runs as, on simulated day ``day``, and
    the truth of that day's population as the driver declares it (None: not declared)."""

    __tablename__ = "campaign_occurrences"

    campaign_id: Mapped[str] = mapped_column(ForeignKey("campaigns.id"), primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[str] = mapped_column(ForeignKey("studies.id"), unique=True)
    day: Mapped[float] = mapped_column(Float)
    truth: Mapped[Any | None] = mapped_column(JSON, nullable=True)


class DeviceSpendRow(Base):
    """The ε a device of a campaign is charged for one occurrence (the server's ledger keyed by
    device across the campaign's studies)."""

    __tablename__ = "device_spends"

    campaign_id: Mapped[str] = mapped_column(ForeignKey("campaigns.id"), primary_key=True)
    device: Mapped[str] = mapped_column(String(64), primary_key=True)
    occurrence: Mapped[int] = mapped_column(Integer, primary_key=True)
    day: Mapped[float] = mapped_column(Float)
    epsilon: Mapped[float] = mapped_column(Float)

"""The schemas ``create_all`` made before the migrations existed, frozen: a database that has
these tables but no ``alembic_version`` came from an earlier release, and
``fedldp.server.store.schema`` stamps it with the revision whose schema it equals.

Releases before migrations made two schemas: that of ``0001_initial`` (commit c7bf0e6) and, once
studies got their ε range, that of ``0002_study_epsilon_range``. Every later schema comes from a
revision, so this module never changes (a test checks that it equals those two revisions).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)

__all__ = ["LEGACY_INDEXES", "LEGACY_REVISIONS", "legacy_metadata"]

LEGACY_REVISIONS = ("0002_study_epsilon_range", "0001_initial")
"""The revisions a create_all database may equal, newest first."""

LEGACY_INDEXES = frozenset({("reports", "ix_reports_participant")})
"""Indexes the first releases made and later ones no longer declared (create_all never drops
one): harmless, so a database holding them is still adopted."""


def _utc() -> DateTime:
    return DateTime(timezone=True)


def legacy_metadata(revision: str) -> MetaData:
    """The tables ``create_all`` made at ``revision`` (one of ``LEGACY_REVISIONS``)."""
    if revision not in LEGACY_REVISIONS:
        raise ValueError(f"no create_all schema at revision {revision!r}")
    metadata = MetaData()
    epsilon_range = (
        [Column("epsilon_min", Float, nullable=True), Column("epsilon_max", Float, nullable=True)]
        if revision == "0002_study_epsilon_range"
        else []
    )
    studies = Table(
        "studies",
        metadata,
        Column("id", String(32), primary_key=True),
        Column("name", String(200), unique=True, nullable=True),
        Column("protocol", String(64), nullable=False),
        Column("params", JSON, nullable=False),
        Column("seed", BigInteger, nullable=False),
        Column("secret", String(64), nullable=False),
        Column("noise_seed", BigInteger, nullable=True),
        Column("phase", String(16), nullable=False),
        Column("created_at", _utc(), nullable=False),
        Column("enrollment_target", Integer, nullable=True),
        Column("enrollment_deadline", _utc(), nullable=True),
        Column("round_deadline_s", Float, nullable=False),
        Column("quorum", Float, nullable=False),
        *epsilon_range,
        Column("n_participants", Integer, nullable=False),
        Column("leased", Integer, nullable=False),
        Column("current_round", Integer, nullable=True),
        Column("failure_reason", Text, nullable=True),
        Column("warnings", JSON, nullable=False),
        Column("result", JSON, nullable=True),
    )
    Index("ix_studies_phase", studies.c.phase)
    Table(
        "participants",
        metadata,
        Column("study_id", String(32), ForeignKey("studies.id"), primary_key=True),
        Column("participant_id", Integer, primary_key=True),
        Column("epsilon", Float, nullable=False),
        Column("metadata", JSON, nullable=False),
        Column("enrolled_at", _utc(), nullable=False),
    )
    Table(
        "rounds",
        metadata,
        Column("study_id", String(32), ForeignKey("studies.id"), primary_key=True),
        Column("index", Integer, primary_key=True),
        Column("name", String(64), nullable=False),
        Column("status", String(16), nullable=False),
        Column("payload_kind", String(16), nullable=False),
        Column("payload_shape", JSON, nullable=False),
        Column("expected", Integer, nullable=False),
        Column("received", Integer, nullable=False),
        Column("opened_at", _utc(), nullable=True),
        Column("deadline", _utc(), nullable=True),
        Column("closed_at", _utc(), nullable=True),
        Column("broadcast", JSON, nullable=True),
        Column("output", JSON, nullable=True),
    )
    for name, extra in (
        ("contributions", []),
        (
            "reports",
            [
                Column("epsilon", Float, nullable=False),
                Column("digest", String(32), nullable=False),
                Column("received_at", _utc(), nullable=False),
            ],
        ),
    ):
        Table(
            name,
            metadata,
            Column("study_id", String(32), ForeignKey("studies.id"), primary_key=True),
            Column("round", Integer, primary_key=True),
            Column("participant_id", Integer, primary_key=True),
            Column("payload", LargeBinary, nullable=False),
            *extra,
        )
    return metadata

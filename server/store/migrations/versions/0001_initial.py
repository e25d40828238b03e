"""Initial schema: studies, participants, rounds, reports, contributions.

The tables as ``create_all`` made them before migrations existed (commit c7bf0e6).

Revision ID: 0001_initial
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_initial"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def _utc() -> sa.DateTime:
    # fedldp.server.store.tables.UTCDateTime stores through this type on every backend
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "studies",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("protocol", sa.String(length=64), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("secret", sa.String(length=64), nullable=False),
        sa.Column("noise_seed", sa.BigInteger(), nullable=True),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("created_at", _utc(), nullable=False),
        sa.Column("enrollment_target", sa.Integer(), nullable=True),
        sa.Column("enrollment_deadline", _utc(), nullable=True),
        sa.Column("round_deadline_s", sa.Float(), nullable=False),
        sa.Column("quorum", sa.Float(), nullable=False),
        sa.Column("n_participants", sa.Integer(), nullable=False),
        sa.Column("leased", sa.Integer(), nullable=False),
        sa.Column("current_round", sa.Integer(), nullable=True),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("warnings", sa.JSON(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_index("ix_studies_phase", "studies", ["phase"], unique=False)
    op.create_table(
        "contributions",
        sa.Column("study_id", sa.String(length=32), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("study_id", "round", "participant_id"),
    )
    op.create_table(
        "participants",
        sa.Column("study_id", sa.String(length=32), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("enrolled_at", _utc(), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("study_id", "participant_id"),
    )
    op.create_table(
        "reports",
        sa.Column("study_id", sa.String(length=32), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("digest", sa.String(length=32), nullable=False),
        sa.Column("received_at", _utc(), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("study_id", "round", "participant_id"),
    )
    op.create_table(
        "rounds",
        sa.Column("study_id", sa.String(length=32), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("payload_kind", sa.String(length=16), nullable=False),
        sa.Column("payload_shape", sa.JSON(), nullable=False),
        sa.Column("expected", sa.Integer(), nullable=False),
        sa.Column("received", sa.Integer(), nullable=False),
        sa.Column("opened_at", _utc(), nullable=True),
        sa.Column("deadline", _utc(), nullable=True),
        sa.Column("closed_at", _utc(), nullable=True),
        sa.Column("broadcast", sa.JSON(), nullable=True),
        sa.Column("output", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("study_id", "index"),
    )


def downgrade() -> None:
    for table in ("rounds", "reports", "participants", "contributions"):
        op.drop_table(table)
    op.drop_index("ix_studies_phase", table_name="studies")
    op.drop_table("studies")

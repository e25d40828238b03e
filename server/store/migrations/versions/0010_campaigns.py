"""Campaigns (issue 29): a study template on a schedule (campaigns), the study each occurrence
runs as (campaign_occurrences) and the devices' ε ledger across the occurrences (device_spends).

Revision ID: 0010_campaigns
Revises: 0009_participant_blocks
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_campaigns"
down_revision: str | None = "0009_participant_blocks"
branch_labels: str | None = None
depends_on: str | None = None


def _utc() -> sa.DateTime:
    # fedldp.server.store.tables.UTCDateTime stores through this type on every backend
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "campaigns",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("protocol", sa.String(length=64), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("every", sa.Float(), nullable=False),
        sa.Column("times", sa.Integer(), nullable=False),
        sa.Column("start", sa.Float(), nullable=False),
        sa.Column("budget_epsilon", sa.Float(), nullable=True),
        sa.Column("budget_period", sa.Float(), nullable=True),
        sa.Column("round_deadline_s", sa.Float(), nullable=False),
        sa.Column("quorum", sa.Float(), nullable=False),
        sa.Column("population_digest", sa.String(length=128), nullable=True),
        sa.Column("clock", sa.Float(), nullable=True),
        sa.Column("created_at", _utc(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "campaign_occurrences",
        sa.Column("campaign_id", sa.String(length=32), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.String(length=32), nullable=False),
        sa.Column("day", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaigns.id"]),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("campaign_id", "index"),
        sa.UniqueConstraint("study_id"),
    )
    op.create_table(
        "device_spends",
        sa.Column("campaign_id", sa.String(length=32), nullable=False),
        sa.Column("device", sa.String(length=64), nullable=False),
        sa.Column("occurrence", sa.Integer(), nullable=False),
        sa.Column("day", sa.Float(), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["campaign_id"], ["campaigns.id"]),
        sa.PrimaryKeyConstraint("campaign_id", "device", "occurrence"),
    )


def downgrade() -> None:
    op.drop_table("device_spends")
    op.drop_table("campaign_occurrences")
    op.drop_table("campaigns")

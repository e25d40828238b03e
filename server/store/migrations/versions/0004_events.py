"""A study's events (issue 12): the events table and studies.last_event.

Every state change of a study writes its event, numbered 1, 2, 3, … per study, in the same
transaction as the change; ``studies.last_event`` is the last number given (0 for the studies
that exist: their past is not replayed as events).

Revision ID: 0004_events
Revises: 0003_round_counts
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_events"
down_revision: str | None = "0003_round_counts"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("study_id", sa.String(length=32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        # fedldp.server.store.tables.UTCDateTime stores through this type on every backend
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("study_id", "seq"),
    )
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("last_event", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("last_event")
    op.drop_table("events")

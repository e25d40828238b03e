"""Leases with tokens and expiry (table leases) and the creator's population digest
(studies.population_digest), issue 14.

A lease row holds a block of participant ids for one caller until it expires; studies made
before this revision hold no lease rows (their old counter ``studies.leased`` keeps counting the
ids handed out) and no population digest (NULL: a study whose creator declared none).

Revision ID: 0005_leases
Revises: 0004_events
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_leases"
down_revision: str | None = "0004_events"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("population_digest", sa.String(length=128), nullable=True))
    op.create_table(
        "leases",
        sa.Column("study_id", sa.String(length=32), nullable=False),
        sa.Column("serial", sa.Integer(), nullable=False),
        sa.Column("start", sa.Integer(), nullable=False),
        sa.Column("stop", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("enrolled", sa.Integer(), nullable=False),
        sa.Column("released", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("study_id", "serial"),
    )


def downgrade() -> None:
    op.drop_table("leases")
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("population_digest")

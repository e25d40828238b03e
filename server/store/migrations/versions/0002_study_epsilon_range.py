"""A study's own ε range: studies.epsilon_min and epsilon_max.

Both nullable: NULL means the global bounds of fedldp.protocol.core.wire, so the studies that
exist keep accepting what they did.

Revision ID: 0002_study_epsilon_range
Revises: 0001_initial
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_study_epsilon_range"
down_revision: str | None = "0001_initial"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("epsilon_min", sa.Float(), nullable=True))
        batch.add_column(sa.Column("epsilon_max", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("epsilon_max")
        batch.drop_column("epsilon_min")

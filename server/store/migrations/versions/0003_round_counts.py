"""A round's refused and late counts: rounds.refused and rounds.late.

Reports refused by the protocol's checks or plausibility bounds, and reports that came after the
round had closed (issue 13). Both start at 0 (server default), which is what the rounds that
exist saw counted: nothing.

Revision ID: 0003_round_counts
Revises: 0002_study_epsilon_range
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_round_counts"
down_revision: str | None = "0002_study_epsilon_range"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.add_column(sa.Column("refused", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(sa.Column("late", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.drop_column("late")
        batch.drop_column("refused")

"""Campaign budget δ (issue 29, item 3): the δ at which a central protocol's (ε, δ) releases are
composed across a campaign's occurrences (null: a pure-ε campaign), and the secret seed of its
occurrences' server noise (null: a random one per occurrence).

Revision ID: 0012_campaign_delta
Revises: 0011_campaign_truth
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_campaign_delta"
down_revision: str | None = "0011_campaign_truth"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("campaigns") as batch:
        batch.add_column(sa.Column("budget_delta", sa.Float(), nullable=True))
        batch.add_column(sa.Column("noise_seed", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("campaigns") as batch:
        batch.drop_column("noise_seed")
        batch.drop_column("budget_delta")

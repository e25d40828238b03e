"""Campaign truth (issue 29's dashboard view): the truth of each occurrence, as the driver that
simulates the campaign's population declares it (null when nobody declared one).

Revision ID: 0011_campaign_truth
Revises: 0010_campaigns
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_campaign_truth"
down_revision: str | None = "0010_campaigns"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("campaign_occurrences") as batch:
        batch.add_column(sa.Column("truth", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("campaign_occurrences") as batch:
        batch.drop_column("truth")

"""A study's enrollment policy (studies.enrollment), issue 23: ``open`` lets anyone enroll,
``leased`` only holders of a lease. Studies made before this revision were open to anyone, and
stay so.

Revision ID: 0006_enrollment_policy
Revises: 0005_leases
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_enrollment_policy"
down_revision: str | None = "0005_leases"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(
            sa.Column("enrollment", sa.String(length=8), nullable=False, server_default="open")
        )


def downgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("enrollment")

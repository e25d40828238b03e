"""The origin of a study's protocol (studies.protocol_origin, studies.protocol_version), issue 25:
``built-in`` with fedldp's version, or the plugin distribution's name and version, as installed
beside the server that created the study; a swarm (and a server) running it with another version
is refused. Studies made before this revision recorded none, and are not checked.

Revision ID: 0007_protocol_origin
Revises: 0006_enrollment_policy
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_protocol_origin"
down_revision: str | None = "0006_enrollment_policy"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.add_column(sa.Column("protocol_origin", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("protocol_version", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("studies") as batch:
        batch.drop_column("protocol_version")
        batch.drop_column("protocol_origin")

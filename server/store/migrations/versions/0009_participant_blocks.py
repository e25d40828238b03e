"""Enrollments stored in blocks (table participant_blocks replaces participants), issue 27: one row
per block of an enrollment's participants, the ε's packed and the metadata one JSON value
(fedldp.server.store.tables.ParticipantBlockRow).

The upgrade converts every enrolled participant: a study's participants are read in id order and
cut into blocks where the enrollment time changes or the ids would span ``SPAN``; a block whose
participants' metadata are the same JSON text stores it once, else a list of each one's. Every
participant keeps its ε (bit for bit), its metadata and its enrollment time. The downgrade
unpacks the blocks into one row each.

Revision ID: 0009_participant_blocks
Revises: 0008_report_blocks
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import numpy as np
import sqlalchemy as sa
from alembic import op

revision = "0009_participant_blocks"
down_revision: str | None = "0008_report_blocks"
branch_labels: str | None = None
depends_on: str | None = None

SPAN = 4096  # as fedldp.server.store.blocks.SPAN when this revision was written
PAGE = 50_000

_PARTICIPANTS = sa.table(
    "participants",
    sa.column("study_id", sa.String(32)),
    sa.column("participant_id", sa.Integer()),
    sa.column("epsilon", sa.Float()),
    sa.column("metadata", sa.JSON()),
    sa.column("enrolled_at", sa.DateTime(timezone=True)),
)
_BLOCKS = sa.table(
    "participant_blocks",
    sa.column("study_id", sa.String(32)),
    sa.column("low", sa.Integer()),
    sa.column("high", sa.Integer()),
    sa.column("size", sa.Integer()),
    sa.column("ids", sa.LargeBinary()),
    sa.column("epsilons", sa.LargeBinary()),
    sa.column("metadata", sa.JSON()),
    sa.column("enrolled_at", sa.DateTime(timezone=True)),
)

Row = tuple[int, float, str, datetime]


def _studies(connection: sa.Connection, table: Any) -> list[str]:
    return sorted(str(s) for (s,) in connection.execute(sa.select(table.c.study_id).distinct()))


def _pages(connection: sa.Connection, study_id: str) -> Iterator[list[Row]]:
    t = _PARTICIPANTS
    after = -1
    while True:
        stmt = (
            sa.select(
                t.c.participant_id, t.c.epsilon, sa.cast(t.c.metadata, sa.Text), t.c.enrolled_at
            )
            .where(t.c.study_id == study_id, t.c.participant_id > after)
            .order_by(t.c.participant_id)
            .limit(PAGE)
        )
        rows = [(int(p), float(e), str(m), at) for p, e, m, at in connection.execute(stmt)]
        if not rows:
            return
        yield rows
        after = rows[-1][0]


def _block(study_id: str, run: list[Row]) -> dict[str, Any]:
    ids = [r[0] for r in run]
    low, high = ids[0], ids[-1]
    eps = np.array([r[1] for r in run], dtype="<f8")
    same = bool((eps.view(np.int64) == eps.view(np.int64)[0]).all())
    texts = [r[2] for r in run]
    shared = all(t == texts[0] for t in texts)
    return {
        "study_id": study_id,
        "low": low,
        "high": high,
        "size": len(run),
        "ids": None if high - low + 1 == len(run) else np.array(ids, dtype="<i4").tobytes(),
        "epsilons": (eps[:1] if same else eps).tobytes(),
        "metadata": json.loads(texts[0]) if shared else [json.loads(t) for t in texts],
        "enrolled_at": run[0][3],
    }


def upgrade() -> None:
    op.create_table(
        "participant_blocks",
        sa.Column("study_id", sa.String(length=32), nullable=False),
        sa.Column("low", sa.Integer(), nullable=False),
        sa.Column("high", sa.Integer(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("ids", sa.LargeBinary(), nullable=True),
        sa.Column("epsilons", sa.LargeBinary(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("enrolled_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("study_id", "low"),
    )
    connection = op.get_bind()
    for study_id in _studies(connection, _PARTICIPANTS):
        run: list[Row] = []
        for page in _pages(connection, study_id):
            blocks: list[dict[str, Any]] = []
            for row in page:
                if run and (row[0] - run[0][0] >= SPAN or row[3] != run[0][3]):
                    blocks.append(_block(study_id, run))
                    run = []
                run.append(row)
            if blocks:
                connection.execute(sa.insert(_BLOCKS), blocks)
        if run:
            connection.execute(sa.insert(_BLOCKS), [_block(study_id, run)])
    op.drop_table("participants")


def downgrade() -> None:
    op.create_table(
        "participants",
        sa.Column("study_id", sa.String(length=32), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("enrolled_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("study_id", "participant_id"),
    )
    connection = op.get_bind()
    t = _BLOCKS
    for study_id in _studies(connection, t):
        stmt = (
            sa.select(t.c.low, t.c.high, t.c.size, t.c.ids, t.c.epsilons, t.c.metadata)
            .add_columns(t.c.enrolled_at)
            .where(t.c.study_id == study_id)
            .order_by(t.c.low)
        )
        for low, high, size, packed, charges, meta, at in connection.execute(stmt).all():
            ids = (
                list(range(low, high + 1))
                if packed is None
                else np.frombuffer(bytes(packed), dtype="<i4").tolist()
            )
            eps = np.frombuffer(bytes(charges), dtype="<f8")
            eps = np.broadcast_to(eps, (size,)) if eps.size == 1 else eps
            rows = [
                {
                    "study_id": study_id,
                    "participant_id": pid,
                    "epsilon": float(eps[j]),
                    "metadata": meta if isinstance(meta, dict) else meta[j],
                    "enrolled_at": at,
                }
                for j, pid in enumerate(ids)
            ]
            connection.execute(sa.insert(_PARTICIPANTS), rows)
    op.drop_table("participant_blocks")

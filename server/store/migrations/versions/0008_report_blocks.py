"""Reports stored in blocks (table report_blocks replaces reports), issue 27: one row per block of
a round's reports, its columns packed arrays (fedldp.server.store.tables.ReportBlockRow).

The upgrade converts every stored report. A round's reports are read in participant order and
cut into blocks where the arrival time, the presence of a stored digest or the payload's length
changes, or where the ids would span ``SPAN``; so every report keeps its payload, its ε, its
arrival time and its stored digest (central-trust HMACs, and the SHA-256 digests local-trust rows
stored before they stopped storing them), and every receipt reads as before. The downgrade unpacks
the blocks into one row each.

The packing is written out here, not imported: a revision must keep doing what it did when the
code it came with changes.

Revision ID: 0008_report_blocks
Revises: 0007_protocol_origin
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import numpy as np
import sqlalchemy as sa
from alembic import op

revision = "0008_report_blocks"
down_revision: str | None = "0007_protocol_origin"
branch_labels: str | None = None
depends_on: str | None = None

SPAN = 4096  # as fedldp.server.store.report_rows.SPAN when this revision was written
PAGE = 50_000  # rows read at a time
DIGEST_BYTES = 16

_REPORTS = sa.table(
    "reports",
    sa.column("study_id", sa.String(32)),
    sa.column("round", sa.Integer()),
    sa.column("participant_id", sa.Integer()),
    sa.column("payload", sa.LargeBinary()),
    sa.column("epsilon", sa.Float()),
    sa.column("digest", sa.String(32)),
    sa.column("received_at", sa.DateTime(timezone=True)),
)
_BLOCKS = sa.table(
    "report_blocks",
    sa.column("study_id", sa.String(32)),
    sa.column("round", sa.Integer()),
    sa.column("low", sa.Integer()),
    sa.column("high", sa.Integer()),
    sa.column("size", sa.Integer()),
    sa.column("ids", sa.LargeBinary()),
    sa.column("payload", sa.LargeBinary()),
    sa.column("epsilons", sa.LargeBinary()),
    sa.column("digests", sa.LargeBinary()),
    sa.column("received_at", sa.DateTime(timezone=True)),
)


def _create_blocks() -> None:
    op.create_table(
        "report_blocks",
        sa.Column("study_id", sa.String(length=32), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("low", sa.Integer(), nullable=False),
        sa.Column("high", sa.Integer(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("ids", sa.LargeBinary(), nullable=True),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("epsilons", sa.LargeBinary(), nullable=False),
        sa.Column("digests", sa.LargeBinary(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("study_id", "round", "low"),
    )


def _rounds(connection: sa.Connection, table: Any) -> list[tuple[str, int]]:
    stmt = sa.select(table.c.study_id, table.c.round).distinct()
    return sorted((str(s), int(k)) for s, k in connection.execute(stmt))


def _report_pages(
    connection: sa.Connection, study_id: str, index: int
) -> Iterator[list[tuple[int, bytes, float, str, datetime]]]:
    t = _REPORTS
    after = -1
    while True:
        stmt = (
            sa.select(t.c.participant_id, t.c.payload, t.c.epsilon, t.c.digest, t.c.received_at)
            .where(t.c.study_id == study_id, t.c.round == index, t.c.participant_id > after)
            .order_by(t.c.participant_id)
            .limit(PAGE)
        )
        rows = [
            (int(p), bytes(b), float(e), str(d), at) for p, b, e, d, at in connection.execute(stmt)
        ]
        if not rows:
            return
        yield rows
        after = rows[-1][0]


def _block(
    study_id: str, index: int, run: list[tuple[int, bytes, float, str, datetime]]
) -> dict[str, Any]:
    ids = [r[0] for r in run]
    low, high = ids[0], ids[-1]
    charges = np.array([r[2] for r in run], dtype="<f8")
    shared = bool((charges == charges[0]).all())
    return {
        "study_id": study_id,
        "round": index,
        "low": low,
        "high": high,
        "size": len(run),
        "ids": None if high - low + 1 == len(run) else np.array(ids, dtype="<i4").tobytes(),
        "payload": b"".join(r[1] for r in run),
        "epsilons": (charges[:1] if shared else charges).tobytes(),
        "digests": b"".join(bytes.fromhex(r[3]) for r in run) if run[0][3] else b"",
        "received_at": run[0][4],
    }


def upgrade() -> None:
    _create_blocks()
    connection = op.get_bind()
    for study_id, index in _rounds(connection, _REPORTS):
        run: list[tuple[int, bytes, float, str, datetime]] = []
        blocks: list[dict[str, Any]] = []
        for page in _report_pages(connection, study_id, index):
            for row in page:
                if run and (
                    row[0] - run[0][0] >= SPAN
                    or row[4] != run[0][4]
                    or bool(row[3]) != bool(run[0][3])
                    or len(row[1]) != len(run[0][1])
                ):
                    blocks.append(_block(study_id, index, run))
                    run = []
                run.append(row)
            if blocks:
                connection.execute(sa.insert(_BLOCKS), blocks)
                blocks = []
        if run:
            connection.execute(sa.insert(_BLOCKS), [_block(study_id, index, run)])
    op.drop_table("reports")


def downgrade() -> None:
    op.create_table(
        "reports",
        sa.Column("study_id", sa.String(length=32), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("epsilon", sa.Float(), nullable=False),
        sa.Column("digest", sa.String(length=32), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("study_id", "round", "participant_id"),
    )
    connection = op.get_bind()
    t = _BLOCKS
    for study_id, index in _rounds(connection, t):
        stmt = (
            sa.select(t.c.low, t.c.high, t.c.size, t.c.ids, t.c.payload, t.c.epsilons)
            .add_columns(t.c.digests, t.c.received_at)
            .where(t.c.study_id == study_id, t.c.round == index)
            .order_by(t.c.low)
        )
        for low, high, size, packed, payload, charges, digests, at in connection.execute(stmt):
            ids = (
                list(range(low, high + 1))
                if packed is None
                else np.frombuffer(bytes(packed), dtype="<i4").tolist()
            )
            eps = np.frombuffer(bytes(charges), dtype="<f8")
            eps = np.broadcast_to(eps, (size,)) if eps.size == 1 else eps
            payload, digests = bytes(payload), bytes(digests)
            width = len(payload) // size
            rows = [
                {
                    "study_id": study_id,
                    "round": index,
                    "participant_id": pid,
                    "payload": payload[j * width : (j + 1) * width],
                    "epsilon": float(eps[j]),
                    "digest": digests[j * DIGEST_BYTES : (j + 1) * DIGEST_BYTES].hex(),
                    "received_at": at,
                }
                for j, pid in enumerate(ids)
            ]
            connection.execute(sa.insert(_REPORTS), rows)
    op.drop_table("report_blocks")

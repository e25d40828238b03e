"""Revisions 0008 and 0009 (reports and enrollments stored in blocks) convert a database the
previous head (0007) filled: every report keeps its receipt, an identical resend gets that
receipt again and a different one is refused (409 ``duplicate_conflict``), every participant
keeps its ε, metadata and enrollment time, on SQLite and on PostgreSQL; the downgrade gives back
the rows it started from.

The 0007 database is filled as that code left it (one reports row per report, one participants
row per participant) from studies run by the current services on a scratch SQLite database
(``test_schema.OldStudies``' way), with what rows of that age hold: batch and single reports
(single ones each at its own time), ids more than ``blocks.SPAN`` apart, local-trust rows with
and without a stored digest (rows older than issue 15 stored theirs), and a central-trust study's
HMAC digests.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from alembic import command
from sqlalchemy import Engine, create_engine, func, insert, select, text
from sqlalchemy.orm import Session

from fedldp.protocol.core.wire import (
    Enrollment,
    Receipt,
    ReportBatch,
    ReportSubmit,
    ScalarPayload,
)
from fedldp.server.errors import DuplicateConflict
from fedldp.server.runtime.context import Context
from fedldp.server.services import ingest, studies
from fedldp.server.settings import Settings
from fedldp.server.store import report_rows
from fedldp.server.store.migrations.legacy import legacy_metadata
from fedldp.server.store.schema import alembic_config, head
from fedldp.server.store.sql import PARTICIPANT_BLOCKS, REPORT_BLOCKS
from fedldp.server.store.tables import Base
from tests.server.test_rounds import new_study
from tests.server.test_schema import (
    migrate_to,
    old_participant_rows,
    old_report_rows,
    open_database,
    snapshot,
    version,
)

OLD_HEAD = "0007_protocol_origin"
LEGACY = "0002_study_epsilon_range"  # its reports and participants tables are 0007's
N = 6000  # more than blocks.SPAN: the ids of one round span several blocks
BATCHED = [*range(0, 1500), *range(4500, 5990)]
SINGLE = [1500, 1501, 1700, 5995, 5999]  # sent one by one, each at its own time
LEGACY_DIGEST = range(100, 200)  # local rows that store their digest (written before issue 15)


def _value(pid: int) -> float:
    return float(np.sin(pid))  # 17 digits: a payload's bytes tell reports apart


class Filled:
    """A local-trust study (hetero-mean-laplace, one round, N users) and a central-trust one
    (central-wme), both running, with reports stored; run on a scratch SQLite database."""

    def __init__(self, folder: Path) -> None:
        self.url = f"sqlite:///{folder / 'source.db'}"
        ctx = Context(Settings(database_url=self.url), open_database(self.url))
        try:
            self.local, self.people = new_study(ctx, "hetero-mean-laplace", {}, [1.0] * N)
            studies.start(ctx, self.local)
            batch = self.batch(BATCHED, [[_value(p)] for p in BATCHED])
            assert ingest.submit_batch(ctx, self.local, batch).accepted == len(BATCHED)
            for pid in SINGLE:
                (receipt,) = ingest.submit_many(ctx, self.local, [self.single(pid, _value(pid))])
                assert isinstance(receipt, Receipt)
                assert not receipt.duplicate
            self.central, self.central_people = new_study(ctx, "central-wme", {}, [1.0] * 20)
            studies.start(ctx, self.central)
            central = ReportBatch(
                round=0,
                kind="statistic",
                participant_ids=[e.participant_id for e in self.central_people[:12]],
                tokens=[e.token for e in self.central_people[:12]],
                payloads=[[0.1 * j, 3.0] for j in range(12)],
            )
            assert ingest.submit_batch(ctx, self.central, central).accepted == 12
            self.receipts = {
                study: self.stored_receipts(ctx, study, kind)
                for study, kind in ((self.local, "scalar"), (self.central, "statistic"))
            }
        finally:
            ctx.db.dispose()

    def batch(self, ids: list[int], rows: list[list[float]]) -> ReportBatch:
        tokens = [self.people[p].token for p in ids]
        return ReportBatch(
            round=0, kind="scalar", participant_ids=ids, tokens=tokens, payloads=rows
        )

    def single(self, pid: int, value: float) -> ReportSubmit:
        person: Enrollment = self.people[pid]
        return ReportSubmit(
            participant_id=pid, round=0, payload=ScalarPayload(value=value), token=person.token
        )

    @staticmethod
    def stored_receipts(ctx: Context, study_id: str, kind: str) -> dict[int, tuple[str, datetime]]:
        with ctx.transaction() as session:
            ids = [r.participant_id for r in report_rows.list_reports(session, study_id)]
            return report_rows.existing_reports(session, study_id, 0, kind, ids)

    def copy_into(self, target: Engine) -> None:
        """Every row, as the 0007 code stored it (reports one row each), into ``target``."""
        source = create_engine(self.url)
        old = legacy_metadata(LEGACY)
        try:
            with source.connect() as read, target.begin() as write:
                for table in Base.metadata.sorted_tables:
                    if table.name == PARTICIPANT_BLOCKS.name:
                        rows = old_participant_rows(read)
                        write.execute(insert(old.tables["participants"]), rows)
                        continue
                    if table.name == REPORT_BLOCKS.name:
                        values = old_report_rows(read)
                        for row in values:  # as rows written before issue 15 stored them
                            if row["participant_id"] in LEGACY_DIGEST:
                                receipt = self.receipts[row["study_id"]][row["participant_id"]]
                                row["digest"] = receipt[0]
                        write.execute(insert(old.tables["reports"]), values)
                        continue
                    values = [dict(r._mapping) for r in read.execute(select(table))]
                    if values:
                        write.execute(insert(table), values)
        finally:
            source.dispose()


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    e = create_engine(database_url)
    try:
        yield e
    finally:
        e.dispose()


def test_a_filled_database_of_the_previous_head_keeps_every_receipt(
    database_url: str, engine: Engine, tmp_path: Path
) -> None:
    filled = Filled(tmp_path)
    migrate_to(engine, OLD_HEAD)
    filled.copy_into(engine)
    with Session(engine) as session:
        before = old_rows(session)
    tables = snapshot(engine, LEGACY)
    ctx = Context(Settings(database_url=database_url), open_database(database_url))
    try:
        assert version(engine) == [head()]
        assert snapshot(engine, LEGACY) == tables  # every report and participant, as it was
        for study_id, kind in ((filled.local, "scalar"), (filled.central, "statistic")):
            assert filled.stored_receipts(ctx, study_id, kind) == filled.receipts[study_id]
        with ctx.transaction() as session:
            assert report_rows.count_reports(session, filled.local) == len(BATCHED) + len(SINGLE)
            blocks = session.scalar(
                select(func.count())
                .select_from(REPORT_BLOCKS)
                .where(REPORT_BLOCKS.c.study_id == filled.local)
            )
        # the batch's two runs of ids (cut at SPAN and where stored digests start and end),
        # and each single report (its own arrival time)
        assert blocks is not None
        assert blocks < 12

        # an identical resend: the receipt it got before; a different one: refused
        again = [filled.single(p, _value(p)) for p in (*SINGLE[:2], 3, 150)]
        for request, answer in zip(
            again, ingest.submit_many(ctx, filled.local, again), strict=True
        ):
            assert isinstance(answer, Receipt), answer
            assert answer.duplicate
            assert (answer.digest, answer.received_at) == filled.receipts[filled.local][
                request.participant_id
            ]
        other = [filled.single(p, _value(p) / 2) for p in (SINGLE[0], 3, 150, 5989)]
        for answer in ingest.submit_many(ctx, filled.local, other):
            assert isinstance(answer, DuplicateConflict)
            assert (answer.code, answer.status) == ("duplicate_conflict", 409)
        ids = [2, 4600, 5999]
        resent = ingest.submit_batch(
            ctx, filled.local, filled.batch(ids, [[_value(p)] for p in ids])
        )
        assert (resent.accepted, resent.duplicates, resent.rejected) == (0, 3, 0)
        changed = ingest.submit_batch(ctx, filled.local, filled.batch(ids, [[0.5]] * 3))
        assert changed.rejected == 3
        assert {item.code for item in changed.items} == {"duplicate_conflict"}
        # the reports not sent yet are taken
        fresh = [1502, 5991]
        taken = ingest.submit_batch(ctx, filled.local, filled.batch(fresh, [[0.25]] * 2))
        assert (taken.accepted, taken.duplicates, taken.rejected) == (2, 0, 0)
    finally:
        ctx.db.dispose()

    # and back: the downgrade gives the rows the upgrade started from (and those taken since)
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), OLD_HEAD)
    with Session(engine) as session:
        after = old_rows(session)
    taken_rows = {key for key in after if key[:3] in {(filled.local, 0, p) for p in fresh}}
    assert set(after) - taken_rows == set(before)


def old_rows(session: Session) -> list[tuple[Any, ...]]:
    """The rows of a pre-0008 reports table (times as UTC without their zone, as SQLite gives)."""
    stmt = select(text("study_id, round, participant_id, payload, epsilon, digest, received_at"))
    out = []
    for s, k, p, payload, eps, digest, at in session.execute(stmt.select_from(text("reports"))):
        at = at if isinstance(at, str) else at.astimezone(UTC).replace(tzinfo=None).isoformat(" ")
        out.append((s, k, p, bytes(payload), eps, digest, str(at)[:26]))
    return sorted(out)

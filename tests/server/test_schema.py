"""Schema migrations (server/store/schema.py, server/store/migrations/): a database written by one
version opens in the next, on SQLite and on PostgreSQL.

The old databases are built as the old code left them: by the revision itself, or by
``create_all`` of the frozen pre-migration schemas (``migrations.legacy``), then filled with the
rows of real studies (run by the current services on a scratch SQLite database and copied over,
column by column, through the ORM's types).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, Engine, create_engine, insert, inspect, select, text
from sqlalchemy.orm import Session

from fedldp.protocol.core.wire import EPSILON_MAX, EPSILON_MIN, Enrollment, StudyCreate
from fedldp.server.errors import EpsilonOutOfRange
from fedldp.server.runtime.context import Context
from fedldp.server.services import enrollment, studies
from fedldp.server.settings import Settings
from fedldp.server.store import participant_rows, report_rows
from fedldp.server.store.db import Database
from fedldp.server.store.migrations.legacy import LEGACY_REVISIONS, legacy_metadata
from fedldp.server.store.schema import (
    MIGRATIONS,
    SchemaTooNew,
    UnknownSchema,
    alembic_config,
    head,
    revisions,
    schema_status,
)
from fedldp.server.store.tables import Base, StudyRow
from tests.server.test_rounds import new_study, send

FINISHED = [[0.5], [0.25], [-0.5], [0.75], [0.0], [1.0]]
EARLY, LATE = [[0.5], [-0.25], [1.0]], [[0.0], [0.75], [-1.0]]


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    e = create_engine(database_url)
    try:
        yield e
    finally:
        e.dispose()


def migrate_to(engine: Engine, revision: str) -> None:
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), revision)


def version(engine: Engine) -> list[str]:
    with engine.connect() as connection:
        return list(MigrationContext.configure(connection).get_current_heads())


def open_database(url: str) -> Database:
    return Database(Settings(database_url=url))


# --------------------------------------------------------------------------- old studies


class OldStudies:
    """A finished and a running study (hetero-mean-laplace, 6 users of ε = 1: with equal ε the
    estimate is the plain mean of the reports), run on a scratch SQLite database at the head."""

    def __init__(self, folder: Path) -> None:
        self.url = f"sqlite:///{folder / 'source.db'}"
        ctx = Context(Settings(database_url=self.url), open_database(self.url))
        try:
            self.finished, people = new_study(ctx, "hetero-mean-laplace", {}, [1.0] * 6)
            studies.start(ctx, self.finished)
            send(ctx, self.finished, 0, "scalar", people, FINISHED)  # complete: it closes
            assert studies.get(ctx, self.finished).phase == "finished"
            self.result = studies.result(ctx, self.finished)
            self.running, self.people = new_study(ctx, "hetero-mean-laplace", {}, [1.0] * 6)
            studies.start(ctx, self.running)
            send(ctx, self.running, 0, "scalar", self.people[:3], EARLY)
        finally:
            ctx.db.dispose()

    def copy_into(self, target: Engine, revision: str) -> None:
        """Insert every row, with the columns the schema at ``revision`` has (its reports one
        row each, unpacked from the blocks they are stored in now)."""
        source = create_engine(self.url)
        try:
            with source.connect() as read, target.begin() as write:
                for table in legacy_metadata(revision).sorted_tables:
                    if table.name in OLD_ROWS:
                        values = OLD_ROWS[table.name](read)
                    else:
                        orm = Base.metadata.tables[table.name]
                        rows = read.execute(select(*(orm.c[c.name] for c in table.columns)))
                        values = [dict(row._mapping) for row in rows]
                    assert values or table.name == "contributions"
                    if values:
                        write.execute(insert(table), values)
        finally:
            source.dispose()


def old_participant_rows(connection: Connection) -> list[dict[str, Any]]:
    """The enrolled participants as rows of the participants table the schemas before 0009
    had."""
    with Session(connection) as session:
        out = []
        for study_id in session.scalars(select(StudyRow.id)).all():
            eps, metadata = participant_rows.load_participants(session, study_id)
            for pid, (e, m) in enumerate(zip(eps.tolist(), metadata, strict=True)):
                p = participant_rows.participant(session, study_id, pid)
                assert p is not None
                out.append(
                    {
                        "study_id": study_id,
                        "participant_id": pid,
                        "epsilon": e,
                        "metadata": m,
                        "enrolled_at": p.enrolled_at,
                    }
                )
        return out


def old_report_rows(connection: Connection) -> list[dict[str, Any]]:
    """The stored reports as rows of the reports table the schemas before 0008 had."""
    with Session(connection) as session:
        ids = session.scalars(select(StudyRow.id)).all()
        return [
            {
                "study_id": study_id,
                "round": r.round,
                "participant_id": r.participant_id,
                "payload": r.payload,
                "epsilon": r.epsilon,
                "digest": r.digest,
                "received_at": r.received_at,
            }
            for study_id in ids
            for r in report_rows.list_reports(session, study_id)
        ]


@pytest.fixture
def old(tmp_path: Path) -> OldStudies:
    return OldStudies(tmp_path)


OLD_ROWS = {"reports": old_report_rows, "participants": old_participant_rows}
"""How the rows of the tables stored in blocks from 0008 and 0009 on are read as the old rows."""


def _row_key(table: str, r: dict[str, Any]) -> tuple[Any, ...]:
    if table == "participants":
        return (
            r["study_id"],
            r["participant_id"],
            r["epsilon"],
            json.dumps(r["metadata"]),
            _utc(r["enrolled_at"]),
        )
    return (
        r["study_id"],
        r["round"],
        r["participant_id"],
        bytes(r["payload"]),
        r["epsilon"],
        r["digest"],
        _utc(r["received_at"]),
    )


def snapshot(engine: Engine, revision: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, with the columns of the schema at ``revision``, read through the
    ORM's types, in primary-key order; the reports and the participants (stored in blocks from
    0008 and 0009 on) as rows of the tables before."""
    out = {}
    with engine.connect() as connection:
        present = set(inspect(connection).get_table_names())
        for table in legacy_metadata(revision).sorted_tables:
            if table.name in OLD_ROWS:
                if table.name in present:
                    stmt = select(table).order_by(*table.primary_key)
                    rows = [dict(row._mapping) for row in connection.execute(stmt)]
                else:
                    rows = OLD_ROWS[table.name](connection)
                out[table.name] = sorted(_row_key(table.name, r) for r in rows)
                continue
            orm = Base.metadata.tables[table.name]
            stmt = select(*(orm.c[c.name] for c in table.columns)).order_by(*orm.primary_key)
            out[table.name] = [tuple(row) for row in connection.execute(stmt)]
    return out


def _utc(at: datetime) -> datetime:
    """A stored time as UTC (SQLite's come back without their zone)."""
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def resume_and_finish(url: str, old: OldStudies) -> None:
    """The running study takes the other half of its reports and finishes; the finished one
    reads as before."""
    ctx = Context(Settings(database_url=url), open_database(url))
    try:
        assert studies.result(ctx, old.finished) == old.result
        view = studies.get(ctx, old.running)
        assert (view.phase, view.rounds[0].status, view.rounds[0].received) == (
            "running",
            "open",
            3,
        )
        assert (view.epsilon_min, view.epsilon_max) == (EPSILON_MIN, EPSILON_MAX)  # NULL: global
        late: list[Enrollment] = old.people[3:]
        send(ctx, old.running, 0, "scalar", late, LATE)  # complete: it closes
        assert studies.get(ctx, old.running).phase == "finished"
        result = studies.result(ctx, old.running)
        assert result.diagnostics["n_reports"] == 6
        mean = sum(row[0] for row in EARLY + LATE) / 6
        assert result.estimate == pytest.approx(mean, rel=1e-12)
        # and a new study uses what the upgrade added
        created = studies.create(
            ctx, StudyCreate(protocol="hetero-mean-rr", seed=1, epsilon_min=0.5, epsilon_max=2.0)
        )
        assert (created.epsilon_min, created.epsilon_max) == (0.5, 2.0)
        with pytest.raises(EpsilonOutOfRange):
            enrollment.enroll(ctx, created.id, [0.1], [{}], [None])
    finally:
        ctx.db.dispose()


# --------------------------------------------------------------------------- the revisions


def test_revision_files_are_named_by_their_id_in_one_line() -> None:
    files = sorted(p.stem for p in (MIGRATIONS / "versions").glob("[0-9]*.py"))
    chain = revisions()
    assert [s.revision for s in chain] == files
    assert [s.down_revision for s in chain] == [None, *files[:-1]]
    for number, stem in enumerate(files, start=1):
        assert re.fullmatch(rf"{number:04d}_[a-z0-9_]+", stem), stem
    assert head() == files[-1]
    assert files[:5] == [
        "0001_initial",
        "0002_study_epsilon_range",
        "0003_round_counts",
        "0004_events",
        "0005_leases",
    ]


def test_models_match_migrations(database_url: str, engine: Engine) -> None:
    """Alembic's autogenerate finds nothing to change between the tables and a database upgraded
    from empty to the head: a change to tables.py needs its revision."""
    db = open_database(database_url)
    db.dispose()
    assert db.schema_before.empty
    assert version(engine) == [head()]
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


@pytest.mark.parametrize("revision", LEGACY_REVISIONS)
def test_the_create_all_schemas_equal_their_revisions(engine: Engine, revision: str) -> None:
    """What the adoption of a create_all database compares with is what the revision makes."""
    migrate_to(engine, revision)
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, legacy_metadata(revision)) == []


# --------------------------------------------------------------------------- upgrades


def test_a_database_at_the_initial_revision_upgrades_with_its_studies(
    database_url: str, engine: Engine, old: OldStudies
) -> None:
    migrate_to(engine, "0001_initial")
    old.copy_into(engine, "0001_initial")
    before = snapshot(engine, "0001_initial")

    db = open_database(database_url)
    db.dispose()
    assert (db.schema_before.revision, db.schema_before.adopt) == ("0001_initial", None)
    assert version(engine) == [head()]
    assert snapshot(engine, "0001_initial") == before
    with engine.connect() as connection:
        ranges = connection.execute(text("SELECT epsilon_min, epsilon_max FROM studies")).all()
    assert [tuple(r) for r in ranges] == [(None, None)] * 2
    resume_and_finish(database_url, old)


@pytest.mark.parametrize(
    ("revision", "old_index"), [("0001_initial", True), ("0002_study_epsilon_range", False)]
)
def test_a_create_all_database_is_stamped_and_upgraded(
    database_url: str, engine: Engine, old: OldStudies, revision: str, old_index: bool
) -> None:
    """Tables but no alembic_version: made by create_all before migrations. It is stamped with
    the revision it equals (the index the first releases made does not matter), then upgraded."""
    with engine.begin() as connection:
        legacy_metadata(revision).create_all(connection)
        if old_index:
            connection.execute(
                text("CREATE INDEX ix_reports_participant ON reports (study_id, participant_id)")
            )
    old.copy_into(engine, revision)
    before = snapshot(engine, revision)
    with engine.connect() as connection:
        assert schema_status(connection).adopt == revision

    db = open_database(database_url)
    db.dispose()
    assert (db.schema_before.revision, db.schema_before.adopt) == (None, revision)
    assert version(engine) == [head()]
    assert snapshot(engine, revision) == before
    resume_and_finish(database_url, old)


def test_a_create_all_database_of_an_unknown_schema_is_refused_untouched(
    database_url: str, engine: Engine
) -> None:
    metadata = legacy_metadata("0001_initial")
    metadata.remove(metadata.tables["contributions"])  # as before central-trust protocols
    with engine.begin() as connection:
        metadata.create_all(connection)
    with pytest.raises(UnknownSchema, match="contributions"):
        open_database(database_url)
    with engine.connect() as connection:
        names = set(inspect(connection).get_table_names())
    assert names == {"studies", "participants", "rounds", "reports"}


def test_a_database_newer_than_the_code_is_refused_untouched(
    database_url: str, engine: Engine, old: OldStudies
) -> None:
    """A newer fedldp may have changed what the tables mean: this one must neither migrate nor
    serve it."""
    migrate_to(engine, "0001_initial")
    old.copy_into(engine, "0001_initial")
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0099_from_the_future'"))
    before = snapshot(engine, "0001_initial")

    with pytest.raises(SchemaTooNew, match=r"0099_from_the_future.*newer release"):
        open_database(database_url)
    assert version(engine) == ["0099_from_the_future"]
    assert snapshot(engine, "0001_initial") == before
    with engine.connect() as connection:
        columns = {c["name"] for c in inspect(connection).get_columns("studies")}
    assert "epsilon_min" not in columns  # 0002 did not run

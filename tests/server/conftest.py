"""Fixtures of the server suite: every storage and API test runs on SQLite and on PostgreSQL.

``database_url`` is parametrized over the two backends (docs/architecture.md, convention 6: one
storage suite for every backend). The PostgreSQL cases are marked ``postgres`` and skipped, with the
reason, when the local server at 127.0.0.1:5432 (``$FEDLDP_TEST_POSTGRES_URL`` overrides it) does
not answer; each run (each xdist worker) has a schema of its own, so nothing else uses its tables
meanwhile.

A test that opens the database through the server (the ``settings`` fixture: ``ctx``, ``app``,
``client``) gets it at the head revision with every table empty, the state the server's own
migration on opening leaves an empty database in, without paying for the migration each time:
on SQLite a copy of a file migrated once per run, on PostgreSQL the run's schema migrated once and
its tables truncated before the test. A test that asks for ``database_url`` alone (the schema and
migration tests) gets an empty database, as before: a new file, or a schema with every table
dropped before and after it.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from fastapi import FastAPI
from sqlalchemy import create_engine, text

from fedldp.server.runtime.context import Context
from fedldp.server.settings import Settings
from fedldp.server.store.db import Database
from fedldp.server.store.schema import head
from fedldp.server.store.tables import Base
from fedldp.server.web.app import create_app
from tests.server.helpers import app_context

SERVER_URL = os.environ.get(
    "FEDLDP_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
SCHEMA = f"fedldp_test_{os.getpid()}"
"""This run's own schema, so that test runs sharing the database cannot drop each other's
tables; it is created on first use and dropped when the run ends."""
POSTGRES_URL = f"{SERVER_URL}{'&' if '?' in SERVER_URL else '?'}options=-csearch_path%3D{SCHEMA}"


@functools.cache
def postgres_unreachable(url: str = SERVER_URL) -> str | None:
    """Why the PostgreSQL at ``url`` cannot be used (None when it answers and this run's schema
    exists); asked once."""
    try:
        with psycopg.connect(url.replace("+psycopg", ""), connect_timeout=3) as connection:
            connection.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
            return None
    except psycopg.Error as exc:
        return f"PostgreSQL at {url} is unreachable: {exc}".strip()


@pytest.fixture(scope="session", autouse=True)
def _drop_this_runs_schema() -> Iterator[None]:
    yield
    if postgres_unreachable.cache_info().currsize and postgres_unreachable() is None:
        with psycopg.connect(SERVER_URL.replace("+psycopg", "")) as connection:
            connection.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def drop_all(url: str) -> None:
    """Drop fedldp's tables (and the reports and participants tables of the schemas before
    0008 and 0009) and Alembic's record of their revision."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql("DROP TABLE IF EXISTS reports")
            connection.exec_driver_sql("DROP TABLE IF EXISTS participants")
            Base.metadata.drop_all(connection)
            connection.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database the server has migrated to the head, with no rows (one per run)."""
    path = tmp_path_factory.mktemp("template") / "fedldp.db"
    Database(Settings(database_url=f"sqlite:///{path}", admin_key=None)).dispose()
    assert not path.with_name("fedldp.db-wal").exists()  # the last close checkpointed the WAL
    return path


def empty_migrated_postgres(url: str) -> None:
    """The run's schema at the head with every table empty: migrated the first time (or after a
    test dropped or changed it), otherwise truncated."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            names = set(
                connection.exec_driver_sql(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                ).scalars()
            )
            version = (
                connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
                if "alembic_version" in names
                else []
            )
            if version == [head()] and names >= set(Base.metadata.tables):
                tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
                connection.exec_driver_sql(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
                return
    finally:
        engine.dispose()
    drop_all(url)
    Database(Settings(database_url=url, admin_key=None)).dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    migrated = "settings" in request.fixturenames  # opened by the server: at the head, empty
    if request.param == "sqlite":
        path = tmp_path / "fedldp.db"
        if migrated:
            shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    reason = postgres_unreachable()
    if reason is not None:
        pytest.skip(reason)
    if migrated:
        empty_migrated_postgres(POSTGRES_URL)
        yield POSTGRES_URL
        return
    drop_all(POSTGRES_URL)
    try:
        yield POSTGRES_URL
    finally:
        drop_all(POSTGRES_URL)


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    # SQLite keeps its central-trust keys beside the file (the default); PostgreSQL's default
    # (the user's state directory) is shared by every run: give it the test's own
    keys = None if database_url.startswith("sqlite") else tmp_path / "keys"
    return Settings(database_url=database_url, admin_key=None, key_dir=keys)


@pytest.fixture
def ctx(settings: Settings) -> Iterator[Context]:
    """A service context without HTTP (docs/architecture.md, convention 2)."""
    context = Context(settings, Database(settings))
    try:
        yield context
    finally:
        context.db.dispose()


@pytest.fixture
def app(settings: Settings) -> Iterator[FastAPI]:
    application = create_app(settings, sweeper=False)
    try:
        yield application
    finally:
        # ASGITransport runs no lifespan, so the engine is disposed here.
        app_context(application).db.dispose()


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://fedldp.test") as c:
        yield c

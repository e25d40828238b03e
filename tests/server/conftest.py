"""Fixtures of the server suite: every storage and API test runs on SQLite and on PostgreSQL.

``database_url`` is parametrized over the two backends (STYLE.md rule 6: one storage suite for
every backend). The PostgreSQL cases are marked ``postgres`` and skipped, with the reason, when the
local server at 127.0.0.1:5432 (``$FEDLDP_TEST_POSTGRES_URL`` overrides it) does not answer; they
drop every table before and after each test (the suite runs sequentially, so nothing else uses the
database meanwhile).
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from fastapi import FastAPI
from sqlalchemy import create_engine

from fedldp.server.app import create_app
from fedldp.server.context import Context
from fedldp.server.db import Database
from fedldp.server.settings import Settings
from fedldp.server.tables import Base
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
    """Drop fedldp's tables and Alembic's record of their revision."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            Base.metadata.drop_all(connection)
            connection.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
    finally:
        engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fedldp.db'}"
        return
    reason = postgres_unreachable()
    if reason is not None:
        pytest.skip(reason)
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
    """A service context without HTTP (STYLE.md rule 2)."""
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

"""The database layer (server/db.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fedldp.server.db import Database
from fedldp.server.settings import Settings
from tests.server.conftest import POSTGRES_URL, drop_all, postgres_unreachable


@pytest.mark.postgres
def test_replicas_starting_together_create_the_schema_once() -> None:
    """Several servers starting at once on an empty PostgreSQL database all come up (without the
    advisory lock, CREATE TABLE races in the catalog: UniqueViolation on pg_type)."""
    reason = postgres_unreachable()
    if reason is not None:
        pytest.skip(reason)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            Database(Settings(database_url=POSTGRES_URL)).dispose()
        except Exception as exc:  # collected and asserted on below
            errors.append(exc)

    try:
        for _ in range(3):
            drop_all(POSTGRES_URL)
            threads = [threading.Thread(target=start) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        drop_all(POSTGRES_URL)
    assert errors == []


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    db = Database(Settings(database_url=f"sqlite:///{tmp_path}/wal.db"))
    try:
        with db.engine.connect() as connection:
            mode = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
            timeout = connection.exec_driver_sql("PRAGMA busy_timeout").scalar()
    finally:
        db.dispose()
    assert (mode, timeout) == ("wal", 30_000)

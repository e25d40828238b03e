"""The database layer (server/store/db.py)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from fedldp.server.settings import Settings
from fedldp.server.store.db import PAGE_SIZE, WAL_CHECKPOINT_BYTES, Database
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


def pragmas(path: Path, *names: str) -> tuple[object, ...]:
    """The values of these PRAGMAs on a server connection to the SQLite file ``path``."""
    db = Database(Settings(database_url=f"sqlite:///{path}"))
    try:
        with db.engine.connect() as connection:
            return tuple(
                connection.exec_driver_sql(f"PRAGMA {name}").scalar_one() for name in names
            )
    finally:
        db.dispose()


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    assert pragmas(tmp_path / "wal.db", "journal_mode", "busy_timeout") == ("wal", 30_000)


def test_a_new_sqlite_database_takes_large_pages_and_an_old_one_keeps_its_own(
    tmp_path: Path,
) -> None:
    """New databases get PAGE_SIZE pages; one made with SQLite's default 4,096 keeps them (a
    page size cannot change in WAL mode); both checkpoint at WAL_CHECKPOINT_BYTES."""
    old = tmp_path / "old.db"
    made_before = sqlite3.connect(old)
    made_before.execute("PRAGMA journal_mode=WAL")
    made_before.execute("CREATE TABLE t (x)")
    made_before.close()
    found = {
        name: pragmas(tmp_path / name, "page_size", "wal_autocheckpoint")
        for name in ("new.db", "old.db")
    }
    assert found == {
        "new.db": (PAGE_SIZE, WAL_CHECKPOINT_BYTES // PAGE_SIZE),
        "old.db": (4096, WAL_CHECKPOINT_BYTES // 4096),
    }


def test_processes_on_one_sqlite_file_take_turns_to_write(tmp_path: Path) -> None:
    """Database.write_turn: a second server process (here a second Database on the same file,
    whose lock is its own open file) waits on the lock file beside the database, not in SQLite's
    sleeping busy handler, and goes on as soon as the first is done."""
    url = f"sqlite:///{tmp_path}/turns.db"
    first, second = Database(Settings(database_url=url)), Database(Settings(database_url=url))
    entered = threading.Event()

    def other() -> None:
        with second.write_turn():
            entered.set()

    try:
        with first.write_turn():
            waiting = threading.Thread(target=other)
            waiting.start()
            assert not entered.wait(0.3)  # the first still writes
        assert entered.wait(5.0)
        waiting.join()
        assert (tmp_path / "turns.db-lock").exists()
    finally:
        first.dispose()
        second.dispose()

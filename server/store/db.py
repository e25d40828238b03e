"""Engine and sessions: SQLite in WAL mode with a busy timeout, or PostgreSQL, from one URL.

On SQLite every transaction begins with ``BEGIN IMMEDIATE`` (the SQLAlchemy recipe for pysqlite),
so writers serialize at BEGIN instead of failing on a read-to-write lock upgrade; on PostgreSQL
the services lock the rows they change (``SELECT … FOR UPDATE``/conditional updates).

Opening a database brings its schema to the code's (``fedldp.server.store.schema``: the Alembic
revisions), once, under a lock, so replicas may start together on one database.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from fedldp.server.settings import Settings
from fedldp.server.store.schema import SchemaStatus, upgrade

__all__ = ["Database"]

SCHEMA_LOCK = 0x0FED1D9
"""PostgreSQL advisory lock key held while migrating the schema."""


PAGE_SIZE = 16_384
"""SQLite page size of a new database (SQLite's default is 4,096; a database keeps the size it
was made with). Larger pages hold more rows each: a report or participant insert, the batch
path's main cost, does about a twentieth less work."""

WAL_CHECKPOINT_BYTES = 40 * 2**20
"""A commit that finds this much in SQLite's WAL copies it into the database file first (as pages:
``wal_autocheckpoint``; SQLite's default is 1,000 pages). The sweeper does that in the background
every sweep (``fedldp.server.services.rounds.sweep``), so that the requests seldom do: a checkpoint
syncs both files, and at 1,000 pages of 4 KiB report and enrollment batches spent a third of their
commits' CPU on them, and more of their time waiting for the disk."""

POOL_SIZE, POOL_OVERFLOW = 10, 20
"""PostgreSQL connections kept open and opened beyond them, for one server (all workers)."""


class Database:
    """The engine, a session factory, and the schema (brought to the code's on opening;
    ``fedldp.server.store.schema.SchemaError`` if it cannot be)."""

    def __init__(self, settings: Settings) -> None:
        url = settings.database_url
        self.is_sqlite = url.startswith("sqlite")
        kwargs: dict[str, Any] = {}
        if self.is_sqlite:
            kwargs["connect_args"] = {
                "timeout": settings.busy_timeout_s,
                "check_same_thread": False,
            }
        else:
            # PostgreSQL's connections are a shared budget (max_connections, 100 by default):
            # K workers share this process's 30, so that two replicas of two workers each still
            # fit beside the operator's own sessions
            workers = max(1, settings.workers)
            kwargs.update(
                pool_size=max(2, POOL_SIZE // workers),
                max_overflow=max(2, POOL_OVERFLOW // workers),
                pool_pre_ping=True,
            )
        self.engine: Engine = create_engine(url, **kwargs)
        if self.is_sqlite:
            _configure_sqlite(self.engine, settings.busy_timeout_s)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._turn = threading.Lock()
        self._turn_file: int | None = None  # the lock file's descriptor, opened on first use
        file = self.engine.url.database if self.is_sqlite else None
        self._turn_path = (
            None if not file or file == ":memory:" or file.startswith("file:") else f"{file}-lock"
        )
        try:
            self.schema_before: SchemaStatus = self.migrate()
            """Where the schema stood before opening (``schema_before.empty``: created now)."""
        except BaseException:
            self.engine.dispose()
            raise

    def migrate(self) -> SchemaStatus:
        """Bring the schema to the head revision in one transaction. On SQLite it begins with
        ``BEGIN IMMEDIATE``, which serializes it with every other writer; on PostgreSQL, replicas
        starting together would race to run the same revisions (CREATE TABLE collides in the
        catalog), so each first takes an advisory lock, which lasts until the transaction ends:
        the first migrates, the others then find the head. Where the schema stood before."""
        with self.engine.begin() as connection:
            if not self.is_sqlite:
                connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})")
            return upgrade(connection)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def session(self) -> Session:
        return self.sessions()

    def read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """The rows of one small read (``sql`` with ``?`` placeholders), straight through the
        driver on a pooled connection: no session, no transaction of the process's (on SQLite
        no ``BEGIN IMMEDIATE``, so it waits for no writer: a WAL reader sees the last commit).
        For the per-request lookups of the task endpoint, whose cost was mostly the ORM's."""
        if not self.is_sqlite:
            sql = sql.replace("?", "%s")
        raw = self.engine.raw_connection()
        try:
            cursor = raw.cursor()
            try:
                cursor.execute(sql, params)
                return list(cursor.fetchall())
            finally:
                cursor.close()
        finally:
            raw.close()  # back to the pool, which ends the driver's read transaction, if any

    @contextmanager
    def write_turn(self) -> Iterator[None]:
        """SQLite: this process's turn to write. SQLite runs one write transaction at a time, and
        a writer that finds the database locked waits in its busy handler, which sleeps in
        growing steps (1, 2, 5, 10… ms) and idles the server whenever requests queue up. So the
        threads of a process take turns on a lock, and the processes of a server (``--workers``)
        on an advisory lock of a file beside the database (``flock``), each waking as soon as
        the one before is done. Other programs writing the same file still meet the busy
        handler (SQLite's own locking is what keeps the data consistent either way)."""
        with self._turn:
            if self._turn_path is None:
                yield
                return
            if self._turn_file is None:
                self._turn_file = os.open(self._turn_path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._turn_file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._turn_file, fcntl.LOCK_UN)

    def checkpoint(self, *, passive: bool = False) -> bool:
        """SQLite: copy the WAL into the database file and truncate it to zero bytes (the
        caller holds the process's transaction turn). True if a reader kept it from finishing.
        ``passive``: copy what it can without waiting for anyone and leave the WAL's size (the
        sweeper's, so that writers seldom reach ``WAL_CHECKPOINT_BYTES`` and checkpoint
        themselves)."""
        mode = "PASSIVE" if passive else "TRUNCATE"
        raw = self.engine.raw_connection()  # outside any transaction (no BEGIN IMMEDIATE)
        try:
            cursor = raw.cursor()
            cursor.execute(f"PRAGMA wal_checkpoint({mode})")
            (busy, _, _) = cursor.fetchone() or (0, 0, 0)
            cursor.close()
        finally:
            raw.close()
        return bool(busy)

    def dispose(self) -> None:
        self.engine.dispose()
        with self._turn:
            if self._turn_file is not None:
                os.close(self._turn_file)
                self._turn_file = None


def _configure_sqlite(engine: Engine, busy_timeout_s: float) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, connection_record: Any) -> None:
        dbapi_connection.isolation_level = None  # let BEGIN below start transactions
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA page_size={PAGE_SIZE}")  # a new database's (before WAL)
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes in WAL
        cursor.execute("PRAGMA foreign_keys=ON")
        # deleted content (central-trust contributions) is overwritten with zeros, not left in
        # free pages
        cursor.execute("PRAGMA secure_delete=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        (page_size,) = cursor.execute("PRAGMA page_size").fetchone()
        cursor.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_BYTES // int(page_size)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

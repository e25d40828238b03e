"""What every service needs: settings, the database and the plan cache (one per app)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from fedldp.server import repository as repo
from fedldp.server.auth import TokenCache
from fedldp.server.db import Database
from fedldp.server.plans import PlanCache
from fedldp.server.settings import Settings

__all__ = ["Context"]


class Transitions:
    """A signal from the threads that make study and round transitions to the coroutines that
    wait for one (long polls): a counter, and events set on the waiters' event loops."""

    def __init__(self) -> None:
        self.count = 0
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._lock = threading.Lock()

    def bump(self) -> None:
        with self._lock:
            self.count += 1
            waiters = list(self._waiters)
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # that loop has closed meanwhile
                loop.call_soon_threadsafe(event.set)

    async def wait(self, seen: int) -> None:
        """Return once ``count`` differs from ``seen`` (callers bound it with a timeout)."""
        event = asyncio.Event()
        key = (asyncio.get_running_loop(), event)
        with self._lock:
            if self.count != seen:
                return
            self._waiters.add(key)
        try:
            await event.wait()
        finally:
            with self._lock:
                self._waiters.discard(key)


@dataclass
class Context:
    settings: Settings
    db: Database
    plans: PlanCache = field(default_factory=PlanCache)
    tokens: TokenCache = field(default_factory=TokenCache)
    transitions: Transitions = field(default_factory=Transitions)
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    """Each study's token key, once read (it never changes): the single-participant routes
    check a token before they parse the body with no database round trip."""
    _sqlite_turn: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def study_secret(self, study_id: str) -> str | None:
        """The study's token key (None: no such study); read once per process."""
        secret = self.secrets.get(study_id)
        if secret is None:
            with self.db.session() as session:
                secret = repo.study_secret(session, study_id)
            if secret is not None:
                self.secrets[study_id] = secret
        return secret

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A short transaction: committed on success, rolled back on any error.

        SQLite runs one transaction at a time (each begins IMMEDIATE); the threads of this
        process take turns on a lock rather than in SQLite's busy handler, which sleeps in
        growing steps and would idle the server under concurrent requests. Other processes on
        the same file still wait in the busy handler."""
        turn = self._sqlite_turn if self.db.is_sqlite else contextlib.nullcontext()
        with turn, self.db.session() as session, session.begin():
            yield session

"""What every service needs: settings, the database and the plan cache (one per app)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from server.auth import TokenCache
from server.db import Database
from server.plans import PlanCache
from server.settings import Settings

__all__ = ["Context"]


@dataclass
class Context:
    settings: Settings
    db: Database
    plans: PlanCache = field(default_factory=PlanCache)
    tokens: TokenCache = field(default_factory=TokenCache)
    _sqlite_turn: threading.Lock = field(default_factory=threading.Lock, repr=False)

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

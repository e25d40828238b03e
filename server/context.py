"""What every service needs: settings, the database and the plan cache (one per app)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from server.db import Database
from server.plans import PlanCache
from server.settings import Settings

__all__ = ["Context"]


@dataclass
class Context:
    settings: Settings
    db: Database
    plans: PlanCache = field(default_factory=PlanCache)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A short transaction: committed on success, rolled back on any error."""
        with self.db.session() as session, session.begin():
            yield session

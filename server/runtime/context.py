"""What every service needs: settings, the database and the plan cache (one per app)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from fedldp.server.errors import UnknownProtocol
from fedldp.server.runtime.auth import TokenCache
from fedldp.server.runtime.keys import KeyStore, default_key_dir
from fedldp.server.runtime.metrics import Metrics
from fedldp.server.runtime.plans import EnrolledCache, PlanCache
from fedldp.server.runtime.protocols import offered_protocols
from fedldp.server.runtime.received import ReceivedCache
from fedldp.server.runtime.states import StudyStates
from fedldp.server.settings import Settings
from fedldp.server.store import repository as repo
from fedldp.server.store.db import Database

__all__ = ["Context", "shred_after_commit"]

log = logging.getLogger("fedldp.server")

_SHRED = "fedldp.shred"

SHRED_CHECKPOINT_RETRIES, SHRED_CHECKPOINT_WAIT_S = 5, 0.05
"""How often, and how far apart, a busy truncating checkpoint is tried again (``_shred``)."""


def shred_after_commit(session: Session, study_id: str) -> None:
    """Destroy the study's contribution key once the caller's transaction has committed (the
    deletion of its contributions with it). Destroying it earlier would leave a study whose
    commit failed unable to read its contributions again."""
    session.info.setdefault(_SHRED, set()).add(study_id)


class Transitions:
    """A signal from the threads that make study and round transitions to the coroutines that
    wait for one (long polls) and to the cached snapshots (``StudyStates``): a counter, and
    events set on the waiters' event loops."""

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
    enrolled: EnrolledCache = field(default_factory=EnrolledCache)
    received: ReceivedCache = field(default_factory=ReceivedCache)
    tokens: TokenCache = field(default_factory=TokenCache)
    transitions: Transitions = field(default_factory=Transitions)
    """Bumped after each commit that moved a study (``repository.MOVED``). Process-local: other
    workers and replicas learn of the transition from the database, at the next poll or when
    their ``states`` snapshot ages out."""
    states: StudyStates = field(default_factory=StudyStates)
    keys: KeyStore = field(init=False)
    metrics: Metrics = field(default_factory=Metrics)
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    """Each study's token key, once read (it never changes): the single-participant routes
    check a token before they parse the body with no database round trip."""
    offered: tuple[str, ...] = field(init=False)
    """The protocols this server offers (``FEDLDP_PROTOCOLS``, else every installed one):
    ``fedldp.server.runtime.protocols``; a name not installed stops the server at start."""

    def __post_init__(self) -> None:
        directory = self.settings.key_dir or default_key_dir(self.settings.database_url)
        self.keys = KeyStore(directory)
        try:
            self.offered = offered_protocols(self.settings)
        except UnknownProtocol:  # the server does not start: its database closes with it
            self.db.dispose()
            raise

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

        SQLite runs one transaction at a time (each begins IMMEDIATE), in the turns of
        ``Database.write_turn``."""
        turn = self.db.write_turn() if self.db.is_sqlite else contextlib.nullcontext()
        with turn:
            with self.db.session() as session:
                with session.begin():
                    yield session
                shred = session.info.pop(_SHRED, set())
                moved = session.info.pop(repo.MOVED, False)
            if moved:  # after the commit: whoever it wakes reads the new state
                self.transitions.bump()
            if shred:
                self._shred(shred)

    def _shred(self, study_ids: set[str]) -> None:
        """After the commit that deleted their contributions: on SQLite, checkpoint the WAL into the
        database file (whose freed pages ``secure_delete`` zeroed) and truncate it; then destroy the
        keys. A failure is logged, never raised (the transaction did commit): the sweeper destroys
        the keys of ended studies (``fedldp.server.services.rounds.shred_ended``)."""
        if self.db.is_sqlite:
            try:
                # a checkpoint running meanwhile (the sweeper's, any process's) makes SQLite
                # refuse this one at once: it is tried again once that one is done
                busy = self.db.checkpoint()
                for _ in range(SHRED_CHECKPOINT_RETRIES):
                    if not busy:
                        break
                    time.sleep(SHRED_CHECKPOINT_WAIT_S)
                    busy = self.db.checkpoint()
            except Exception:
                log.exception("the WAL checkpoint after deleting contributions failed")
            else:
                if busy:
                    log.warning("the WAL checkpoint was blocked by a reader; the next one retries")
        for study_id in sorted(study_ids):
            try:
                self.keys.destroy(study_id)
            except OSError:
                log.exception("study %s: destroying its key failed; the sweeper retries", study_id)

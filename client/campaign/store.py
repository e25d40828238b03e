"""A swarm driver's device store: one SQLite file per campaign run, in a folder the driver is
given, holding what the devices must remember between occurrences and across runs.

* ``meta``: the campaign's server id and the fingerprint of the run (template and population
  digest): a store is refused for another campaign.
* ``spends``: each device's ledger, one row per (occurrence, slot) with the day, the ε charged by
  the device's own rule (``epsilon``), the ε it declared for its reports, its memoized state
  (−1 for none) and the server's charge (``bound``): docs/longitudinal.md §5. A device is
  charged before it is admitted on the server (write-ahead), once per occurrence.
* ``occurrences``: each finished occurrence's study, counts, estimate and truth.

Every write is one transaction (WAL, ``synchronous=FULL``), so a SIGKILL of the driver loses at
most the occurrence in flight, which the next run runs again: it re-derives the same reports
(same device secret, same occurrence seed) and its devices, already charged, are not charged
twice. Memoized responses (protocols that memoize, issue 29 item 4) are a deterministic function
of the device secret, so they need no row: the same device recomputes the same response; which
memoized states it has revealed is in ``spends`` (its charge depends on them).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from fedldp.client.campaign.budget import (
    NO_STATE,
    ChargeRule,
    DeviceBudget,
    DeviceLedger,
    Spend,
    basic_rule,
)

__all__ = ["STORE_FILE", "DeviceStore", "StoredOccurrence"]

STORE_FILE = "devices.sqlite"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS spends (occurrence INTEGER NOT NULL, slot INTEGER NOT NULL, "
    "day REAL NOT NULL, epsilon REAL NOT NULL, declared REAL, state INTEGER, bound REAL, "
    "PRIMARY KEY (occurrence, slot))",
    "CREATE TABLE IF NOT EXISTS occurrences (idx INTEGER PRIMARY KEY, day REAL NOT NULL, "
    "study TEXT, enrolled INTEGER NOT NULL, refused INTEGER NOT NULL, estimate TEXT NOT NULL, "
    "truth TEXT NOT NULL)",
)

StoredOccurrence = tuple[int, float, str | None, int, int, Any, Any]
"""(index, day, study id, enrolled, refused, estimate, truth) of a finished occurrence."""


class DeviceStore:
    """The store in ``folder`` (created if missing); close it, or use it as a context manager."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / STORE_FILE
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        with self._tx() as db:
            for statement in _SCHEMA:
                db.execute(statement)
            columns = {row[1] for row in db.execute("PRAGMA table_info(spends)")}
            for column, kind in (("declared", "REAL"), ("state", "INTEGER"), ("bound", "REAL")):
                if column not in columns:  # a store written before charge rules
                    db.execute(f"ALTER TABLE spends ADD COLUMN {column} {kind}")

    def __enter__(self) -> DeviceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def bind(self, fingerprint: str) -> str | None:
        """Tie the store to one campaign run (ValueError for a store of another); the server's
        campaign id when one was recorded."""
        with self._tx() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'fingerprint'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('fingerprint', ?)", (fingerprint,))
            elif row[0] != fingerprint:
                raise ValueError(
                    f"the device store {self.path} belongs to another campaign (template, seed "
                    "or population differ): give another folder"
                )
            found = db.execute("SELECT value FROM meta WHERE key = 'campaign'").fetchone()
        return None if found is None else str(found[0])

    def set_campaign(self, campaign_id: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('campaign', ?)", (campaign_id,))

    def ledger(
        self,
        n: int,
        budget: DeviceBudget | None,
        rule: ChargeRule | None = None,
        *,
        without: int | None = None,
    ) -> DeviceLedger:
        """The devices' ledger from the stored charges (all but occurrence ``without``'s), by
        ``rule`` (basic composition by default). A row written before charge rules (no declared
        ε) was charged its declared ε, by both rules."""
        rows = self._db.execute(
            "SELECT occurrence, day, slot, epsilon, declared, state, bound FROM spends "
            "ORDER BY occurrence, slot"
        ).fetchall()
        by: dict[int, list[tuple[float, int, float, float, int, float]]] = {}
        for occurrence, day, slot, eps, declared, state, bound in rows:
            if occurrence != without:
                by.setdefault(int(occurrence), []).append(
                    (
                        float(day),
                        int(slot),
                        float(eps),
                        float(eps if declared is None else declared),
                        NO_STATE if state is None else int(state),
                        float(eps if bound is None else bound),
                    )
                )
        spends = [
            Spend(
                occurrence,
                charges[0][0],
                np.array([c[1] for c in charges], dtype=np.int64),
                np.array([c[2] for c in charges], dtype=np.float64),
                np.array([c[3] for c in charges], dtype=np.float64),
                np.array([c[4] for c in charges], dtype=np.int64),
                np.array([c[5] for c in charges], dtype=np.float64),
            )
            for occurrence, charges in sorted(by.items())
        ]
        return DeviceLedger(n, budget, rule or basic_rule(), spends)

    def charge(self, spend: Spend) -> None:
        """Record the devices' charges of one occurrence (``DeviceLedger.record``'s spend): each
        device's own charge, the ε it declared, its memoized state and the server's charge
        (once: charges already stored stay)."""
        with self._tx() as db:
            db.executemany(
                "INSERT OR IGNORE INTO spends VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (spend.occurrence, int(s), spend.day, float(e), float(d), int(st), float(b))
                    for s, e, d, st, b in zip(
                        spend.slots,
                        spend.epsilon,
                        spend.declared,
                        spend.states,
                        spend.bound,
                        strict=True,
                    )
                ],
            )

    def charges_of(self, slot: int) -> dict[int, tuple[float, int]]:
        """Device ``slot``'s own charges: occurrence → (ε charged, memoized state, −1 for
        none)."""
        rows = self._db.execute(
            "SELECT occurrence, epsilon, state FROM spends WHERE slot = ? ORDER BY occurrence",
            (slot,),
        ).fetchall()
        return {int(o): (float(e), NO_STATE if st is None else int(st)) for o, e, st in rows}

    def finish(self, occurrence: StoredOccurrence) -> None:
        """Record a finished occurrence."""
        index, day, study, enrolled, refused, estimate, truth = occurrence
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO occurrences VALUES (?, ?, ?, ?, ?, ?, ?)",
                (index, day, study, enrolled, refused, json.dumps(estimate), json.dumps(truth)),
            )

    def finished(self) -> list[StoredOccurrence]:
        """The finished occurrences, in order."""
        rows = self._db.execute("SELECT * FROM occurrences ORDER BY idx").fetchall()
        return [
            (int(i), float(d), s, int(e), int(r), json.loads(est), json.loads(t))
            for i, d, s, e, r, est, t in rows
        ]

"""The trials CSV: one row per trial, appended and flushed as each trial finishes.

Columns: ``point`` (the trial's grid point, in the experiment's order), ``key`` (a hash of its
configuration and seed: the resumption key), ``protocol`` and every grid key, ``seed``, then every
key of ``fedldp simulate --json`` flattened with dots (``error_bar.half_width``,
``diagnostics.S``; lists as JSON; ``failed`` 1 and ``failure`` the reason when the protocol
refused the trial), then ``runtime_s`` (the trial's CPU time in its worker). A new column (a
protocol with other diagnostics) rewrites the file with the wider header, atomically (a temporary
file and ``os.replace``); so does ``finish``, which sorts the rows by grid point and seed and
the result columns by name, so the file does not depend on the number of workers or on the
finishing order (its timing columns ``elapsed_s`` and ``runtime_s`` aside). A row cut short
by a killed process is dropped when the file is read again.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedldp.client.experiments.spec import cell

__all__ = ["TIMING_COLUMNS", "TrialsCsv", "flatten", "read_rows"]

TIMING_COLUMNS = ("elapsed_s", "runtime_s")
"""Columns that measure time: the only ones that differ between two runs of one experiment."""


def flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested JSON object as {dotted key: CSV cell}; None becomes an empty cell."""
    out: dict[str, str] = {}
    for k, v in value.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{name}."))
        elif v is None:
            out[name] = ""
        elif isinstance(v, float):
            out[name] = repr(v)
        else:
            out[name] = cell(v) if not isinstance(v, list) else json.dumps(v)
    return out


def read_rows(path: Path) -> list[dict[str, str]]:
    """The complete rows of a trials CSV, by grid point and seed (a torn last line left out)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None:
        return []
    rows = [dict(zip(header, r, strict=True)) for r in reader if len(r) == len(header)]
    return sorted(rows, key=_order)


def _order(row: Mapping[str, str]) -> tuple[int, int]:
    return int(row["point"]), int(row["seed"])


class TrialsCsv:
    """The trials CSV of one run directory: known rows, and appending new ones."""

    def __init__(self, path: Path, config_columns: list[str]) -> None:
        self.path = path
        self.fixed = ["point", "key", *config_columns, "seed"]
        self.rows = {r["key"]: r for r in read_rows(path)}
        self.header = self._header(self.rows.values())
        # rewrite what was read: drops a torn line and settles the header
        self._rewrite()

    def _header(self, rows: Any) -> list[str]:
        rest: set[str] = set()
        for r in rows:
            rest.update(k for k in r if k not in self.fixed and k != "runtime_s")
        return [*self.fixed, *sorted(rest), "runtime_s"]

    def _rewrite(self) -> None:
        tmp = self.path.with_suffix(".csv.tmp")
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, self.header, restval="", lineterminator="\n")
            writer.writeheader()
            for row in sorted(self.rows.values(), key=_order):
                writer.writerow(row)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def __contains__(self, key: str) -> bool:
        return key in self.rows

    def append(self, row: dict[str, str]) -> None:
        """Add one finished trial's row, flushed to disk before returning."""
        self.rows[row["key"]] = row
        if not set(row) <= set(self.header):
            self.header = self._header(self.rows.values())
            self._rewrite()
            return
        with self.path.open("a", newline="") as f:
            csv.DictWriter(f, self.header, restval="", lineterminator="\n").writerow(row)
            f.flush()
            os.fsync(f.fileno())

    def finish(self) -> None:
        """Rewrite the file in its canonical order (rows by trial, result columns by name)."""
        self.header = self._header(self.rows.values())
        self._rewrite()

"""CSV populations: ``read_table`` loads the file a ``PopulationSpec`` names (``--csv``) as rows of
user id, value (one column, or several for vectors) and an optional per-user ε, grouping rows by
user in order of first appearance, and checks that a user's ε column holds one value.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedldp.client.population.spec import PopulationSpec
from fedldp.protocol.core.base.records import FloatArray, IntArray

__all__ = ["Table", "read_table"]


@dataclass(frozen=True)
class Table:
    """A CSV population: samples user after user (users in order of first appearance)."""

    user_ids: list[str]
    values: NDArray[Any]
    offsets: IntArray
    epsilon: FloatArray | None


def _column(rows: list[dict[str, str]], name: str, path: Path, header: list[str]) -> list[str]:
    if name not in header:
        raise ValueError(f"{path} has no column {name!r} (columns: {', '.join(header)})")
    return [r[name] for r in rows]


def _floats(cells: list[str], name: str, path: Path) -> FloatArray:
    out = np.empty(len(cells), dtype=np.float64)
    for row, cell in enumerate(cells):
        try:
            out[row] = float(cell)
        except ValueError:
            raise ValueError(f"{path} row {row + 2}: {name} {cell!r} is not a number") from None
        if not math.isfinite(out[row]):
            raise ValueError(f"{path} row {row + 2}: {name} {cell!r} is not finite")
    return out


def read_table(spec: PopulationSpec) -> Table:
    """Read ``spec.csv``; ValueError naming the file, row and column of any bad cell."""
    assert spec.csv is not None
    path = spec.csv
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            rows = list(reader)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from None
    if not rows:
        raise ValueError(f"{path} has no data rows")
    ids = _column(rows, spec.user_column, path, header)
    order: dict[str, int] = {}
    codes = np.array([order.setdefault(u, len(order)) for u in ids], dtype=np.int64)
    perm = np.argsort(codes, kind="stable")
    offsets = np.searchsorted(codes[perm], np.arange(len(order) + 1)).astype(np.int64)
    names = [c.strip() for c in spec.value_column.split(",")]
    cols = [_floats(_column(rows, c, path, header), c, path) for c in names]
    values: NDArray[Any] = cols[0] if len(cols) == 1 else np.stack(cols, axis=1)
    if spec.items is not None:
        v = cols[0]
        bad = np.flatnonzero((v != np.round(v)) | (v < 0) | (v >= spec.items))
        if len(cols) != 1 or bad.size:
            row = int(bad[0]) + 2 if bad.size else 2
            raise ValueError(
                f"{path} row {row}: categorical values must be one column of integers "
                f"0..{spec.items - 1}"
            )
        values = v.astype(np.int64)
    eps = None
    if spec.epsilon_column is not None:
        per_row = _floats(
            _column(rows, spec.epsilon_column, path, header), spec.epsilon_column, path
        )[perm]
        eps = per_row[offsets[:-1]]
        lo = np.minimum.reduceat(per_row, offsets[:-1])
        hi = np.maximum.reduceat(per_row, offsets[:-1])
        mixed = np.flatnonzero(lo != hi)
        if mixed.size:
            user = list(order)[int(mixed[0])]
            raise ValueError(f"user {user!r} has several values in column {spec.epsilon_column!r}")
    return Table(list(order), values[perm], offsets, eps)

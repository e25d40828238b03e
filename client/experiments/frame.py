"""An experiment's trials as a pandas DataFrame, and an experiment file run from Python: the
notebook side of ``fedldp experiment run`` (``fedldp.experiments`` names both).

The trials CSV (``fedldp.client.experiments.results``) holds text; ``load`` gives each column the
type its cells share: integers (``Int64``, which keeps a missing cell), other numbers
(``float64``, a missing cell NaN), true/false (``boolean``; ``failed`` too), JSON lists (Python
lists) and text (``string``). Needs the ``notebook`` extra (pandas).
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedldp.client.experiments.loading import load_experiment
from fedldp.client.experiments.results import read_rows
from fedldp.client.experiments.runner import run_experiment
from fedldp.client.frames import pandas, records_frame

__all__ = ["column_type", "load", "run"]

_INTEGER = re.compile(r"[+-]?\d+")
_BOOLEAN = {"true": True, "false": False}
_FLAGS = ("failed",)
"""Columns written as 0/1 that are flags."""


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def column_type(cells: Sequence[str]) -> str:
    """The type of a CSV column from its non-empty cells: "int", "float", "bool", "list" or
    "string" (a column of empty cells only is "float": all missing)."""
    full = [c for c in cells if c != ""]
    if all(_INTEGER.fullmatch(c) for c in full) and full:
        return "int"
    if all(_number(c) for c in full):
        return "float"
    if all(c.lower() in _BOOLEAN for c in full):
        return "bool"
    if all(c.startswith("[") and c.endswith("]") for c in full):
        return "list"
    return "string"


def _trials_csv(path: str | Path) -> Path:
    path = Path(path)
    found = path / "trials.csv" if path.is_dir() else path
    if not found.is_file():
        raise FileNotFoundError(f"no trials CSV at {found} (give a run directory or its CSV)")
    return found


def load(path: str | Path) -> Any:
    """The trials of an experiment run as a DataFrame, one row per trial in the CSV's order (by
    grid point, then seed), its columns typed (module docstring). ``path``: the run directory
    (``fedldp experiment run FILE --out DIR``) or its ``trials.csv``.

    >>> import tempfile
    >>> import fedldp.experiments
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "trials.csv").write_text(
    ...     "point,key,protocol,seed,error,failed,failure,runtime_s\\n"
    ...     "0,a1,user-mean,1,0.012,0,,0.5\\n"
    ...     "0,b2,user-mean,2,,1,infeasible plan,0.1\\n"
    ... )
    >>> trials = fedldp.experiments.load(folder)
    >>> trials.dtypes.astype(str).to_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'point': 'int64', 'key': 'string', 'protocol': 'string', 'seed': 'int64',
     'error': 'float64', 'failed': 'boolean', 'failure': 'string', 'runtime_s': 'float64'}
    >>> float(trials["error"].mean()), int(trials["failed"].sum())
    (0.012, 1)
    """
    found = _trials_csv(path)
    with found.open(newline="") as f:
        header = next(csv.reader(f), [])
    rows = read_rows(found)
    frame = records_frame(rows, header)
    pd = pandas()
    for name in header:
        cells = [r[name] for r in rows]
        kind = column_type(cells)
        if name in _FLAGS and kind == "int":
            frame[name] = pd.array([None if c == "" else c != "0" for c in cells], "boolean")
        elif kind == "int":
            missing = any(c == "" for c in cells)
            frame[name] = pd.array([None if c == "" else int(c) for c in cells], "Int64")
            if not missing:
                frame[name] = frame[name].astype("int64")
        elif kind == "float":
            frame[name] = pd.to_numeric(frame[name].replace("", None), errors="raise").astype(
                "float64"
            )
        elif kind == "bool":
            values = [None if c == "" else _BOOLEAN[c.lower()] for c in cells]
            frame[name] = pd.array(values, "boolean")
        elif kind == "list":
            frame[name] = pd.Series(
                [None if c == "" else json.loads(c) for c in cells], dtype=object
            )
        else:
            frame[name] = pd.array([None if c == "" else c for c in cells], "string")
    return frame


def run(
    experiment: str | Path,
    out: str | Path,
    *,
    scale: str = "quick",
    jobs: int = 1,
    progress: bool | None = False,
) -> Any:
    """Run the experiment file ``experiment`` (YAML, ``fedldp experiment run``) at ``scale``
    into the directory ``out`` (resumable: trials already in ``out/trials.csv`` are skipped)
    and return its trials as ``load(out)`` does. ``jobs`` worker processes run the trials
    (1: this process)."""
    run_experiment(
        load_experiment(Path(experiment), scale), Path(out), jobs=jobs, progress=progress
    )
    return load(out)

"""pandas DataFrames of fedldp's results, for notebooks: the ``to_frame()`` of a simulation
(``fedldp.client.simulate.SimulationResult``), of a swarm run (``fedldp.client.swarm.run.
SwarmResult``) and of the API client's views (``fedldp.client.api.views``).

pandas is not a dependency of fedldp: it comes with the ``notebook`` extra (``pip install
'fedldp[notebook]'``) and is imported only when a frame is asked for, so a missing pandas is
a ``MissingExtra`` naming that extra (``fedldp.client.extras``), at that call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedldp.client.extras import optional_import

__all__ = ["RUN_SECTIONS", "pandas", "records_frame", "run_frame"]

RUN_SECTIONS = ("params", "error_bar", "epsilon_spent")
"""The nested objects of a run summary that ``run_frame`` flattens into dotted columns
(``error_bar.half_width``, ``epsilon_spent.max``, ``params.samples_per_user``); the others
(``diagnostics``, ``population``, ``warnings``) stay in ``to_dict()``."""


def pandas() -> Any:
    """The pandas module; ``MissingExtra`` (an ImportError) when it is not installed."""
    return optional_import("pandas", "notebook")


def records_frame(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> Any:
    """A DataFrame of ``rows`` with exactly ``columns``, in that order (an empty frame keeps
    them)."""
    return pandas().DataFrame.from_records(list(rows), columns=list(columns))


def _flat(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The scalar fields of ``summary`` and the scalar fields of its ``RUN_SECTIONS``, dotted."""
    out: dict[str, Any] = {}
    for key, value in summary.items():
        if key in ("estimate", "truth"):
            continue
        if key in RUN_SECTIONS:  # a missing section (no error bar) adds no column
            for name, inner in (value or {}).items():
                out[f"{key}.{name}"] = inner if np.ndim(inner) == 0 else list(inner)
        elif value is None or isinstance(value, str | int | float | bool):
            out[key] = value
    return out


def run_frame(summary: Mapping[str, Any]) -> Any:
    """One run's summary (``fedldp simulate --json``, ``fedldp swarm --json`` or a server's
    result view) as a DataFrame: one row for a scalar estimate; for a vector or a distribution,
    one row per coordinate, numbered in a ``coordinate`` column. Columns: ``estimate`` and
    ``truth`` (when known), then the summary's scalar fields (``protocol``, ``n``, ``seed``,
    ``error``, ``study_id``, ...) and those of ``RUN_SECTIONS``, repeated on every row, so that
    the frames of several runs stack with ``pandas.concat``.

    >>> summary = {"estimate": [0.1, 0.7], "truth": [0.0, 0.8], "protocol": "user-mean-l2",
    ...            "n": 500, "error_bar": {"half_width": 0.4, "norm": "l2"}, "warnings": []}
    >>> run_frame(summary).to_dict("list")  # doctest: +NORMALIZE_WHITESPACE
    {'coordinate': [0, 1], 'estimate': [0.1, 0.7], 'truth': [0.0, 0.8],
     'protocol': ['user-mean-l2', 'user-mean-l2'], 'n': [500, 500],
     'error_bar.half_width': [0.4, 0.4], 'error_bar.norm': ['l2', 'l2']}
    """
    estimate = summary.get("estimate")
    truth = summary.get("truth")
    base = _flat(summary)
    if estimate is None or np.ndim(estimate) == 0:
        row = {"estimate": estimate, **({"truth": truth} if "truth" in summary else {}), **base}
        return records_frame([row], list(row))
    values = np.asarray(estimate, dtype=np.float64).reshape(-1)
    truths = None if truth is None else np.asarray(truth, dtype=np.float64).reshape(-1)
    rows = []
    for i, value in enumerate(values.tolist()):
        row = {"coordinate": i, "estimate": value}
        if "truth" in summary:
            row["truth"] = None if truths is None else float(truths[i])
        rows.append({**row, **base})
    return records_frame(rows, list(rows[0]))

"""The result summary of a run, whatever produced it: ``fedldp simulate --json`` (in process)
and ``fedldp swarm --json`` (over HTTP) print the same object, built here by ``result_summary``
(``fedldp.client.cli.output`` renders it as a table); the swarm adds its ``study_id``. The error
is measured in the error bar's norm when there is one (``ErrorBar.norm``), else |θ̂ − θ| for
scalars, ℓ2 for vectors and ℓ∞ for distributions (docs/specs/heterogeneous-ldp.md §1.2 table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedldp.protocol.core.base.records import JSON, jsonable

__all__ = ["estimation_error", "plain", "result_summary"]


def plain(value: float | Sequence[float] | NDArray[Any] | None) -> float | list[float] | None:
    """A scalar or vector estimate (or truth) as a float or a list of floats (None stays)."""
    if value is None:
        return None
    array = np.asarray(value, dtype=np.float64)
    return float(array) if array.ndim == 0 else array.tolist()


def estimation_error(
    estimate: float | Sequence[float] | NDArray[Any] | None,
    truth: float | Sequence[float] | NDArray[Any] | None,
    norm: str,
) -> float | None:
    """‖estimate − truth‖ in ``norm`` ("abs", "l2" or "linf"); None if either is missing."""
    if estimate is None or truth is None:
        return None
    diff = np.asarray(estimate, dtype=np.float64) - np.asarray(truth, dtype=np.float64)
    if norm == "linf":
        return float(np.max(np.abs(diff)))
    if norm in ("l2", "abs"):
        return float(np.sqrt(np.sum(diff * diff)))
    raise ValueError(f"unknown error norm {norm!r}")


def _default_norm(estimate: Any, data_kind: str | None) -> str:
    if data_kind == "categorical":
        return "linf"
    return "abs" if np.ndim(estimate) == 0 else "l2"


def result_summary(
    *,
    protocol: str,
    params: Mapping[str, Any],
    n: int,
    seed: int | None,
    estimate: float | Sequence[float] | NDArray[Any] | None,
    truth: float | Sequence[float] | NDArray[Any] | None,
    error_bar: Mapping[str, Any] | None,
    charges: NDArray[Any],
    diagnostics: Mapping[str, Any] | None = None,
    warnings: Sequence[str] = (),
    elapsed_s: float | None = None,
    data_kind: str | None = None,
) -> JSON:
    """One JSON-ready object: protocol, params, n, seed, estimate, truth, error, error_bar,
    epsilon_spent {participants, charged, max, median, mean} (over every participant's total
    charge), diagnostics, warnings, elapsed_s."""
    norm = str(error_bar["norm"]) if error_bar and "norm" in error_bar else None
    norm = norm or _default_norm(estimate, data_kind)
    c = np.asarray(charges, dtype=np.float64).reshape(-1)
    spent = {
        "participants": int(c.size),
        "charged": int(np.count_nonzero(c > 0)),
        "max": float(c.max()) if c.size else 0.0,
        "median": float(np.median(c)) if c.size else 0.0,
        "mean": float(c.mean()) if c.size else 0.0,
    }
    summary: JSON = {
        "protocol": protocol,
        "params": dict(params),
        "n": int(n),
        "seed": seed,
        "estimate": estimate,
        "truth": truth,
        "error": estimation_error(estimate, truth, norm),
        "error_norm": norm,
        "error_bar": None if error_bar is None else dict(error_bar),
        "epsilon_spent": spent,
        "diagnostics": dict(diagnostics or {}),
        "warnings": list(warnings),
        "elapsed_s": elapsed_s,
    }
    out: JSON = jsonable(summary)
    return out

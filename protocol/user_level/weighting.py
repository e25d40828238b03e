"""How the scalar protocols of Zhao et al. 2024 (arXiv:2405.17079, user-level-ldp.md) pool their
users, shared by the two-stage mean (``fedldp.protocol.user_level.means``) and the §3.10 baselines
(``fedldp.protocol.user_level.baselines``): each user keeps its first m samples (§1.1), a plan
validates the ε's it charges, and unequal ε's are combined with inverse-variance weights
(user-level-ldp.md §8 [PROPOSAL], non-paper), which reduce to the paper's plain means when every
ε_i is equal; the result carries the CLT error bar of that weighted mean.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedldp.protocol.api import (
    JSON,
    ErrorBar,
    FloatArray,
    ReportChunk,
    UserData,
    check_epsilons,
    z_quantile,
)

__all__ = [
    "MAX_SAMPLES_PER_USER",
    "clt_error_bar",
    "inverse_variance_mse",
    "plan_epsilons",
    "user_samples",
    "weighted_mean",
]

MAX_SAMPLES_PER_USER = 10**6
"""Most samples a user may contribute: beyond it a study cannot run (every user would hold and
privatize millions of samples per report)."""


def user_samples(data: UserData, m: int) -> FloatArray:
    """The users' first m samples as an (n, m) matrix (§1.1); ValueError if a user has fewer."""
    values = np.asarray(data.values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"scalar data expected, got samples of shape {values.shape[1:]}")
    short = data.counts < m
    if np.any(short):
        raise ValueError(
            f"every user needs samples_per_user = {m} samples; "
            f"{int(short.sum())} user(s) hold fewer (e.g. {int(data.counts[short][0])})"
        )
    kept = data.truncated(m)
    return np.asarray(kept.values, dtype=np.float64).reshape(kept.n_users, m)


def inverse_variance_mse(variances: NDArray[Any]) -> float:
    """Variance 1/Σ_i (1/V_i) of the inverse-variance weighted mean (V/n for equal V_i)."""
    v = np.asarray(variances, dtype=np.float64)
    return float(1.0 / np.sum(1.0 / v))


def plan_epsilons(epsilon: FloatArray, minimum: int) -> FloatArray:
    eps = check_epsilons(epsilon)
    if eps.ndim != 1 or eps.size < minimum:
        raise ValueError(f"this protocol needs at least {minimum} participants, got {eps.size}")
    return eps


def weighted_mean(
    chunks: Iterable[ReportChunk],
    variances: Callable[[FloatArray], FloatArray],
    normaliser: float,
) -> JSON:
    """Streamed weighted mean of scalar reports with weights (1/V_i)/normaliser.

    ``variances(eps)`` gives each reporter's variance; the normaliser (Σ 1/V over the planned
    cohort) makes the planned weights sum to 1; missing reports renormalize (DESIGN "Flow").
    """
    sum_w = sum_wz = sum_w2v = 0.0
    count = 0
    for chunk in chunks:
        v = np.asarray(variances(chunk.epsilon), dtype=np.float64)
        w = (1.0 / v) / normaliser
        z = np.asarray(chunk.payloads, dtype=np.float64).reshape(-1)
        sum_w += float(w.sum())
        sum_wz += float(w @ z)
        sum_w2v += float((w * w * v).sum())
        count += int(z.shape[0])
    if count == 0:
        raise ValueError("no reports to aggregate in this round")
    return {
        "estimate": sum_wz / sum_w,
        "predicted_mse": sum_w2v / sum_w**2,
        "weight_sum": sum_w,
        "n_reports": count,
    }


def clt_error_bar(mse: float, level: float) -> ErrorBar:
    return ErrorBar(z_quantile(level) * math.sqrt(mse), level, "clt", approximate=True)

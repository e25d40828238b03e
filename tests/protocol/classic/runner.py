"""Running a classic frequency oracle in process on a fixed population, and the theory the
statistical tests take their tolerances from."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedldp.protocol.api import JSON, FloatArray, IntArray, ReportChunk, RoundTask, UserData
from fedldp.protocol.classic import oracles as th
from fedldp.protocol.classic.frequency import ClassicFrequency
from fedldp.protocol.classic.frequency_oracles import PROTOCOLS

ORACLES: dict[str, ClassicFrequency] = {
    p.oracle: p for p in PROTOCOLS if isinstance(p, ClassicFrequency)
}

COVARIANCE_BOUND: dict[str, float] = {
    "grr": 1.0,  # Cov(b) = diag(π) − ππᵀ ⪯ diag(π): λ_max ≤ max π ≤ 1 (one item reported)
    "sue": 0.25,  # independent bits: Cov(b) diagonal, each ≤ 1/4
    "oue": 0.25,
    "blh": 0.25,  # the hash family is 3-wise independent on (x, x', v): bits uncorrelated
    "olh": 0.25,
    "hr": 0.5,  # b = (1 + h)/2, E[hhᵀ] ⪯ 2p·I (P(y) ≤ 2p/K, Hadamard rows orthogonal)
    "ss": 0.5,  # Σ_x b_x = d: Gershgorin with non-positive covariances, 2·max Var(b_x)
}
"""Λ with λ_max(Cov(b)) ≤ Λ for one report's support indicators b (per mechanism): the largest
eigenvalue of the estimate's covariance is then at most Σ_i w_i²Λ/(p_i − q_i)² / (Σ w_i)²."""


def zipf_items(k: int, n: int, seed: int) -> IntArray:
    """n items of 0..k−1 drawn from Zipf(1) (a fixed population for the tests)."""
    law = 1.0 / np.arange(1, k + 1)
    rng = np.random.default_rng(seed)
    return np.asarray(rng.choice(k, size=n, p=law / law.sum()), dtype=np.int64)


def frequencies(items: IntArray, k: int) -> FloatArray:
    return np.asarray(np.bincount(items, minlength=k) / items.size, dtype=np.float64)


def reports(
    oracle: str,
    k: int,
    items: IntArray,
    eps: FloatArray,
    rng: Any,
    weights: str = "inverse-variance",
) -> tuple[ClassicFrequency, Any, Any, RoundTask, FloatArray]:
    protocol = ORACLES[oracle]
    params = protocol.parse_params({"domain_size": k, "weights": weights})
    plan = protocol.plan(params, eps, {}, 0)
    task = RoundTask.of(plan.rounds[0], protocol.broadcast(params, plan, 0, []))
    data = UserData(items, np.ones(items.size, dtype=np.int64))
    group = np.zeros(items.size, dtype=np.int64)
    payloads = protocol.privatize(params, task, data, eps, group, rng)
    return protocol, params, plan, task, payloads


def run_once(
    oracle: str,
    k: int,
    items: IntArray,
    eps: FloatArray,
    seed: int,
    weights: str = "inverse-variance",
    chunk: int | None = None,
) -> JSON:
    """One study's round output (``frequencies``, ``predicted_mse``, …) on ``items`` at ``eps``,
    the users' randomness from ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    protocol, params, plan, task, payloads = reports(oracle, k, items, eps, rng, weights)
    n = items.size
    step = chunk or n
    group = np.zeros(n, dtype=np.int64)
    assert protocol.check(params, task, eps, payloads).all()
    chunks = [
        ReportChunk(
            np.arange(lo, min(n, lo + step)),
            eps[lo : lo + step],
            group[lo : lo + step],
            payloads[lo : lo + step],
        )
        for lo in range(0, n, step)
    ]
    return protocol.aggregate(params, plan, 0, task.broadcast, chunks)


def mse_tolerance(oracle: str, k: int, eps: FloatArray, predicted: float, seeds: int) -> float:
    """4 standard deviations of the mean over ``seeds`` of ‖f̂ − f‖² (two-sided normal: a false
    failure has probability 6e-5): Var‖e‖² = 2·tr(C²) ≤ 2·tr(C)·λ_max(C) for a Gaussian error of
    covariance C (n ≥ 10^4 reports per estimate: the CLT), tr(C) = ``predicted``, λ_max(C) from
    ``COVARIANCE_BOUND`` (equal weights: Λ/(n(p − q)²) at equal ε)."""
    p, q = th.support_probabilities(oracle, eps, k)  # type: ignore[arg-type]
    w = th.user_weights(p, q, "inverse-variance")
    lam = float(np.sum(w**2 * COVARIANCE_BOUND[oracle] / (p - q) ** 2) / np.sum(w) ** 2)
    return 4.0 * math.sqrt(2.0 * predicted * lam / seeds)


def mi(estimate: FloatArray) -> FloatArray:
    """multi-freq-ldpy's post-processing (``MI``): clip at 0, renormalise to sum 1."""
    clipped = np.clip(estimate, 0.0, None)
    total = clipped.sum()
    return clipped / total if total > 0 else clipped

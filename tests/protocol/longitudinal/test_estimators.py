"""The servers' decoders of the memoizing protocols (protocol/longitudinal/): unbiased, with the
variance their formulas state, memoized or not (one collection has the same law either way).

R independent studies of n users, each a new population of devices (new device secrets: new
PRRs, new α's) and new per-study streams. Tolerances (STYLE: from theory): the mean error of
each coordinate over R studies within z·√(Var/R) of 0, z the two-sided normal quantile at
false-failure probability 10⁻³ Bonferroni-split over the coordinates; the mean total squared
error within z·s/√R of the formula's MSE (CLT over the R studies, s their sample deviation).
Fixed seeds: the outcome is the same on every run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from fedldp.protocol.api import FloatArray, Protocol, z_quantile
from fedldp.protocol.longitudinal.rappor import MemoRappor, report_gap, report_probabilities
from fedldp.protocol.longitudinal.telemetry import (
    MemoDBitFlip,
    MemoOneBitMean,
    alpha_round,
    bitflip_variance,
    one_bit_probability,
    one_bit_scale,
)
from tests.protocol.longitudinal.helpers import collect, estimate, users

R = 300
N = 1000
ALPHA = 1e-3
WEIGHTS = np.array([0.4, 0.3, 0.15, 0.1, 0.05])
ITEMS = np.repeat(np.arange(WEIGHTS.size), (WEIGHTS * N).astype(int))
EPS = np.where(np.arange(N) % 2 == 0, 1.0, 2.0)


def rappor_variance(raw: dict[str, Any]) -> FloatArray:
    q_star, _ = report_probabilities(EPS, raw["f"])
    per_user = q_star * (1 - q_star) / (2 * q_star - 1) ** 2
    return np.full(WEIGHTS.size, per_user.sum() / N**2)


def bitflip_exact(raw: dict[str, Any]) -> FloatArray:
    k, d = raw["domain_size"], raw["buckets"]
    base = bitflip_variance(EPS, k, d).sum()
    counts = np.bincount(ITEMS, minlength=k)
    return np.asarray((base + (k / d - 1) * counts) / N**2)


X = np.linspace(0.0, 2.0, N)  # off-grid and both ends of [0, m]


def one_bit_exact(raw: dict[str, Any]) -> FloatArray:
    m, s, gamma = raw["bound"], raw["levels"], raw.get("flip", 0.0)
    p = gamma + (1 - 2 * gamma) * one_bit_probability(X * s / m, s, EPS)  # P(sent bit = 1)
    scale = m * one_bit_scale(EPS) / (1 - 2 * gamma)
    return np.array([np.sum(scale**2 * p * (1 - p)) / N**2])


CASES: list[tuple[Protocol[Any], dict[str, Any], Any, FloatArray, Callable[..., FloatArray]]] = [
    (MemoRappor(), {"domain_size": 5, "f": 0.5}, ITEMS, np.bincount(ITEMS) / N, rappor_variance),
    (
        MemoDBitFlip(),
        {"domain_size": 5, "buckets": 2},
        ITEMS,
        np.bincount(ITEMS) / N,
        bitflip_exact,
    ),
    (MemoOneBitMean(), {"bound": 2.0, "levels": 4}, X, np.array([X.mean()]), one_bit_exact),
    (
        MemoOneBitMean(),
        {"bound": 2.0, "levels": 4, "flip": 0.2},
        X,
        np.array([X.mean()]),
        one_bit_exact,
    ),
]


@pytest.mark.parametrize("memoize", [True, False])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0].name + "-".join(["", *map(str, c[1])]))
def test_decoder_is_unbiased_with_the_stated_variance(case: Any, memoize: bool) -> None:
    protocol, raw, values, truth, exact = case
    raw = {**raw, "memoize": memoize}
    data = users(values)
    errors, predicted = [], []
    for r in range(R):
        result = estimate(protocol, raw, collect(protocol, raw, data, EPS, r, r), EPS)
        errors.append(np.atleast_1d(np.asarray(result.estimate)) - truth)
        predicted.append(result.diagnostics["predicted_mse"])
    err = np.array(errors)
    var = exact(raw)
    k = truth.size
    z = z_quantile(1 - ALPHA / k)
    assert np.all(np.abs(err.mean(axis=0)) <= z * np.sqrt(var / R)), (err.mean(axis=0), var)
    total = np.sum(err**2, axis=1)
    z1 = z_quantile(1 - ALPHA)
    half = z1 * total.std(ddof=1) / math.sqrt(R)
    assert abs(total.mean() - var.sum()) <= half, (total.mean(), var.sum(), half)
    if protocol.name == "memo-1bitmean":  # the reported MSE is the bound P(1 − P) ≤ 1/4
        assert min(predicted) >= var.sum()
    elif protocol.name == "memo-rappor":  # exact, known to the server
        assert predicted == pytest.approx([var.sum()] * R, rel=1e-12)
    else:  # dBitFlip: the count plugged in by its unbiased estimate
        assert abs(np.mean(predicted) - var.sum()) <= z1 * np.std(predicted) / math.sqrt(R)


def test_rappor_calibration_matches_the_papers_epsilon() -> None:
    from fedldp.protocol.longitudinal.rappor import longitudinal_epsilon, one_shot_epsilon

    f = 0.5
    for eps in (0.5, 1.0, 2.0):
        _, q = report_probabilities(np.array([eps]), f)
        assert one_shot_epsilon(1 - float(q[0]), float(q[0]), f) == pytest.approx(eps)
    assert longitudinal_epsilon(f) == pytest.approx(2 * math.log(3))
    # above ε_∞ the IRR is the identity and the report spends ε_∞
    q_star, q = report_probabilities(np.array([5.0]), f)
    assert q[0] == 1.0
    assert q_star[0] == 1 - f / 2
    assert one_shot_epsilon(0.0, 1.0, f) == pytest.approx(longitudinal_epsilon(f))


@pytest.mark.parametrize("f", [0.5, 0.9, float(np.nextafter(1.0, 0.0))])
def test_rappor_gap_is_two_q_star_minus_one_without_cancellation(f: float) -> None:
    """The de-biasing divisor q* − p* is min(tanh(ε/4), 1 − f) > 0 for every accepted f; at
    f = 1 − 2⁻⁵³, 2q* − 1 rounds to 0 (q* rounds to 1/2) and would divide by zero."""
    eps = np.array([0.1, 1.0, 8.0])
    gap = report_gap(eps, f)
    q_star, _ = report_probabilities(eps, f)
    assert np.all(gap > 0.0)
    assert np.allclose(gap, 2.0 * q_star - 1.0, rtol=0.0, atol=4 * np.finfo(float).eps)


@pytest.mark.parametrize("bound", [1.0, 1e-300, 5e-324])
def test_alpha_rounding_is_finite_at_any_accepted_bound(bound: float) -> None:
    """α-point rounding of values at, inside and outside [0, m] gives grid indices 0..s even at
    a subnormal m (levels/m overflows there, and ∞·0 was NaN)."""
    x = np.array([-1.0, 0.0, bound / 2.0, bound, 3.0])
    grid = alpha_round(x, bound, 4, np.full(5, 0.5))
    assert grid.tolist()[:2] == [0, 0]
    assert grid.tolist()[3:] == [4, 4]
    assert 0 <= grid[2] <= 4

"""Plausibility bounds (protocol/mechanisms/plausibility.py): exact tail probabilities, and honest
Laplace reports are never refused at the 10^-12 threshold."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from fedldp.protocol.mechanisms.plausibility import (
    IMPLAUSIBLE_PROBABILITY,
    LAPLACE_TAIL,
    around,
    gaussian_reach,
    laplace_false_refusal,
    laplace_mean_reach,
    laplace_reach,
)


def test_laplace_reach_has_tail_probability_exactly_the_threshold() -> None:
    b = np.array([0.1, 2.0, 40.0])
    r = laplace_reach(b)
    # P(|Lap(b)| > r) = exp(−r/b)
    np.testing.assert_allclose(np.exp(-r / b), IMPLAUSIBLE_PROBABILITY, rtol=1e-12)
    assert pytest.approx(12 * math.log(10), rel=1e-15) == LAPLACE_TAIL


def test_gaussian_reach_has_tail_probability_exactly_the_threshold() -> None:
    z = float(gaussian_reach(1.0))
    assert 2.0 * special.ndtr(-z) == pytest.approx(IMPLAUSIBLE_PROBABILITY, rel=1e-9)
    assert float(gaussian_reach(3.0)) == pytest.approx(3.0 * z, rel=1e-15)


def test_mean_reach_of_one_draw_is_the_laplace_reach_and_bounds_the_mean() -> None:
    assert float(laplace_mean_reach(2.0, 1)) == pytest.approx(float(laplace_reach(2.0)), rel=1e-9)
    # the mean of m draws has |mean| <= Σ|L_i|/m ~ Gamma(m, b)/m: its reach has that tail exactly
    m, b = 16, 0.5
    r = float(laplace_mean_reach(b, m))
    assert stats.gamma.sf(r * m / b, m) == pytest.approx(IMPLAUSIBLE_PROBABILITY, rel=1e-6)
    assert r < float(laplace_reach(b))  # averaging shrinks the reach


def test_false_refusal_is_exact_and_at_most_the_threshold() -> None:
    lo, hi, b = -1.0, 1.0, 2.0
    x = np.array([lo, 0.0, hi])
    p = laplace_false_refusal(x, lo, hi, b)
    r = LAPLACE_TAIL * b
    # at x = hi: P(noise > r) + P(noise < −(r + 2)) = ½e^{−r/b} + ½e^{−(r+2)/b}
    edge = 0.5 * math.exp(-r / b) + 0.5 * math.exp(-(r + hi - lo) / b)
    assert p[2] == pytest.approx(edge, rel=1e-12)
    assert p[0] == pytest.approx(edge, rel=1e-12)
    assert p[1] == pytest.approx(math.exp(-r / b - 1.0 / b), rel=1e-12)
    assert np.all(p <= IMPLAUSIBLE_PROBABILITY)
    with pytest.raises(ValueError, match="x must lie"):
        laplace_false_refusal(2.0, lo, hi, b)


def test_honest_reports_are_never_refused_in_ten_million_draws() -> None:
    # The worst case: x at the top of [lo, hi]. Each draw is refused with probability
    # p = laplace_false_refusal(hi) <= 1e-12, so one or more refusals in 10^7 draws has
    # probability <= 10^7·p <= 1e-5 (the false-failure probability of this test).
    lo, hi, b, n = -1.0, 1.0, 2.0 / 0.5, 10_000_000
    low, high = around(lo, hi, laplace_reach(np.array([b])), 0)
    p = float(laplace_false_refusal(hi, lo, hi, b))
    assert n * p <= 1e-5
    rng = np.random.default_rng(20261125)
    refused = 0
    for _ in range(4):
        y = hi + rng.laplace(0.0, b, n // 4)
        refused += int(np.count_nonzero((y < low[0]) | (y > high[0])))
    assert refused == 0

"""The marginal audit (protocol/mechanisms/marginal_audit.py) on reports of known law.

Every audit holds at confidence 0.999 (an ε-LDP report gives ``lower`` > ε with probability at
most 0.001; fixed seeds make each outcome deterministic). The failing cases leak 2ε or more on
events of probability ≥ 0.1, where 20 000 draws put the Clopper–Pearson lower bound within 0.1 of
the true loss (module docstring): far above the claimed ε.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from fedldp.protocol.core.base.records import FloatArray
from fedldp.protocol.mechanisms.marginal_audit import (
    COORDINATES,
    DRAWS,
    PILOT,
    MarginalAudit,
    audit_marginals,
)
from fedldp.protocol.mechanisms.randomizers import laplace_scale

EPSILON = 1.0


def bits(rng: np.random.Generator, n: int, epsilon: float, bit: int) -> FloatArray:
    """Binary randomized response of ``bit`` at ``epsilon``: its loss is exactly ε."""
    keep = rng.random(n) < math.exp(epsilon) / (1.0 + math.exp(epsilon))
    return np.where(keep, bit, 1 - bit).astype(np.float64)


Draw = Callable[[np.random.Generator, int, int], FloatArray]
"""``draw(rng, n, which)``: n reports on dataset ``which`` (0: A, 1: B), one per row."""


def audit(draw: Draw, seed: int) -> MarginalAudit:
    rng = np.random.default_rng(seed)
    pilot_a, pilot_b = draw(rng, PILOT, 0), draw(rng, PILOT, 1)
    return audit_marginals(pilot_a, pilot_b, draw(rng, DRAWS, 0), draw(rng, DRAWS, 1), EPSILON)


@pytest.mark.parametrize("factor", [1.0, 2.0])
def test_randomized_response_is_audited_at_its_epsilon(factor: float) -> None:
    found = audit(lambda rng, n, w: bits(rng, n, factor * EPSILON, w)[:, None], seed=1)
    assert found.target == "coordinate 0", found
    assert found.event in {"= 0", "= 1"}, found
    assert found.events == 3  # two values and "another value"
    if factor == 1.0:
        assert found.lower <= EPSILON <= found.upper, found
    else:
        assert found.lower > EPSILON, found


@pytest.mark.parametrize("factor", [1.0, 2.0])
def test_a_laplace_coordinate_is_audited_at_thresholds(factor: float) -> None:
    # noiseless values 0 and 1 (sensitivity 1); the loss of "> t" is ε·factor for t >= 1
    scale = laplace_scale(1.0, factor * EPSILON)
    found = audit(lambda rng, n, w: (w + rng.laplace(0.0, scale, n))[:, None], seed=2)
    assert found.event.startswith(("≤", ">")), found
    if factor == 1.0:
        assert found.lower <= EPSILON, found
    else:
        assert found.lower > EPSILON, found


def test_a_leak_only_the_whole_report_shows_is_caught() -> None:
    # two uniform ±1 entries whose product is the dataset's bit at 2ε: each marginal is the
    # same uniform law under A and B, the whole report is 2ε apart
    def draw(rng: np.random.Generator, n: int, w: int) -> FloatArray:
        first = rng.choice([-1.0, 1.0], n)
        return np.column_stack([first, first * (2.0 * bits(rng, n, 2 * EPSILON, w) - 1.0)])

    found = audit(draw, seed=3)
    assert found.target == "the whole report", found
    assert found.lower > EPSILON, found


def test_a_wide_report_is_audited_on_the_coordinates_the_pilot_finds_apart() -> None:
    width, leaking = 3 * COORDINATES, 2 * COORDINATES + 1

    def draw(rng: np.random.Generator, n: int, w: int) -> FloatArray:
        out = rng.normal(size=(n, width))
        out[:, leaking] = bits(rng, n, 3 * EPSILON, w)
        return out

    found = audit(draw, seed=4)
    assert found.coordinates == COORDINATES
    assert found.width == width
    assert found.target == f"coordinate {leaking}", found
    assert found.lower > EPSILON, found


def test_equal_laws_are_not_told_apart() -> None:
    found = audit(lambda rng, n, w: rng.normal(size=(n, 5)), seed=5)
    assert found.lower <= 0.0 <= found.upper, found


def test_bad_reports_are_refused() -> None:
    z = np.zeros((10, 2))
    with pytest.raises(ValueError, match="finite"):
        audit_marginals(z, z, z, np.full((10, 2), np.nan), EPSILON)
    with pytest.raises(ValueError, match="equally many"):
        audit_marginals(z, z, z, z[:5], EPSILON)
    with pytest.raises(ValueError, match="epsilon"):
        audit_marginals(z, z, z, z, 0.0)

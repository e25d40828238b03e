"""The empirical privacy audit (user-level-ldp.md §4.2 TP3): Clopper–Pearson bounds, exact
atoms of the Laplace loss statistic, and the audit's two sides on mechanisms whose loss is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedldp.protocol.mechanisms.audit import (
    AuditCase,
    audit_samples,
    clopper_pearson,
    laplace_loss_statistic,
    run_audit,
)


def test_clopper_pearson_bounds_are_the_beta_quantiles_and_cover_the_ends() -> None:
    lo, hi = clopper_pearson([0, 3, 10], 10, 0.025)
    assert lo[0] == 0.0
    assert hi[2] == 1.0
    assert lo[1] == pytest.approx(stats.beta.ppf(0.025, 3, 8))
    assert hi[1] == pytest.approx(stats.beta.ppf(0.975, 4, 7))
    assert lo[1] < 0.3 < hi[1]
    with pytest.raises(ValueError, match="counts"):
        clopper_pearson([11], 10, 0.05)
    with pytest.raises(ValueError, match="alpha"):
        clopper_pearson([1], 10, 1.5)


def test_the_loss_statistic_is_exact_at_its_atoms() -> None:
    # z beyond either end of [v_A, v_B] gives exactly ±|v_B − v_A| (no rounding cloud)
    z = np.array([[-7.3], [0.125 + 1e-9], [9.9], [0.7]])
    t = laplace_loss_statistic(z, [0.125], [0.95])
    assert t[0] == 0.95 - 0.125
    assert t[2] == -(0.95 - 0.125)
    assert t[3] == pytest.approx(0.95 + 0.125 - 2 * 0.7)
    # one-hot messages: coordinates where v_A = v_B add exactly 0
    z2 = np.array([[5.0, -3.0, -0.5], [-4.0, 0.1, 7.0]])
    t2 = laplace_loss_statistic(z2, [1, 0, 0], [0, 0, 1])
    assert t2.tolist() == [2.0, -2.0]


def _laplace(scale: float) -> AuditCase:
    def draw(eps: float, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        za = rng.laplace(0.0, scale / eps, size=(n, 1))
        zb = 1.0 + rng.laplace(0.0, scale / eps, size=(n, 1))
        return laplace_loss_statistic(za, [0.0], [1.0]), laplace_loss_statistic(zb, [0.0], [1.0])

    return AuditCase("laplace", "sensitivity 1, noise scale·1/ε", draw)


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_an_exact_laplace_mechanism_passes_and_reaches_epsilon(eps: float) -> None:
    # joint confidence 0.999: the lower bound exceeds ε with probability <= 0.001
    audit = run_audit(_laplace(1.0), eps, draws=200_000, rng=np.random.default_rng(1))
    assert audit.lower <= eps <= audit.upper
    assert audit.loss == pytest.approx(eps, abs=0.1)  # a tail bin: ratio exactly e^ε
    assert audit.draws == 200_000


def test_too_little_noise_is_caught_and_too_much_misses_epsilon() -> None:
    rng = np.random.default_rng(2)
    control = run_audit(_laplace(1.0), 1.0, draws=200_000, rng=rng, noise=0.5)
    assert control.lower > 1.0  # a 2ε randomizer claimed as ε: caught (TP3 negative control)
    loose = run_audit(_laplace(2.0), 1.0, draws=200_000, rng=rng)
    assert loose.upper < 1.0  # loss ε/2: the tightness half fails


def test_an_event_only_one_input_produces_is_infinite_loss() -> None:
    audit = audit_samples(np.zeros(1000), np.ones(1000), 1.0)
    assert math.isinf(audit.loss)
    assert audit.lower > 1.0
    with pytest.raises(ValueError, match="equally many"):
        audit_samples(np.zeros(10), np.zeros(11), 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        audit_samples(np.zeros(10), np.zeros(10), 0.0)

"""Exact truths and risks of the learning tasks (client/population/learning.py)."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest
from scipy.integrate import quad

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.population.labeled import (
    BinnedClassification,
    BinnedRegression,
    SparseLaw,
    SparseLinear,
    SparseLogistic,
)
from fedldp.client.population.learning import (
    bayes_classification_risk,
    bin_index,
    classification_excess_risk,
    classification_risk,
    logistic_minimizer,
    population_gradient,
    population_loss,
    regression_risk,
    ridge_minimizer,
    trivial_classification_risk,
    trivial_regression_risk,
)

K = 5.0  # k·σ tolerances: a two-sided normal tail beyond 5σ has probability 5.7e-7 per check
C = 0.4142  # E7's decision boundary

SPARSE: list[SparseLaw] = [
    SparseLinear(),
    SparseLinear((0.5, -1.0, 0.25, 2.0), 0.3, 4),
    SparseLogistic(),
    SparseLogistic((1.5, -0.5, 0.0), 3),
]


def law_id(law: object) -> str:
    return repr(law)


# --------------------------------------------------------------------------- optimization


def test_ridge_matches_e9_closed_form() -> None:
    # user-level-ldp.md §6.2 E9: d = 2, λ = 0.4, θ* = θ_true/(2(½ + λ))
    law, lam = SparseLinear(), 0.4
    expected = np.array([0.3, -0.2]) / (2 * (0.5 + lam))
    np.testing.assert_allclose(ridge_minimizer(law, lam), expected, rtol=1e-15)
    law = SparseLinear((0.5, -1.0, 0.25), 0.2, 3)  # general d: θ_true/(1 + λd)
    np.testing.assert_allclose(ridge_minimizer(law, lam), law.theta_true / 2.2, rtol=1e-15)
    np.testing.assert_array_equal(ridge_minimizer(law, 0.0), law.theta_true)


@pytest.mark.parametrize("law", SPARSE, ids=law_id)
@pytest.mark.parametrize("lam", [0.0, 0.05, 0.4])
def test_minimizers_satisfy_first_order_conditions(law: SparseLaw, lam: float) -> None:
    ridge = ridge_minimizer(law, lam)
    np.testing.assert_allclose(population_gradient(law, "squared", lam, ridge), 0.0, atol=1e-15)
    lam_logistic = lam
    if lam == 0 and isinstance(law, SparseLinear):
        # labels sθ_j ± ξ with |θ_0| > ξ: y has the sign of x_0 on axis 0, the logistic risk
        # decreases forever along it
        with pytest.raises(ValueError, match="no finite minimizer on axis 0"):
            logistic_minimizer(law, lam)
        lam_logistic = 1e-3
    logistic = logistic_minimizer(law, lam_logistic)
    gradient = population_gradient(law, "logistic", lam_logistic, logistic)
    np.testing.assert_allclose(gradient, 0.0, atol=1e-14)
    # a convex risk: every other point is worse
    rng = np.random.default_rng(0)
    for step in rng.normal(scale=0.05, size=(20, law.dimension)):
        assert population_loss(law, "squared", lam, ridge + step) > population_loss(
            law, "squared", lam, ridge
        )
        assert population_loss(law, "logistic", lam_logistic, logistic + step) > population_loss(
            law, "logistic", lam_logistic, logistic
        )


@pytest.mark.parametrize("law", [SparseLogistic(), SparseLogistic((1.5, -0.5, 0.0), 3)])
def test_unregularised_logistic_minimizer_is_theta_true(law: SparseLogistic) -> None:
    # the model is well specified, so the population logistic risk is minimal at θ_true
    np.testing.assert_allclose(logistic_minimizer(law, 0.0), law.theta_true, atol=1e-12)
    shrunk = logistic_minimizer(law, 0.3)
    assert np.all(np.abs(shrunk) <= np.abs(law.theta_true))


@pytest.mark.parametrize("law", SPARSE, ids=law_id)
def test_gradient_is_the_derivative_of_the_loss(law: SparseLaw) -> None:
    theta = np.linspace(-0.7, 0.9, law.dimension)
    h = 1e-6
    for loss in ("squared", "logistic"):
        grad = population_gradient(law, loss, 0.3, theta)
        for j in range(law.dimension):
            e = np.zeros(law.dimension)
            e[j] = h
            diff = population_loss(law, loss, 0.3, theta + e) - population_loss(
                law, loss, 0.3, theta - e
            )
            assert diff / (2 * h) == pytest.approx(grad[j], abs=1e-8)


def test_population_loss_by_hand() -> None:
    # x = s·e_j (probability 1/(2d)), y = sθ_j ± ξ: enumerate the 4d outcomes
    law, lam = SparseLinear((0.5, -1.0, 0.25), 0.3, 3), 0.2
    t = np.array([0.1, 0.4, -0.3])
    squared, logistic = 0.0, 0.0
    for j in range(3):
        for s in (1.0, -1.0):
            for xi in (0.3, -0.3):
                y, margin = s * law.theta[j] + xi, s * t[j]
                squared += 0.5 * (y - margin) ** 2 / 12
                logistic += math.log1p(math.exp(-y * margin)) / 12
    ridge = lam / 2 * float(t @ t)
    assert population_loss(law, "squared", lam, t) == pytest.approx(squared + ridge, rel=1e-14)
    assert population_loss(law, "logistic", lam, t) == pytest.approx(logistic + ridge, rel=1e-14)
    # L(0) = ½E[y²] = ½(‖θ‖²/d + ξ²); the logistic loss at 0 is log 2 whatever the law
    expected = 0.5 * (float(law.theta_true @ law.theta_true) / 3 + 0.09)
    assert population_loss(law, "squared", 0.0, np.zeros(3)) == pytest.approx(expected, rel=1e-14)
    assert population_loss(SparseLogistic(), "logistic", 0.0, [0, 0]) == pytest.approx(math.log(2))


def test_population_loss_matches_sampled_data() -> None:
    # The sampler and the exact loss agree: the mean per-sample loss of a drawn population is
    # within K·sd/√N of L(θ), sd from the exact second moment over the 2d atoms.
    spec = PopulationSpec(users=2000, samples=50, distribution="sparse-logistic", theta="1,-2")
    pop = build_population(spec, 5)
    law = pop.labeled
    assert isinstance(law, SparseLogistic)
    data = pop.data(np.arange(pop.n))
    assert data.labels is not None
    t = np.array([0.4, -0.6])
    losses = np.logaddexp(0.0, -data.labels * (data.values @ t))
    atoms = law.feature_atoms()
    values, probs = law.label_atoms(atoms)
    per = np.logaddexp(0.0, -values * (atoms @ t)[:, None])
    mean, second = np.sum(probs * per) / 4, np.sum(probs * per**2) / 4
    assert mean == pytest.approx(population_loss(law, "logistic", 0.0, t), rel=1e-14)
    sd = math.sqrt(second - mean**2)
    assert abs(losses.mean() - mean) <= K * sd / math.sqrt(losses.size)


def test_optimization_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="λ must be finite and >= 0"):
        ridge_minimizer(SparseLinear(), -0.1)
    with pytest.raises(ValueError, match="2 finite numbers"):
        population_loss(SparseLinear(), "squared", 0.1, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="unknown loss"):
        population_loss(SparseLinear(), "hinge", 0.1, [1.0, 2.0])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- classification


def test_bin_index_follows_the_spec() -> None:
    # b(x) = Σ_a min(⌊x_a M⌋, M − 1)·M^a, axis 0 fastest (user-level-ldp.md §3.8, 0-based)
    x = np.array([[0.05, 0.95], [0.999, 0.0], [1.0, 1.0], [0.35, 0.41]])
    np.testing.assert_array_equal(bin_index(x, 10), [90, 9, 99, 43])
    np.testing.assert_array_equal(bin_index([[0.5]], 4), [2])


def bayes_signs(m: int, d: int) -> np.ndarray:
    """sign η on each bin of x_1 (−1 left of C, +1 right of it, +1 on the bin holding C)."""
    cell = np.arange(m**d) % m
    return np.where((cell + 1) / m <= C, -1.0, 1.0)


@pytest.mark.parametrize("d", [1, 2])
def test_excess_risk_of_the_bayes_binning(d: int) -> None:
    law = BinnedClassification(dimension=d)
    signs = bayes_signs(10, d)
    # Bin [0.4, 0.5) holds C: predicting +1 there errs on [0.4, C) where |η| = 2(C − x), so
    # R − R* = ∫_0.4^C 2(C − x) dx = (C − 0.4)²; predicting −1 errs on [C, 0.5): (0.5 − C)².
    assert classification_excess_risk(law, 10, signs) == pytest.approx((C - 0.4) ** 2, rel=1e-12)
    signs[np.arange(signs.size) % 10 == 4] = -1.0
    assert classification_excess_risk(law, 10, signs) == pytest.approx((0.5 - C) ** 2, rel=1e-12)
    # M = 2: bin [0, 0.5) holds C too; with both bins right of it only the negative part counts
    assert classification_excess_risk(law, 2, np.ones(2**d)) == pytest.approx(C**2, rel=1e-12)


def test_excess_risk_is_zero_where_eta_keeps_its_sign() -> None:
    # C = 2071/5000 is a bin edge for M = 5000: the binned sign η is the Bayes classifier
    law = BinnedClassification()
    assert classification_excess_risk(law, 5000, bayes_signs(5000, 1)) == pytest.approx(
        0.0, abs=1e-15
    )
    # with M = 10 only the bin holding C errs, as computed by hand above
    signs = bayes_signs(10, 1)
    a = np.arange(10) / 10
    positive = law.eta_integral(np.maximum(a, C), np.maximum(a + 0.1, C))
    negative = -law.eta_integral(np.minimum(a, C), np.minimum(a + 0.1, C))
    wrong = np.where(signs > 0, negative, positive)
    np.testing.assert_array_equal(np.flatnonzero(wrong > 0), [4])


def test_excess_risk_matches_quadrature() -> None:
    law = BinnedClassification()
    m = 7
    signs = np.random.default_rng(3).choice([-1.0, 1.0], size=m)

    def integrand(x: float) -> float:
        eta = float(law.eta(np.array([[x]]))[0])
        sign = signs[min(int(x * m), m - 1)]
        return abs(eta) if sign * eta < 0 else 0.0

    edges = np.unique(np.concatenate([np.arange(m + 1) / m, [C, C + 0.5]]))
    expected = sum(quad(integrand, a, b)[0] for a, b in pairwise(edges))
    assert classification_excess_risk(law, m, signs) == pytest.approx(expected, rel=1e-10)


def test_classification_risks() -> None:
    law = BinnedClassification()
    # R* = E[(1 − |η|)/2] with ∫|η| = C² + (1/4 + (1/2 − C)) (the ramp left of C, right of C)
    bayes = 0.5 - 0.5 * (C**2 + 0.25 + (0.5 - C))
    assert bayes_classification_risk(law) == pytest.approx(bayes, rel=1e-14)
    mean = 0.75 - C - C**2
    assert law.mean_label() == pytest.approx(mean, rel=1e-14)
    assert trivial_classification_risk(law) == pytest.approx((1 - mean) / 2, rel=1e-14)
    # the all-+1 classifier is the best constant here (E[Y] > 0): its binned risk agrees
    assert classification_risk(law, 3, np.ones(3)) == pytest.approx((1 - mean) / 2, rel=1e-14)


def test_classification_arguments_are_checked() -> None:
    law = BinnedClassification(dimension=2)
    with pytest.raises(ValueError, match="M\\^d = 3\\^2 = 9"):
        classification_excess_risk(law, 3, np.ones(3))
    with pytest.raises(ValueError, match="\\+1 or -1"):
        classification_excess_risk(law, 3, np.zeros(9))
    with pytest.raises(ValueError, match="integer >= 1"):
        classification_excess_risk(law, 0, np.ones(1))


# --------------------------------------------------------------------------- regression


@pytest.mark.parametrize("d", [1, 2])
def test_zero_predictor_risk_is_the_variance_of_eta(d: int) -> None:
    law = BinnedRegression(dimension=d)
    assert trivial_regression_risk(law) == pytest.approx(0.125, abs=1e-15)  # E8: Var η
    assert regression_risk(law, 6, np.zeros(6**d)) == pytest.approx(0.125, abs=1e-14)


@pytest.mark.parametrize("m", [1, 4, 10])
def test_bin_average_risk_is_the_within_bin_variance(m: int) -> None:
    law = BinnedRegression(label_bound=2.0)

    def eta(x: float) -> float:
        return 0.5 * math.sin(2 * math.pi * x)

    averages, within = np.empty(m), 0.0
    for k in range(m):
        a, b = k / m, (k + 1) / m
        averages[k] = quad(eta, a, b, epsabs=1e-14)[0] * m
        within += quad(lambda x, v=averages[k]: (eta(x) - v) ** 2, a, b, epsabs=1e-14)[0]
    np.testing.assert_allclose(
        law.eta_integral(np.arange(m) / m, np.arange(1, m + 1) / m) * m, averages, atol=1e-13
    )
    assert regression_risk(law, m, averages) == pytest.approx(within, abs=1e-13)
    # any other constant per bin adds (v − η̄_k)²/M
    shifted = averages + 0.1
    assert regression_risk(law, m, shifted) == pytest.approx(within + 0.01, abs=1e-13)


def test_regression_risk_of_the_classification_law() -> None:
    # the regression risk is exact for the ramp η too (against quadrature)
    law = BinnedClassification()
    values = np.array([-0.5, 0.0, 0.3, 0.9])

    def integrand(x: float) -> float:
        eta = float(law.eta(np.array([[x]]))[0])
        return (float(values[min(int(x * 4), 3)]) - eta) ** 2

    edges = [0.0, 0.25, C, 0.5, 0.75, C + 0.5, 1.0]
    expected = sum(quad(integrand, a, b)[0] for a, b in pairwise(edges))
    assert regression_risk(law, 4, values) == pytest.approx(expected, rel=1e-12)

"""Populations (client/population/build.py, client/population/spec.py,
client/population/distributions.py)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fedldp.client.population.build import (
    AnyPopulation,
    Population,
    PopulationSpec,
    add_population_arguments,
    build_population,
    imbalanced_counts,
    mixture_counts,
    population_spec_from_args,
)
from fedldp.client.population.distributions import (
    Bernoulli,
    Categorical,
    Distribution,
    Exponential,
    Gaussian,
    Lomax,
    TwoPoint,
    Uniform,
    UniformL2Ball,
    zipf_probabilities,
)
from fedldp.client.population.labeled import (
    BinnedLaw,
    BinnedRegression,
    SparseLinear,
    SparseLogistic,
)
from fedldp.client.seeds import data_key
from fedldp.protocol.core.streams import UserStreams, stream_key

K = 5.0  # k·σ tolerances: a two-sided normal tail beyond 5σ has probability 5.7e-7 per check


def sample(spec: PopulationSpec, seed: int = 11) -> tuple[AnyPopulation, np.ndarray]:
    pop = build_population(spec, seed)
    return pop, np.asarray(pop.data(np.arange(pop.n)).values, dtype=np.float64)


def check_mean_and_variance(x: np.ndarray, mean: float, var: float, mu4: float | None) -> None:
    """Sample mean within K·sqrt(var/N); sample variance within K·sqrt((μ4 − var²)/N)."""
    n = x.shape[0]
    assert abs(x.mean() - mean) <= K * math.sqrt(var / n)
    if mu4 is not None:
        assert abs(x.var() - var) <= K * math.sqrt((mu4 - var**2) / n) + var / n


def two_point_mu4(points: tuple[float, float], p_first: float) -> float:
    mu = points[0] * p_first + points[1] * (1 - p_first)
    return (points[0] - mu) ** 4 * p_first + (points[1] - mu) ** 4 * (1 - p_first)


# --------------------------------------------------------------------------- data laws


def test_uniform_moments() -> None:
    pop, x = sample(PopulationSpec(users=2000, samples=100, low=-2.0, high=5.0))
    width = 7.0
    assert pop.truth == 1.5
    assert x.min() >= -2.0
    assert x.max() <= 5.0
    check_mean_and_variance(x, 1.5, width**2 / 12, width**4 / 80)


def test_gaussian_moments() -> None:
    pop, x = sample(
        PopulationSpec(users=2000, samples=100, distribution="gaussian", mean=0.7, sd=2)
    )
    assert pop.truth == 0.7
    check_mean_and_variance(x, 0.7, 4.0, 3 * 4.0**2)


def test_two_point_moments() -> None:
    spec = PopulationSpec(users=2000, samples=100, distribution="two-point", mean=0.3, bound=2)
    pop, x = sample(spec)
    p_plus = (1 + 0.3 / 2) / 2
    assert pop.truth == 0.3
    assert set(np.unique(x).tolist()) == {-2.0, 2.0}
    check_mean_and_variance(x, 0.3, 4 - 0.09, two_point_mu4((2.0, -2.0), p_plus))


def test_lomax_matches_its_law() -> None:
    # a = 4: mean 1/3, variance 2/9 (huber-user-level-dp.md §6.2); μ4 is infinite, so only the
    # mean is checked against theory, and the CDF 1 − (1+x)^(−a) by a KS-type bound below.
    pop, x = sample(PopulationSpec(users=2000, samples=100, distribution="lomax", shape=4))
    assert pop.truth == pytest.approx(1 / 3)
    assert Lomax(4.0).variance() == pytest.approx(2 / 9)
    check_mean_and_variance(x, 1 / 3, 2 / 9, None)
    xs = np.sort(x)
    cdf = 1 - (1 + xs) ** -4.0
    ecdf = np.arange(1, xs.size + 1) / xs.size
    # DKW: P(sup |F_n − F| > t) <= 2 exp(−2 N t²) = 2e-7 at t = sqrt(ln(1e7)/(2N)).
    assert np.max(np.abs(ecdf - cdf)) <= math.sqrt(math.log(1e7) / (2 * xs.size)) + 1 / xs.size


def test_exponential_matches_its_law() -> None:
    # λ = 2: mean 1/λ, variance 1/λ², central fourth moment 9/λ⁴ (the exponential's kurtosis is 9),
    # so both moments are checked against theory, and the CDF 1 − e^(−λx) by DKW as for Lomax.
    spec = PopulationSpec(users=2000, samples=100, distribution="exponential", rate=2)
    pop, x = sample(spec)
    assert pop.truth == 0.5
    assert Exponential(2.0).variance() == 0.25
    assert x.min() > 0
    check_mean_and_variance(x, 0.5, 0.25, 9 / 2.0**4)
    xs = np.sort(x)
    ecdf = np.arange(1, xs.size + 1) / xs.size
    # DKW: P(sup |F_n − F| > t) <= 2 exp(−2 N t²) = 2e-7 at t = sqrt(ln(1e7)/(2N)).
    dkw = math.sqrt(math.log(1e7) / (2 * xs.size)) + 1 / xs.size
    assert np.max(np.abs(ecdf - (1 - np.exp(-2.0 * xs)))) <= dkw


def test_exponential_default_is_the_huber_figure_2_law() -> None:
    """Exponential(1) (huber-user-level-dp.md §6.3 Fig. 2(c)): mean 1, variance 1, i.i.d.
    coordinates in R^d with truth (1, ..., 1)."""
    spec = PopulationSpec(users=1000, samples=50, distribution="exponential", dimension=3)
    pop, x = sample(spec)
    assert pop.data_kind == "vector"
    assert pop.l2_radius is None  # unbounded support: no public radius
    assert x.shape == (50_000, 3)
    np.testing.assert_array_equal(pop.truth, np.ones(3))
    for j in range(3):
        check_mean_and_variance(x[:, j], 1.0, 1.0, 9.0)
    # independent coordinates: each off-diagonal sample correlation is within K/sqrt(N) of 0
    corr = np.corrcoef(x, rowvar=False)
    assert np.all(np.abs(corr[np.triu_indices(3, 1)]) <= K / math.sqrt(x.shape[0]))
    assert pop.describe()["distribution"] == {"name": "exponential", "rate": 1.0, "dimension": 3}


@pytest.mark.parametrize("rate", [0.0, -1.0, math.inf, math.nan])
def test_exponential_law_refuses_a_bad_rate(rate: float) -> None:
    with pytest.raises(ValueError, match="finite rate λ > 0"):
        Exponential(rate)


def test_bernoulli_moments() -> None:
    pop, x = sample(PopulationSpec(users=2000, samples=100, distribution="bernoulli", p=0.2))
    assert pop.truth == 0.2
    assert set(np.unique(x).tolist()) == {0.0, 1.0}
    check_mean_and_variance(x, 0.2, 0.16, two_point_mu4((1.0, 0.0), 0.2))


def test_categorical_zipf_frequencies() -> None:
    spec = PopulationSpec(users=20000, samples=10, distribution="categorical", items=8, zipf=1.0)
    pop = build_population(spec, 3)
    values = pop.data(np.arange(pop.n)).values
    assert pop.data_kind == "categorical"
    assert values.dtype == np.int64
    p = 1 / np.arange(1, 9)
    p /= p.sum()
    np.testing.assert_allclose(pop.truth, p, rtol=1e-12)
    freq = np.bincount(values, minlength=8) / values.size
    assert np.all(np.abs(freq - p) <= K * np.sqrt(p * (1 - p) / values.size))


def test_uniform_categorical_is_zipf_zero() -> None:
    np.testing.assert_allclose(zipf_probabilities(5, 0.0), np.full(5, 0.2), rtol=1e-15)


def test_vector_box_and_two_point_coordinates() -> None:
    pop, x = sample(PopulationSpec(users=1000, samples=50, dimension=3, bound=2.0))
    assert pop.data_kind == "vector"
    assert x.shape == (50_000, 3)
    np.testing.assert_array_equal(pop.truth, np.zeros(3))
    for j in range(3):
        check_mean_and_variance(x[:, j], 0.0, 16 / 12, 4.0**4 / 80)
    spec = PopulationSpec(users=1000, samples=50, distribution="two-point", mean=-0.5, dimension=4)
    pop, x = sample(spec)
    np.testing.assert_array_equal(pop.truth, np.full(4, -0.5))
    for j in range(4):
        check_mean_and_variance(x[:, j], -0.5, 0.75, two_point_mu4((1.0, -1.0), 0.25))
    assert abs(np.corrcoef(x[:, 0], x[:, 1])[0, 1]) <= K / math.sqrt(x.shape[0])


def test_l2_ball_is_uniform_in_the_ball() -> None:
    d, r = 3, 2.0
    _pop, x = sample(PopulationSpec(users=1000, samples=50, dimension=d, ball="l2", bound=r))
    norms = np.linalg.norm(x, axis=1)
    assert norms.max() <= r * (1 + 1e-12)
    var = UniformL2Ball(r, d).variance()
    assert var == pytest.approx(r**2 / (d + 2))
    for j in range(d):
        check_mean_and_variance(x[:, j], 0.0, var, None)
    # ‖X‖/r has CDF t^d: its mean d/(d+1), variance d/(d+2) − (d/(d+1))².
    t = norms / r
    check_mean_and_variance(t, d / (d + 1), d / (d + 2) - (d / (d + 1)) ** 2, None)


# --------------------------------------------------------------------------- labeled laws


def labeled(spec: PopulationSpec, seed: int = 11) -> tuple[AnyPopulation, np.ndarray, np.ndarray]:
    pop = build_population(spec, seed)
    data = pop.data(np.arange(pop.n))
    assert data.labels is not None
    return pop, np.asarray(data.values), np.asarray(data.labels)


@pytest.mark.parametrize(
    ("name", "d"),
    [
        ("sparse-linear", 2),
        ("sparse-logistic", 2),
        ("binned-classification", 1),
        ("binned-regression", 1),
    ],
)
def test_labeled_data_shapes_and_kind(name: str, d: int) -> None:
    pop, x, y = labeled(PopulationSpec(users=50, samples=3, distribution=name))
    assert pop.data_kind == "labeled"
    assert pop.dimension == d
    assert pop.labeled is not None
    assert pop.labeled.dimension == d
    assert pop.l2_radius is None  # not a bound on what learning protocols average
    assert x.shape == (150, d)
    assert x.dtype == np.float64
    assert y.shape == (150,)
    assert y.dtype == np.float64
    assert np.all(np.abs(y) <= pop.labeled.label_bound)
    assert pop.labeled.eta(x).shape == (150,)
    assert pop.describe()["distribution"]["name"] == name


def test_labeled_defaults_and_truths() -> None:
    pop = build_population(PopulationSpec(users=5, distribution="sparse-linear"), 0)
    np.testing.assert_array_equal(pop.truth, [0.3, -0.2])  # E9's θ_true
    spec = PopulationSpec(users=5, distribution="sparse-logistic", dimension=5)
    np.testing.assert_array_equal(build_population(spec, 0).truth, [0.3, -0.2, 0.3, -0.2, 0.3])
    spec = PopulationSpec(users=5, distribution="sparse-linear", theta="1,2,3")
    assert build_population(spec, 0).dimension == 3  # d from the length of θ
    # E[η(X)] = ∫_0^1 clip(2(x − c), −1, 1) dx = (1/4 − c²) + (1/2 − c) for c = 0.4142
    c = 0.4142
    spec = PopulationSpec(users=5, distribution="binned-classification")
    assert build_population(spec, 0).truth == pytest.approx(0.75 - c - c**2, abs=1e-15)
    spec = PopulationSpec(users=5, distribution="binned-regression", label_bound=3)
    pop = build_population(spec, 0)
    assert pop.truth == pytest.approx(0.0, abs=1e-15)
    assert pop.labeled is not None
    assert pop.labeled.label_bound == 3.0


def test_sparse_linear_moments() -> None:
    theta, d, noise = np.array([0.5, -1.0, 0.25]), 3, 0.3
    spec = PopulationSpec(
        users=4000, samples=50, distribution="sparse-linear", theta="0.5,-1,0.25", noise=noise
    )
    pop, x, y = labeled(spec)
    np.testing.assert_array_equal(pop.truth, theta)
    assert set(np.unique(x).tolist()) == {-1.0, 0.0, 1.0}
    assert np.all(np.count_nonzero(x, axis=1) == 1)  # x = ±e_J
    residual = y - x @ theta
    np.testing.assert_allclose(np.abs(residual), noise, rtol=1e-12)
    check_mean_and_variance(residual, 0.0, noise**2, None)
    gram = x.T @ x
    np.testing.assert_array_equal(gram - np.diag(np.diag(gram)), 0.0)  # E[xxᵀ] = I/d
    for j in range(d):
        # x_j² ~ Bernoulli(1/d); x_j = ±1 with probability 1/(2d) each; x_j y = 1(J = j)(θ_j ± ξ)
        # with mean θ_j/d and second moment (θ_j² + ξ²)/d
        check_mean_and_variance(x[:, j] ** 2, 1 / d, (1 / d) * (1 - 1 / d), None)
        check_mean_and_variance(x[:, j], 0.0, 1 / d, None)
        var_xy = (theta[j] ** 2 + noise**2) / d - (theta[j] / d) ** 2
        check_mean_and_variance(x[:, j] * y, theta[j] / d, var_xy, None)


def test_sparse_logistic_labels_follow_the_sigmoid() -> None:
    theta, d = np.array([1.5, -0.5]), 2
    spec = PopulationSpec(users=4000, samples=50, distribution="sparse-logistic", theta="1.5,-0.5")
    pop, x, y = labeled(spec)
    assert isinstance(pop.labeled, SparseLogistic)
    assert set(np.unique(y).tolist()) == {-1.0, 1.0}
    n, p_atom = x.shape[0], 1 / (2 * d)
    for atom in pop.labeled.feature_atoms():
        rows = np.all(x == atom, axis=1)
        assert abs(rows.sum() - n * p_atom) <= K * math.sqrt(n * p_atom * (1 - p_atom))
        eta = 2 / (1 + math.exp(-float(theta @ atom))) - 1  # E[y | x] = 2σ(θᵀx) − 1
        check_mean_and_variance(y[rows], eta, 1 - eta**2, None)
    for j in range(d):
        # x_j y = ±1(J = j): mean tanh(θ_j/2)/d, second moment 1/d
        mean = math.tanh(theta[j] / 2) / d
        check_mean_and_variance(x[:, j] * y, mean, 1 / d - mean**2, None)


@pytest.mark.parametrize(
    ("options", "bound"),
    [
        ({"distribution": "binned-classification", "dimension": 2}, 1.0),
        ({"distribution": "binned-regression", "dimension": 2, "label_bound": 2.0}, 2.0),
    ],
)
def test_binned_labels_follow_eta(options: dict[str, Any], bound: float) -> None:
    pop, x, y = labeled(PopulationSpec(users=4000, samples=50, **options))
    law = pop.labeled
    assert isinstance(law, BinnedLaw)
    assert set(np.unique(y).tolist()) == {-bound, bound}
    assert x.min() > 0.0
    assert x.max() < 1.0
    for j in range(2):
        check_mean_and_variance(x[:, j], 0.5, 1 / 12, 1 / 80)
    mu = law.mean_label()
    check_mean_and_variance(y, mu, bound**2 - mu**2, None)
    # per bin of x_1, y has mean η̄_k = M ∫_bin η and variance T² − η̄_k²
    m = 8
    cells = np.minimum((x[:, 0] * m).astype(np.int64), m - 1)
    a = np.arange(m) / m
    eta_bar = law.eta_integral(a, a + 1 / m) * m
    for k in range(m):
        check_mean_and_variance(y[cells == k], eta_bar[k], bound**2 - eta_bar[k] ** 2, None)
    # η depends on x_1 only: the other axis carries no information about y
    check_mean_and_variance(y[x[:, 1] < 0.5], mu, bound**2 - mu**2, None)


# --------------------------------------------------------------------------- sample counts


def test_imbalanced_counts_follow_the_formula() -> None:
    n, total, gamma = 37, 1000, 2.5
    s = [math.ceil(total * (i / n) ** gamma) for i in range(n + 1)]
    expected = np.diff(s)
    np.testing.assert_array_equal(imbalanced_counts(n, total, gamma), expected)


@pytest.mark.parametrize(
    ("n", "total", "gamma", "zeros", "largest"),
    # huber-user-level-dp.md §6.3 table (U7). Its γ = 1 rows (max 101) are a floating-point
    # artefact of N·(i/n); exactly, γ = 1 gives m_i = N/n = 100 for every user (checked below).
    [
        (1000, 100_000, 2, 2, 200),
        (1000, 100_000, 3, 38, 299),
        (1000, 100_000, 5, 169, 499),
        (10_000, 1_000_000, 3, 384, 300),
        (10_000, 1_000_000, 5, 1691, 500),
    ],
)
def test_imbalanced_generator_matches_spec_table(
    n: int, total: int, gamma: float, zeros: int, largest: int
) -> None:
    m = imbalanced_counts(n, total, gamma)
    assert (int(np.sum(m == 0)), int(m.max()), int(m.sum())) == (zeros, largest, total)


def test_imbalanced_gamma_one_is_exactly_balanced() -> None:
    np.testing.assert_array_equal(imbalanced_counts(1000, 100_000, 1), np.full(1000, 100))


def test_imbalanced_population_drops_empty_users_and_warns() -> None:
    spec = PopulationSpec(users=1000, imbalance=3, total_samples=100_000)
    pop = build_population(spec, 0)
    m = pop.metadata["samples"]
    assert pop.n == 962
    assert m.size == 962
    assert m.min() >= 1
    assert m.sum() == 100_000
    assert pop.warnings
    assert "38 of 1000" in pop.warnings[0]
    assert pop.data(np.arange(pop.n)).values.shape == (100_000,)


# --------------------------------------------------------------------------- ε profiles


def test_mixture_counts_are_exact() -> None:
    np.testing.assert_array_equal(mixture_counts(np.array([0.5, 0.5]), 1000), [500, 500])
    np.testing.assert_array_equal(mixture_counts(np.array([1 / 3] * 3), 1000), [334, 333, 333])
    np.testing.assert_array_equal(mixture_counts(np.array([0.1, 0.9, 0.0]), 7), [1, 6, 0])


def test_epsilon_mix_exact_counts_and_seeded_shuffle() -> None:
    spec = PopulationSpec(users=1000, epsilon_mix="0.1:0.3,1:0.7")
    a, b, c = (build_population(spec, s).epsilon for s in (1, 1, 2))
    assert np.sum(a == 0.1) == 300
    assert np.sum(a == 1.0) == 700
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # The shuffle spreads the small ε over the slots: under a uniform permutation the number of
    # ε = 0.1 among the first 500 slots is hypergeometric, mean 150, sd ≈ 7.2.
    assert abs(np.sum(a[:500] == 0.1) - 150) <= K * 7.25


def test_epsilon_uniform_and_lognormal() -> None:
    eps = build_population(PopulationSpec(users=5000, epsilon_uniform="0.5:2"), 4).epsilon
    assert eps.min() >= 0.5
    assert eps.max() <= 2.0
    assert abs(eps.mean() - 1.25) <= K * 1.5 / math.sqrt(12 * 5000)
    eps = build_population(PopulationSpec(users=5000, epsilon_lognormal="0:0.5"), 4).epsilon
    assert np.all(eps > 0)
    assert abs(np.log(eps).mean()) <= K * 0.5 / math.sqrt(5000)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"users": 5, "epsilon": 0}, "epsilon must be finite and > 0"),
        ({"users": 5, "epsilon": -1}, "epsilon must be finite and > 0"),
        ({"users": 5, "epsilon": math.inf}, "finite number"),
        ({"users": 5, "epsilon_mix": "0.1:0.5,1:0.4"}, "sum to 1"),
        ({"users": 5, "epsilon_mix": "0:0.5,1:0.5"}, "value 0.0 must be finite and > 0"),
        ({"users": 5, "epsilon_mix": "0.5"}, "a:b"),
        ({"users": 5, "epsilon_uniform": "2:1"}, "0 < a <= b"),
        ({"users": 5, "epsilon_lognormal": "0:-1"}, "sigma >= 0"),
        ({"users": 5, "epsilon": 1, "epsilon_uniform": "1:2"}, "one ε profile"),
        ({"users": 5, "epsilon_column": "eps"}, "needs --csv"),
        ({"users": 5, "distribution": "two-point", "sd": 2}, "--sd does not apply"),
        ({"users": 5, "distribution": "two-point", "mean": 2}, "[-D, D]"),
        ({"users": 5, "distribution": "categorical"}, "--items"),
        ({"users": 5, "distribution": "bernoulli", "dimension": 2}, "--dimension"),
        ({"users": 5, "ball": "l2"}, "--ball needs --dimension"),
        ({"users": 5, "bound": 2, "low": 0}, "not both"),
        ({"users": 5, "imbalance": 2}, "go together"),
        ({"users": 5, "samples": 3, "imbalance": 2, "total_samples": 50}, "exclude"),
        ({"samples": 3}, "--users is required"),
        ({"users": 5, "shape": 1}, "greater than 1"),
        ({"users": 5, "distribution": "exponential", "rate": 0}, "greater than 0"),
        ({"users": 5, "distribution": "exponential", "rate": -1}, "greater than 0"),
        ({"users": 5, "distribution": "exponential", "rate": math.inf}, "finite number"),
        ({"users": 5, "distribution": "exponential", "mean": 1}, "--mean does not apply"),
        ({"users": 5, "distribution": "lomax", "rate": 2}, "--rate does not apply"),
        ({"users": 5, "colour": "red"}, "Extra inputs"),
        ({"users": 5, "distribution": "gaussian", "theta": "1,2"}, "--theta does not apply"),
        ({"users": 5, "distribution": "sparse-logistic", "noise": 0.2}, "--noise does not apply"),
        (
            {"users": 5, "distribution": "sparse-linear", "label_bound": 2},
            "--label-bound does not apply",
        ),
        ({"users": 5, "distribution": "binned-classification", "theta": "1"}, "--theta"),
        ({"users": 5, "distribution": "binned-regression", "noise": 0.1}, "--noise"),
        ({"users": 5, "distribution": "binned-regression", "ball": "l2"}, "--ball"),
        ({"users": 5, "distribution": "sparse-linear", "items": 3}, "--items does not apply"),
        (
            {"users": 5, "distribution": "sparse-linear", "theta": "1,2,3", "dimension": 2},
            "3 entries",
        ),
        ({"users": 5, "distribution": "sparse-linear", "theta": "1,x"}, "theta must be numbers"),
        ({"users": 5, "distribution": "sparse-linear", "theta": "1,inf"}, "finite number"),
        ({"users": 5, "distribution": "sparse-linear", "theta": []}, "at least 1 item"),
        ({"users": 5, "distribution": "sparse-linear", "noise": -0.1}, "greater than or equal"),
        ({"users": 5, "distribution": "binned-regression", "label_bound": 0.4}, "T >= 0.5"),
    ],
)
def test_spec_validation_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        PopulationSpec.model_validate(options)


def test_too_many_samples_for_a_stream() -> None:
    spec = PopulationSpec(users=2, samples=9_000_000, distribution="gaussian")
    with pytest.raises(ValueError, match="more than a stream holds"):
        build_population(spec, 0)


# --------------------------------------------------------------------------- CSV populations


def write_csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "users.csv"
    path.write_text(text)
    return path


def test_csv_groups_users_in_order_of_first_appearance(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path,
        "user_id,value,eps\nb,1.0,0.5\na,2.0,2\nb,3.0,0.5\nc,-1,1\na,4.0,2\nb,5,0.5\n",
    )
    pop = build_population(PopulationSpec(csv=path, epsilon_column="eps"), 0)
    assert pop.n == 3
    assert pop.data_kind == "scalar"
    np.testing.assert_array_equal(pop.metadata["samples"], [3, 2, 1])
    np.testing.assert_array_equal(pop.epsilon, [0.5, 2.0, 1.0])
    data = pop.data(np.array([2, 0, 1]))
    np.testing.assert_array_equal(data.values, [-1.0, 1.0, 3.0, 5.0, 2.0, 4.0])
    np.testing.assert_array_equal(data.counts, [1, 3, 2])
    assert pop.truth == pytest.approx((3.0 + 3.0 - 1.0) / 3)  # mean of the user means


def test_csv_vector_categorical_and_profiles(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "uid,x,y,item\n1,0,2,0\n2,1,1,2\n1,2,0,2\n")
    spec = PopulationSpec(csv=path, user_column="uid", value_column="x,y", epsilon_mix="1:1")
    pop = build_population(spec, 0)
    assert pop.data_kind == "vector"
    np.testing.assert_allclose(pop.truth, [1.0, 1.0])
    spec = PopulationSpec(
        csv=path, user_column="uid", value_column="item", distribution="categorical", items=3
    )
    pop = build_population(spec, 0)
    assert pop.data_kind == "categorical"
    # user 1 holds {0, 2}, user 2 holds {2}: mean of the user frequencies (0.25, 0, 0.75)
    np.testing.assert_allclose(pop.truth, [0.25, 0.0, 0.75])


@pytest.mark.parametrize(
    ("text", "options", "message"),
    [
        ("user_id,value\n", {}, "no data rows"),
        ("user_id,val\nu,1\n", {}, "no column 'value'"),
        ("user_id,value\nu,abc\n", {}, "row 2: value 'abc' is not a number"),
        ("user_id,value,e\nu,1,1\nv,2,0\n", {"epsilon_column": "e"}, "user 'v' must be finite"),
        ("user_id,value,e\nu,1,1\nu,2,3\n", {"epsilon_column": "e"}, "several values"),
        (
            "user_id,value\nu,1\nu,5\n",
            {"distribution": "categorical", "items": 3},
            "row 3: categorical",
        ),
    ],
)
def test_csv_errors_name_the_cell(
    tmp_path: Path, text: str, options: dict[str, Any], message: str
) -> None:
    spec = PopulationSpec(csv=write_csv(tmp_path, text), **options)
    with pytest.raises(ValueError, match=message):
        build_population(spec, 0)


def test_csv_rejects_synthetic_options(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="--users does not apply to a CSV"):
        PopulationSpec(csv=write_csv(tmp_path, "user_id,value\nu,1\n"), users=3)


# --------------------------------------------------------------------------- reproducibility


SPECS = [
    PopulationSpec(users=300, samples=7, distribution="gaussian"),
    PopulationSpec(users=300, imbalance=1.5, total_samples=3000, distribution="lomax"),
    PopulationSpec(users=300, imbalance=2, total_samples=2000, distribution="exponential"),
    PopulationSpec(users=300, samples=3, dimension=3, ball="l2"),
    PopulationSpec(
        users=300, imbalance=2, total_samples=2000, distribution="two-point", dimension=2
    ),
    PopulationSpec(users=300, samples=4, distribution="categorical", items=5, zipf=1.2),
    PopulationSpec(users=300, imbalance=1.5, total_samples=3000, distribution="sparse-linear"),
    PopulationSpec(users=300, samples=6, distribution="sparse-logistic", dimension=3),
    PopulationSpec(
        users=300, imbalance=2, total_samples=2000, distribution="binned-classification"
    ),
    PopulationSpec(users=300, samples=5, distribution="binned-regression", dimension=2),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.distribution)
def test_user_data_identical_alone_or_in_any_block(spec: PopulationSpec) -> None:
    pop = build_population(spec, 99)
    everyone = pop.data(np.arange(pop.n))
    offsets = everyone.offsets
    rng = np.random.default_rng(0)
    for _ in range(5):
        block = rng.choice(pop.n, size=40, replace=False)
        got = pop.data(block)
        for r, i in enumerate(block.tolist()):
            mine = got.values[got.offsets[r] : got.offsets[r + 1]]
            np.testing.assert_array_equal(mine, everyone.values[offsets[i] : offsets[i + 1]])
            alone = pop.data(np.array([i]))
            np.testing.assert_array_equal(mine, alone.values)
            if everyone.labels is None:
                assert got.labels is None
                continue
            assert got.labels is not None
            labels = got.labels[got.offsets[r] : got.offsets[r + 1]]
            np.testing.assert_array_equal(labels, everyone.labels[offsets[i] : offsets[i + 1]])
            np.testing.assert_array_equal(labels, alone.labels)


RAGGED_LAWS: list[Distribution] = [
    Uniform(-2.0, 5.0),
    Uniform(-1.0, 1.0, 3),
    Gaussian(0.7, 2.0),
    Gaussian(0.0, 1.0, 2),
    TwoPoint(2.0, 0.3, 2),
    Lomax(4.0, 3),
    Exponential(2.0),
    Exponential(1.0, 2),
    Bernoulli(0.2),
    Categorical((0.1, 0.2, 0.7)),
]


@pytest.mark.parametrize("law", RAGGED_LAWS, ids=repr)
def test_ragged_draw_equals_one_sample_count_at_a_time(law: Distribution) -> None:
    """sample_ragged gives each user exactly what ``sample`` gives it alone, whatever the other
    users' sample counts (0 included) and their order."""
    key = stream_key(4, 2)
    slots = np.array([17, 3, 900, 4, 5, 250_000, 8], dtype=np.int64)
    counts = np.array([5, 1, 0, 12, 5, 3, 7], dtype=np.int64)
    got = law.sample_ragged(key, slots, counts)
    assert got is not None
    assert got.shape == (int(counts.sum()), *law.item_shape)
    want = [law.sample(UserStreams(key, [i]), m)[0] for i, m in zip(slots, counts, strict=True)]
    np.testing.assert_array_equal(got, np.concatenate(want))


def test_laws_without_a_ragged_path_say_so() -> None:
    # the ball's radius draw follows its m·2d normals' uniforms, so its draws are not a prefix
    key = stream_key(0)
    assert UniformL2Ball(1.0, 2).sample_ragged(key, np.arange(2), np.array([1, 2])) is None


@pytest.mark.parametrize("dimension", [None, 2])
def test_imbalanced_data_is_each_users_own_sample(dimension: int | None) -> None:
    """The population's imbalanced draw (ragged chunks) equals each user's ``sample`` alone."""
    spec = PopulationSpec(
        users=400, imbalance=3, total_samples=40_000, distribution="gaussian", dimension=dimension
    )
    pop = build_population(spec, 12)
    assert isinstance(pop, Population)
    law = spec.law()
    assert isinstance(law, Distribution)
    got = pop.data(np.arange(pop.n))
    key = data_key(pop.population_seed)
    for i in (0, 1, 57, pop.n // 2, pop.n - 1):
        m = int(pop.metadata["samples"][i])
        mine = got.values[got.offsets[i] : got.offsets[i + 1]]
        np.testing.assert_array_equal(mine, law.sample(UserStreams(key, [i]), m)[0])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 4999), min_size=1, max_size=30, unique=True))
def test_any_block_reproduces_each_member(slots: list[int]) -> None:
    pop = build_population(PopulationSpec(users=5000, samples=5, distribution="two-point"), 5)
    together = pop.data(np.array(slots)).values.reshape(len(slots), 5)
    for r, s in enumerate(slots):
        np.testing.assert_array_equal(together[r], pop.data(np.array([s])).values)


def test_data_depends_on_the_seed_and_not_on_the_population_size() -> None:
    small = build_population(PopulationSpec(users=10, samples=4), 1).data(np.arange(10)).values
    big = build_population(PopulationSpec(users=10_000, samples=4), 1).data(np.arange(10)).values
    other = build_population(PopulationSpec(users=10, samples=4), 2).data(np.arange(10)).values
    np.testing.assert_array_equal(small, big)
    assert not np.array_equal(small, other)


@pytest.mark.parametrize("name", ["sparse-linear", "binned-regression"])
def test_labeled_data_is_seeded(name: str) -> None:
    def draw(users: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        pop = build_population(PopulationSpec(users=users, samples=4, distribution=name), seed)
        data = pop.data(np.arange(10))
        assert data.labels is not None
        return data.values, data.labels

    small, big, other = draw(10, 1), draw(10_000, 1), draw(10, 2)
    for a, b in zip(small, big, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(small[0], other[0])
    assert not np.array_equal(small[1], other[1])


def test_data_rejects_unknown_slots() -> None:
    pop = build_population(PopulationSpec(users=10), 0)
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        pop.data(np.array([10]))


def test_describe_is_public() -> None:
    spec = PopulationSpec(users=100, distribution="two-point", mean=0.25, epsilon_mix="1:0.5,2:0.5")
    d = build_population(spec, 0).describe()
    assert d["n"] == 100
    assert d["distribution"]["name"] == "two-point"
    assert d["epsilon_summary"] == {"min": 1.0, "median": 1.5, "max": 2.0}
    assert "truth" not in d
    assert "seed" not in str(d)


# --------------------------------------------------------------------------- flags and files


def parse(argv: list[str]) -> PopulationSpec:
    parser = argparse.ArgumentParser()
    add_population_arguments(parser)
    return population_spec_from_args(parser.parse_args(argv))


def test_flags_build_the_spec() -> None:
    spec = parse(
        [
            "--users",
            "10",
            "--distribution",
            "two-point",
            "--mean",
            "0.2",
            "--epsilon-mix",
            "0.1:0.5,1:0.5",
        ]
    )
    assert spec.users == 10
    assert spec.mean == 0.2
    assert spec.epsilon_mix == ((0.1, 0.5), (1.0, 0.5))
    assert spec.model_fields_set == {"users", "distribution", "mean", "epsilon_mix"}


def test_flags_override_the_file(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("user_id,value\nu,1\n")
    yml = tmp_path / "pop.yaml"
    yml.write_text("users: 50\ndistribution: gaussian\nsd: 3\nepsilon-mix: {0.5: 0.5, 2: 0.5}\n")
    spec = parse(["--population", str(yml), "--sd", "2", "--epsilon", "3"])
    assert (spec.users, spec.distribution, spec.sd, spec.epsilon, spec.epsilon_mix) == (
        50,
        "gaussian",
        2.0,
        3.0,
        None,
    )
    js = tmp_path / "pop.json"
    js.write_text('{"csv": "data.csv", "samples": 4}')
    with pytest.raises(ValidationError, match="--samples does not apply to a CSV"):
        parse(["--population", str(js)])
    js.write_text('{"csv": "data.csv"}')
    assert parse(["--population", str(js)]).csv == tmp_path / "data.csv"


def test_labeled_flags_and_file(tmp_path: Path) -> None:
    spec = parse(
        ["--users", "10", "--distribution", "sparse-linear", "--theta", "0.1,-2,3", "--noise", "0"]
    )
    assert spec.law() == SparseLinear((0.1, -2.0, 3.0), 0.0, 3)
    spec = parse(["--users", "10", "--distribution", "sparse-logistic", "--theta=-1,2"])
    assert spec.law() == SparseLogistic((-1.0, 2.0), 2)
    spec = parse(["--users", "10", "--distribution", "binned-regression", "--label-bound", "2"])
    assert spec.law() == BinnedRegression(1, 2.0)
    yml = tmp_path / "pop.yaml"
    yml.write_text("users: 50\ndistribution: sparse-logistic\ntheta: [1, -1, 0.5, 0]\n")
    spec = parse(["--population", str(yml)])
    assert spec.law() == SparseLogistic((1.0, -1.0, 0.5, 0.0), 4)
    yml.write_text("users: 50\ndistribution: binned-regression\nlabel-bound: 1.5\n")
    assert parse(["--population", str(yml), "--dimension", "3"]).law() == BinnedRegression(3, 1.5)


def test_bad_population_file(tmp_path: Path) -> None:
    bad = tmp_path / "pop.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ValueError, match="mapping"):
        parse(["--population", str(bad)])
    with pytest.raises(ValueError, match="cannot read"):
        parse(["--population", str(tmp_path / "missing.yaml")])


def test_semi_feature_populations_come_from_the_flags() -> None:
    pop = build_population(
        PopulationSpec(users=500, distribution="sin-sum", mask="aligned", private=2), 3
    )
    assert pop.n == 500
    assert pop.metadata["mask"].shape == (500, 5)
    assert np.all(pop.metadata["mask"][:, :2] == 1)
    assert np.all(pop.metadata["public"][:, :2] == 0.0)  # private values never leave the user
    data = pop.data(np.arange(4))
    assert data.values.shape == (4, 10)
    assert data.labels is not None
    for bad, match in (
        ({"users": 10, "distribution": "sin-sum", "samples": 3}, "one sample per user"),
        ({"users": 10, "distribution": "sin-sum", "split": 1}, "--split"),
        ({"users": 10, "distribution": "diabetes"}, "no --users"),
        ({"distribution": "sin-sum"}, "--users is required"),
        ({"users": 10, "distribution": "uniform", "mask": "tail"}, "--mask"),
    ):
        with pytest.raises(ValueError, match=match):
            PopulationSpec.model_validate(bad)

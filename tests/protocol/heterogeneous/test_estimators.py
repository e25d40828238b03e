"""Estimators of heterogeneous-ldp.md (protocol/heterogeneous/estimators.py): the §4.5 predictions.

R repetitions are simulated at once by running the randomizers on (R·n) users with a numpy
Generator and applying the estimator math per repetition. Tolerances come from theory:

* P1 (unbiasedness): 4 SE from the closed-form MSE (false failure 6.3e-5 per check).
* P2 (MSE): R·MSÊ/MSE ~ χ² with R·ν degrees of freedom, ν = 2/(κ − 1) for a scalar with kurtosis
  κ (Laplace noise's excess kurtosis from its 4th cumulant; RR and Duchi terms are platykurtic,
  ν = 1 or the Satterthwaite ν = (tr Σ)²/tr Σ² is then conservative); band at 1e-6 each side.
* P3 (tail bounds): exceedances ≤ the 1 − 1e-6 quantile of Binomial(R, β).
* P5/P6 (ratios of MSEs on the same draws): delta method on the log ratio with the empirical
  covariance of the squared errors, 4 SD.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from scipy import stats

from fedldp.protocol.heterogeneous import estimators as est
from fedldp.protocol.mechanisms.randomizers import (
    duchi_radius,
    duchi_report,
    jl_dimension,
    jl_estimate,
    jl_report,
    jl_signs,
    laplace_mean_report,
    one_bit_report,
    randomized_response,
    rr_debias,
)

FloatArray = NDArray[np.float64]
KINDS: tuple[est.WeightKind, ...] = ("paper", "uniform", "inverse_variance")
BETA_THETA = -3.0 / 7.0  # θ of X = 2·Beta(2, 5) − 1
BETA_VAR = 4 * (2 * 5) / ((2 + 5) ** 2 * (2 + 5 + 1))  # Var X = 4·Var Beta(2, 5) = 0.10204
P_BAND = 1e-6


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(12345, spawn_key=key))


def _profile(name: str, n: int) -> FloatArray:
    """Profile A: half at ε = 0.1, half at 1; Profile B: half at 0.1, half at 5 (spec §4.5)."""
    high = {"A": 1.0, "B": 5.0}[name]
    return np.concatenate([np.full(n // 2, 0.1), np.full(n - n // 2, high)])


def _sim_laplace(eps: FloatArray, reps: int, g: np.random.Generator) -> FloatArray:
    x = 2 * g.beta(2, 5, size=reps * eps.size) - 1
    return laplace_mean_report(x, np.tile(eps, reps), g).reshape(reps, eps.size)


def _sim_rr(eps: FloatArray, theta: float, reps: int, g: np.random.Generator) -> FloatArray:
    """Debiased reports c_i·Y_i of Alg 2 on ±1 data with mean θ, shape (R, n)."""
    x = np.where(g.random(reps * eps.size) < (1 + theta) / 2, 1.0, -1.0)
    y = randomized_response(x, np.tile(eps, reps), g).reshape(reps, eps.size)
    return np.asarray(rr_debias(eps) * y, dtype=np.float64)


def _sim_one_bit(eps: FloatArray, reps: int, g: np.random.Generator) -> FloatArray:
    x = 2 * g.beta(2, 5, size=reps * eps.size) - 1
    y = one_bit_report(x, np.tile(eps, reps), g).reshape(reps, eps.size)
    return np.asarray(rr_debias(eps) * y, dtype=np.float64)


def _sphere(n: int, d: int, g: np.random.Generator) -> FloatArray:
    v = g.standard_normal((n, d))
    return np.asarray(v / np.linalg.norm(v, axis=1, keepdims=True), dtype=np.float64)


def _sim_duchi(
    eps: FloatArray,
    d: int,
    reps: int,
    g: np.random.Generator,
    a_list: list[FloatArray],
    point_mass: float,
) -> list[FloatArray]:
    """Weighted Alg 3 estimates (R, d) for each weight vector in ``a_list``, in rep chunks.

    Data (r = 1): X = e_1 with probability ``point_mass``, else uniform on the unit sphere, so
    θ = point_mass·e_1 (spec §5 E2 uses 0.5; 0 gives θ = 0 and isotropic errors).
    """
    n = eps.size
    out: list[list[FloatArray]] = [[] for _ in a_list]
    chunk = max(1, 2_000_000 // (n * d))
    for start in range(0, reps, chunk):
        k = min(chunk, reps - start)
        x = _sphere(k * n, d, g)
        at_pole = g.random(k * n) < point_mass
        x[at_pole] = np.eye(d)[0]
        y = duchi_report(x, np.tile(eps, k), g).reshape(k, n, d)
        for slot, a in zip(out, a_list, strict=True):
            slot.append(np.einsum("rnd,n->rd", y, a) / a.sum())
    return [np.vstack(parts) for parts in out]


def _mse_band(reps: int, nu: float) -> tuple[float, float]:
    """MSÊ/MSE lies in this band with probability 1 − 2e-6 (χ² with R·ν dof)."""
    dof = reps * nu
    return stats.chi2.ppf(P_BAND, dof) / dof, stats.chi2.ppf(1 - P_BAND, dof) / dof


def _laplace_nu(eps: FloatArray, kind: est.WeightKind, mse: float) -> float:
    """ν = 2/(κ − 1) of the Alg 1 error; noise w_i·Lap(2/ε_i) has 4th cumulant 12(w_i b_i)⁴."""
    a = est.weights("laplace", eps, kind)
    wb = (a / a.sum()) * 2 / eps
    excess = float(np.sum(12 * wb**4)) / mse**2
    return 2 / (2 + excess)


def _log_ratio_ok(err2_num: FloatArray, err2_den: FloatArray, analytic: float) -> bool:
    """|log(mean e_num² / mean e_den²) − log(analytic)| ≤ 4 SD by the delta method."""
    reps = err2_num.size
    a, b = float(err2_num.mean()), float(err2_den.mean())
    cov = np.cov(err2_num, err2_den)
    var = (cov[0, 0] / a**2 + cov[1, 1] / b**2 - 2 * cov[0, 1] / (a * b)) / reps
    return abs(math.log(a / b) - math.log(analytic)) <= 4 * math.sqrt(var)


# --------------------------------------------------------------------------- weights, sizes


def test_effective_sizes_profile_a_reference() -> None:
    sizes = est.effective_sizes(_profile("A", 10_000))
    assert sizes["S"] == pytest.approx(5050.0, rel=1e-12)
    assert sizes["S_RR"] == pytest.approx(1080.24, abs=0.005)
    assert sizes["W"] == pytest.approx(2549.5, abs=0.05)
    b = est.effective_sizes(_profile("B", 10_000))
    assert b["S"] == pytest.approx(125_050.0)
    assert b["S_RR"] == pytest.approx(4879.5, abs=0.05)
    assert b["W"] == pytest.approx(4857.2, abs=0.05)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(1e-3, 50.0), min_size=1, max_size=30),
    st.sampled_from(["laplace", "rr", "duchi", "jl"]),
    st.sampled_from(KINDS),
)
def test_weights_are_positive_and_normalize(
    eps: list[float], mechanism: est.Mechanism, kind: est.WeightKind
) -> None:
    a = est.weights(mechanism, np.array(eps), kind)
    assert np.all(a > 0)
    w = a / a.sum()
    assert w.sum() == pytest.approx(1.0, rel=1e-12)
    if kind == "uniform":
        assert np.all(a == 1.0)


def test_weight_formulas() -> None:
    e = np.array([0.1, 1.0, 5.0])
    assert np.allclose(est.weights("laplace", e), e**2 / (1 + e**2))
    assert np.allclose(est.weights("laplace", e, "inverse_variance"), 1 / (1 + 8 / e**2))
    for mech in ("rr", "jl"):
        assert np.allclose(est.weights(mech, e), 1 / rr_debias(e) ** 2)
        assert np.allclose(est.weights(mech, e, "inverse_variance"), np.tanh(e / 2) ** 2)
    assert np.allclose(est.weights("duchi", e), e**2)
    assert np.allclose(est.weights("duchi", e, "inverse_variance"), np.tanh(e / 2) ** 2)
    with pytest.raises(ValueError, match="mechanism"):
        est.weights("rappor", e)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epsilon"):
        est.weights("rr", np.array([0.0]))


def test_eps_cap() -> None:
    e = np.array([0.5, 1.0, 3.0, 10.0])
    assert est.capped_epsilons(e, 1.0).tolist() == [0.5, 1.0, 1.0, 1.0]
    assert est.capped_epsilons(e, None).tolist() == e.tolist()
    with pytest.raises(ValueError, match="eps_cap"):
        est.capped_epsilons(e, 0.0)


# --------------------------------------------------------------------------- accumulator


def test_accumulator_is_order_independent_and_renormalizes_over_reporters() -> None:
    g = _rng(1)
    n = 500
    eps = g.uniform(0.05, 3.0, n)
    x = g.standard_normal((n, 3))
    a = est.weights("duchi", eps)
    s = duchi_radius(eps, 3)
    whole = est.Accumulator(num=np.zeros(3))
    whole.add(eps, a, s, x)
    parts = []
    for block in np.array_split(g.permutation(n), 7):
        acc = est.Accumulator(num=np.zeros(3))
        acc.add(eps[block], a[block], s[block], x[block])
        parts.append(acc)
    merged = parts[0]
    for p in reversed(parts[1:]):
        merged = merged.merge(p)
    assert np.allclose(merged.mean(), whole.mean(), rtol=1e-12)
    assert merged.sum_w2_spread2 == pytest.approx(whole.sum_w2_spread2, rel=1e-12)
    assert merged.max_w_spread == pytest.approx(whole.max_w_spread, rel=1e-12)
    assert merged.sizes() == pytest.approx(whole.sizes(), rel=1e-12)
    # dropouts: the weights renormalize over who reported
    kept = np.arange(0, n, 3)
    sub = est.Accumulator(num=np.zeros(3))
    sub.add(eps[kept], a[kept], s[kept], x[kept])
    assert np.allclose(sub.mean(), (a[kept] @ x[kept]) / a[kept].sum(), rtol=1e-12)
    assert sub.sum_w2 == pytest.approx(float(np.sum((a[kept] / a[kept].sum()) ** 2)), rel=1e-12)


def test_accumulator_sparse_matches_dense() -> None:
    g = _rng(2)
    n, m = 300, 17
    eps = g.uniform(0.1, 2.0, n)
    j = g.integers(0, m, n)
    v = g.choice([-1.0, 1.0], n)
    a = est.weights("jl", eps)
    dense = np.zeros((n, m))
    dense[np.arange(n), j] = v
    one, two = est.Accumulator(num=np.zeros(m)), est.Accumulator(num=np.zeros(m))
    one.add(eps, a, rr_debias(eps), dense)
    two.add_sparse(eps, a, rr_debias(eps), j, v, m)
    assert np.allclose(one.mean(), two.mean(), rtol=1e-12)
    with pytest.raises(ValueError, match="no reports"):
        est.Accumulator().mean()


# --------------------------------------------------------------------------- error bars


def test_error_bar_reference_values() -> None:
    """§5 E1: RR Hoeffding bound 0.0826 (Profile A, n = 10^4, β = 0.05); E3: Alg 5 bound 0.1549."""
    assert est.rr_half_width(1 / 1080.24, 0.05) == pytest.approx(0.0826, abs=5e-5)
    assert est.jl_half_width(1 / 2160.5, 100, 4435, 0.05) == pytest.approx(0.1549, abs=5e-5)
    # with ε ≤ 1: |θ̂ − θ|² ≤ 9.37·log(2/β)/S (§4.2(a))
    eps = _profile("A", 1000)
    h = est.rr_half_width(1 / est.effective_sizes(eps)["S_RR"], 0.05)
    assert h**2 <= 9.37 * math.log(2 / 0.05) / est.effective_sizes(eps)["S"]
    # Laplace (§4.2(b)) for one user at ε = 2 (w = 1, b = 1): sqrt(2L) + max(sqrt(8L), 2√2·L)
    big_l = math.log(4 / 0.1)
    expected = math.sqrt(2 * big_l) + max(math.sqrt(8 * big_l), 2 * math.sqrt(2) * big_l)
    assert est.laplace_half_width(1.0, 1.0, 1.0, 0.1) == pytest.approx(expected, rel=1e-12)
    assert est.duchi_clt_half_width(2.0, 1, 0.05) == pytest.approx(1.959964 * math.sqrt(2.0))
    with pytest.raises(ValueError, match="beta"):
        est.rr_half_width(1.0, 1.0)


# --------------------------------------------------------------------------- P1 + P2


@pytest.mark.parametrize("kind", KINDS)
def test_p1_p2_laplace(kind: est.WeightKind) -> None:
    eps, reps = _profile("A", 400), 1500
    y = _sim_laplace(eps, reps, _rng(10, KINDS.index(kind)))
    err = est.weighted_mean(est.weights("laplace", eps, kind), y) - BETA_THETA
    mse = est.laplace_mse(eps, BETA_VAR, kind)
    assert abs(err.mean()) <= 4 * math.sqrt(mse / reps)
    lo, hi = _mse_band(reps, _laplace_nu(eps, kind, mse))
    assert lo <= float(np.mean(err**2)) / mse <= hi


@pytest.mark.parametrize("kind", KINDS)
def test_p1_p2_randomized_response(kind: est.WeightKind) -> None:
    eps, reps, theta = _profile("A", 400), 3000, 0.3
    cy = _sim_rr(eps, theta, reps, _rng(11, KINDS.index(kind)))
    err = est.weighted_mean(est.weights("rr", eps, kind), cy) - theta
    mse = est.rr_mse(eps, theta, kind)
    assert abs(err.mean()) <= 4 * math.sqrt(mse / reps)
    lo, hi = _mse_band(reps, 1.0)
    assert lo <= float(np.mean(err**2)) / mse <= hi


@pytest.mark.parametrize("kind", ["paper", "uniform"])
def test_p1_p2_one_bit(kind: est.WeightKind) -> None:
    eps, reps = _profile("B", 400), 3000
    cy = _sim_one_bit(eps, reps, _rng(12, KINDS.index(kind)))
    err = est.weighted_mean(est.weights("rr", eps, kind), cy) - BETA_THETA
    mse = est.rr_mse(eps, BETA_THETA, kind)
    assert abs(err.mean()) <= 4 * math.sqrt(mse / reps)
    lo, hi = _mse_band(reps, 1.0)
    assert lo <= float(np.mean(err**2)) / mse <= hi


@pytest.mark.parametrize("kind", KINDS)
def test_p1_p2_duchi(kind: est.WeightKind) -> None:
    d, reps = 4, 1000
    eps = _profile("A", 300)
    a = est.weights("duchi", eps, kind)
    (theta_hat,) = _sim_duchi(eps, d, reps, _rng(13, KINDS.index(kind)), [a], 0.5)
    theta = np.zeros(d)
    theta[0] = 0.5
    err = theta_hat - theta
    w = a / a.sum()
    b2 = duchi_radius(eps, d) ** 2
    var_k = float(np.sum(w**2 * b2)) / d - np.sum(w**2) * theta**2  # diag of Cov(θ̂)
    assert np.all(np.abs(err.mean(axis=0)) <= 4 * np.sqrt(var_k / reps))
    mse = est.duchi_mse(eps, d, 1.0, 0.25, kind)
    assert float(var_k.sum()) == pytest.approx(mse, rel=1e-12)
    nu = float(var_k.sum() ** 2 / np.sum(var_k**2))  # Satterthwaite (Cov is diagonal here)
    lo, hi = _mse_band(reps, nu)
    assert lo <= float(np.mean(np.sum(err**2, axis=1))) / mse <= hi


def test_p12_paper_printed_b_converges_to_twice_theta() -> None:
    """With the printed B (= 2·c·r/κ_d) the Alg 3 mean is 2θ, far outside 4 SE of θ."""
    d, reps = 3, 400
    eps = _profile("A", 200)
    a = est.weights("duchi", eps)
    (theta_hat,) = _sim_duchi(eps, d, reps, _rng(14), [a], 1.0)  # X = e_1, θ = e_1
    se = math.sqrt(est.duchi_mse(eps, d, 1.0, 1.0) / reps)
    assert abs(theta_hat[:, 0].mean() - 1.0) <= 4 * se
    assert abs(2 * theta_hat[:, 0].mean() - 1.0) > 10 * se


# --------------------------------------------------------------------------- P3


@pytest.mark.parametrize("beta", [0.1, 0.05, 0.01])
def test_p3_rigorous_tail_bounds_hold(beta: float) -> None:
    reps = 2000
    eps = _profile("A", 1000)
    limit = stats.binom.ppf(1 - P_BAND, reps, beta)
    g = _rng(20, int(beta * 100))
    for kind in ("paper", "uniform"):
        a = est.weights("rr", eps, kind)
        acc = est.Accumulator()
        acc.add(eps, a, rr_debias(eps), np.zeros(eps.size))
        cy = _sim_rr(eps, 0.3, reps, g)
        err = np.abs(est.weighted_mean(a, cy) - 0.3)
        assert np.sum(err > est.rr_half_width(acc.sum_w2_spread2, beta)) <= limit
        a = est.weights("laplace", eps, kind)
        acc = est.Accumulator()
        acc.add(eps, a, 2 / eps, np.zeros(eps.size))
        bound = est.laplace_half_width(acc.sum_w2, acc.sum_w2_spread2, acc.max_w_spread, beta)
        err = np.abs(est.weighted_mean(a, _sim_laplace(eps, reps, g)) - BETA_THETA)
        assert np.sum(err > bound) <= limit


def test_p3_hoeffding_bar_is_the_spec_formula() -> None:
    eps = _profile("A", 1000)
    acc = est.Accumulator()
    acc.add(eps, est.weights("rr", eps), rr_debias(eps), np.zeros(eps.size))
    s_rr = est.effective_sizes(eps)["S_RR"]
    expected = math.sqrt(2 * math.log(2 / 0.05) / s_rr)
    assert est.rr_half_width(acc.sum_w2_spread2, 0.05) == pytest.approx(expected, rel=1e-12)


# --------------------------------------------------------------------------- P5, P6


@pytest.mark.parametrize(
    ("profile", "laplace", "rr"),
    [("A", 24.97, 22.31), ("B", 403.0, 107.34)],
)
def test_p5_heterogeneity_gain_one_dimensional(profile: str, laplace: float, rr: float) -> None:
    """MSE_uniform/MSE_weighted: analytic values of spec §4.5 P5 and the simulated ratio."""
    eps, reps = _profile(profile, 200), 4000
    analytic_lap = est.laplace_mse(eps, BETA_VAR, "uniform") / est.laplace_mse(eps, BETA_VAR)
    analytic_rr = est.rr_mse(eps, 0.3, "uniform") / est.rr_mse(eps, 0.3)
    assert analytic_lap == pytest.approx(laplace, abs=0.01 + 1e-4 * laplace)
    assert analytic_rr == pytest.approx(rr, abs=0.01)
    g = _rng(30, ord(profile))
    y = _sim_laplace(eps, reps, g)
    e_u = est.weighted_mean(est.weights("laplace", eps, "uniform"), y) - BETA_THETA
    e_w = est.weighted_mean(est.weights("laplace", eps), y) - BETA_THETA
    assert _log_ratio_ok(e_u**2, e_w**2, analytic_lap)
    cy = _sim_rr(eps, 0.3, reps, g)
    e_u = est.weighted_mean(est.weights("rr", eps, "uniform"), cy) - 0.3
    e_w = est.weighted_mean(est.weights("rr", eps), cy) - 0.3
    assert _log_ratio_ok(e_u**2, e_w**2, analytic_rr)


def test_p5_closed_form_gain_values_of_the_spec() -> None:
    a, b = _profile("A", 1000), _profile("B", 1000)
    assert est.laplace_mse(a, 1.0, "uniform") / est.laplace_mse(a, 1.0) == pytest.approx(
        22.6, abs=0.05
    )
    assert est.laplace_mse(b, 1.0, "uniform") / est.laplace_mse(b, 1.0) == pytest.approx(
        145.7, abs=0.05
    )
    assert est.rr_mse(a, 0.0, "uniform") / est.rr_mse(a, 0.0) == pytest.approx(21.9, abs=0.05)
    assert est.rr_mse(b, 0.0, "uniform") / est.rr_mse(b, 0.0) == pytest.approx(98.0, abs=0.05)
    for d in (2, 8, 32, 128):
        gain = est.duchi_mse(a, d, 1.0, 0.0, "uniform") / est.duchi_mse(a, d, 1.0, 0.0)
        assert gain == pytest.approx(21.9, abs=0.05)
    gain_b = est.duchi_mse(b, 10, 1.0, 0.0, "uniform") / est.duchi_mse(b, 10, 1.0, 0.0)
    assert gain_b == pytest.approx(97.8, abs=0.05)
    # closed form of §4.4 for RR at θ = 0: mean(c²)·mean(1/c²)
    c2 = rr_debias(a) ** 2
    ratio = est.rr_mse(a, 0.0, "uniform") / est.rr_mse(a, 0.0)
    assert ratio == pytest.approx(float(np.mean(c2) * np.mean(1 / c2)), rel=1e-12)


@pytest.mark.parametrize("profile", ["A", "B"])
def test_p5_heterogeneity_gain_duchi(profile: str) -> None:
    d, reps = 10, 1500
    eps = _profile(profile, 200)
    kinds: tuple[est.WeightKind, ...] = ("uniform", "paper")
    a_list = [est.weights("duchi", eps, k) for k in kinds]
    uni, pap = _sim_duchi(eps, d, reps, _rng(31, ord(profile)), a_list, 0.0)
    analytic = est.duchi_mse(eps, d, 1.0, 0.0, "uniform") / est.duchi_mse(eps, d, 1.0, 0.0)
    assert _log_ratio_ok(np.sum(uni**2, axis=1), np.sum(pap**2, axis=1), analytic)


def test_p6_eps_above_one_pitfall_and_inverse_variance_fix() -> None:
    """1 user at ε = 10, 999 at ε = 1: paper ε² weights are 2.60× worse than uniform, the
    inverse-variance weights 0.997× (spec §2.6, P6); simulated ratios within 4 SD."""
    eps = np.concatenate([[10.0], np.ones(999)])
    d, reps = 2, 1000
    mse = {k: est.duchi_mse(eps, d, 1.0, 0.0, k) for k in KINDS}
    assert mse["paper"] / mse["uniform"] == pytest.approx(2.60, abs=0.005)
    assert mse["inverse_variance"] / mse["uniform"] == pytest.approx(0.997, abs=0.0005)
    a_list = [est.weights("duchi", eps, k) for k in KINDS]
    pap, uni, inv = _sim_duchi(eps, d, reps, _rng(40), a_list, 0.0)
    e2 = {k: np.sum(v**2, axis=1) for k, v in zip(KINDS, (pap, uni, inv), strict=True)}
    assert _log_ratio_ok(e2["paper"], e2["uniform"], mse["paper"] / mse["uniform"])
    assert _log_ratio_ok(
        e2["inverse_variance"], e2["uniform"], mse["inverse_variance"] / mse["uniform"]
    )


# --------------------------------------------------------------------------- P7


def _p7_check(d: int, beta: float, reps: int, n: int) -> None:
    """q_{1−β}(‖err‖²)/mean(‖err‖²) ≈ χ²_{d,1−β}/d (Gaussian limit, θ = 0: isotropic).

    SD of the log ratio ≤ SD(q̂)/q + SD(mean)/mean (no covariance assumed), with
    Var q̂ ≈ β(1−β)/(R f(q)²) for f the χ²_d density and Var mean = 2d/R in χ²_d units.
    """
    eps = _profile("A", n)
    (theta_hat,) = _sim_duchi(eps, d, reps, _rng(50, d, reps), [est.weights("duchi", eps)], 0.0)
    e2 = np.sum(theta_hat**2, axis=1)
    observed = float(np.quantile(e2, 1 - beta) / e2.mean())
    q = float(stats.chi2.ppf(1 - beta, d))
    sd_q = math.sqrt(beta * (1 - beta) / reps) / float(stats.chi2.pdf(q, d)) / q
    sd_m = math.sqrt(2 * d / reps) / d
    assert abs(math.log(observed) - math.log(q / d)) <= 4 * (sd_q + sd_m)


@pytest.mark.parametrize("d", [1, 2, 8])
def test_p7_quantile_to_mean_ratio_follows_chi_square(d: int) -> None:
    _p7_check(d, 0.1, 3000, 200)


@pytest.mark.slow
@pytest.mark.parametrize("d", [2, 8, 32, 128])
def test_p7_sweep_at_beta_001(d: int) -> None:
    """Spec P7 at β = 0.01: 4.61 (d=2), 2.51 (d=8), 1.67 (d=32), 1.31 (d=128)."""
    _p7_check(d, 0.01, 4000 if d <= 32 else 2500, 200 if d <= 32 else 120)


# --------------------------------------------------------------------------- P9


def test_p9_adding_users_never_hurts_weighted_rr() -> None:
    n = 10_000
    base = np.ones(n // 2)
    more = _profile("A", n)
    assert est.rr_mse(base, 0.0) * n == pytest.approx(9.365, abs=5e-4)
    assert est.rr_mse(more, 0.0) * n == pytest.approx(9.257, abs=5e-4)
    assert est.rr_mse(more, 0.0, "uniform") * n == pytest.approx(202.7, abs=0.05)
    assert est.rr_mse(more, 0.0, "uniform") / est.rr_mse(base, 0.0, "uniform") > 21.6


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(1e-3, 20.0), min_size=1, max_size=20),
    st.lists(st.floats(1e-3, 20.0), min_size=1, max_size=20),
)
def test_p9_property_weighted_rr_mse_decreases(first: list[float], extra: list[float]) -> None:
    """At θ = 0 the paper's RR weights are inverse-variance, so MSE = 1/S_RR only decreases."""
    a, b = np.array(first), np.array(first + extra)
    assert est.rr_mse(b, 0.0) <= est.rr_mse(a, 0.0) * (1 + 1e-12)


# --------------------------------------------------------------------------- Alg 5


def _jl_run(
    eps: FloatArray, p: FloatArray, m: int, seed: int, g: np.random.Generator
) -> tuple[FloatArray, est.Accumulator]:
    k = p.size
    x = g.choice(k, size=eps.size, p=p)
    j, s = jl_report(x, eps, m, seed, g, d=k)
    acc = est.Accumulator(num=np.zeros(m))
    c = rr_debias(eps)
    acc.add_sparse(eps, est.weights("jl", eps), c, j, s * c * math.sqrt(m), m)
    return jl_estimate(acc.mean(), m, k, seed), acc


def _zipf(k: int) -> FloatArray:
    p = 1 / np.arange(1, k + 1)
    return np.asarray(p / p.sum(), dtype=np.float64)


def test_alg5_unbiased_with_fresh_phi_and_bound_holds() -> None:
    """Fresh Φ each rep: mean p̂ ≈ p (Var ≤ Σw²c² + Σ_{u≠v} p(u)²/m per coordinate, 4 SE), and
    ‖p̂ − p‖∞ exceeds the §4.2(d) bound in at most the binomial count of reps."""
    k, beta, reps = 20, 0.05, 300
    eps, p = _profile("A", 2000), _zipf(20)
    m = jl_dimension(k, beta, est.effective_sizes(eps)["S_RR"])
    g = _rng(60)
    runs = [_jl_run(eps, p, m, 1000 + r, g) for r in range(reps)]
    p_hat = np.array([r[0] for r in runs])
    acc = runs[0][1]
    var = acc.sum_w2_spread2 + (np.sum(p**2) - p**2) / m
    assert np.all(np.abs(p_hat.mean(axis=0) - p) <= 4 * np.sqrt(var / reps))
    bound = est.jl_half_width(acc.sum_w2_spread2, k, m, beta)
    exceed = int(np.sum(np.max(np.abs(p_hat - p), axis=1) > bound))
    assert exceed <= stats.binom.ppf(1 - P_BAND, reps, beta)


def test_alg5_fixed_phi_targets_phi_t_phi_p() -> None:
    """With a fixed Φ the mean of p̂ is ΦᵀΦp, not p (spec §2.5 test pitfall)."""
    k, reps, m, seed = 8, 400, 6, 77
    eps, p = _profile("A", 1000), _zipf(8)
    g = _rng(61)
    p_hat = np.array([_jl_run(eps, p, m, seed, g)[0] for _ in range(reps)])
    phi = jl_signs(seed, m, k, 0, m).astype(np.float64) / math.sqrt(m)
    target = phi.T @ phi @ p
    acc = _jl_run(eps, p, m, seed, g)[1]
    se = math.sqrt(acc.sum_w2_spread2 / reps)  # Var(p̂(v)|Φ) ≤ Σ w_i² c_i²
    assert np.all(np.abs(p_hat.mean(axis=0) - target) <= 4 * se)
    assert np.max(np.abs(target - p)) > 8 * se  # the two targets differ: the test can tell


# --------------------------------------------------------------------------- projections


@settings(max_examples=80, deadline=None)
@given(st.integers(2, 30), st.floats(0.0, 0.5), st.integers(0, 2**32 - 1))
def test_simplex_projection_at_most_doubles_linf_error(k: int, delta: float, seed: int) -> None:
    g = np.random.default_rng(seed)
    p = g.dirichlet(np.ones(k))
    p_hat = p + g.uniform(-delta, delta, k)
    proj = est.project_simplex(p_hat)
    assert np.all(proj >= 0)
    assert proj.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.max(np.abs(proj - p)) <= 2 * np.max(np.abs(p_hat - p)) + 1e-12
    assert np.allclose(est.project_simplex(proj), proj, atol=1e-12)


def test_simplex_projection_can_double_the_error() -> None:
    """§6 item 15: p = (1/2, 1/2, 0, …), p̂ = p − δ on the first two, +δ elsewhere."""
    k, delta = 2000, 0.01
    p = np.zeros(k)
    p[:2] = 0.5
    p_hat = p + delta
    p_hat[:2] = 0.5 - delta
    err = np.max(np.abs(est.project_simplex(p_hat) - p))
    assert err > 1.9 * delta


def test_ball_projection() -> None:
    assert np.allclose(est.project_ball(np.array([3.0, 4.0]), 1.0), [0.6, 0.8])
    assert np.array_equal(est.project_ball(np.array([0.3, 0.4]), 1.0), [0.3, 0.4])
    assert np.array_equal(est.project_ball(np.zeros(2), 1.0), np.zeros(2))

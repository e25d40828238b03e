"""The classic mean mechanisms on [−1, 1] and their theory (convention 8 of
docs/architecture.md: each sampler beside its variance): the Laplace mechanism, Duchi et al.'s
mechanism (scalar, and the multidimensional one on [−1, 1]^d), the Piecewise mechanism (PM) and
the Hybrid mechanism (HM), and the coordinate sampling of Wang et al., ICDE 2019, Alg. 4.

Sources (``fedldp.protocol.classic`` names the papers): Duchi, Jordan, Wainwright (JASA 2018),
as restated in Wang et al. 2019 (Alg. 1 scalar, §IV-A multidimensional); Wang et al. 2019,
Alg. 2 (PM), Alg. 3 (HM), Alg. 4 (sampling k of d coordinates), Lemmas 1–5 (variances).

Every sampler takes its uniforms from the caller (the protocol draws them from the user's own
stream, first axis the user) and is vectorised over users and coordinates; ε is per user.
Formulas are written with h = e^{−ε/2} so that no ε overflows:

* PM at ε: C = (e^{ε/2}+1)/(e^{ε/2}−1) = (1+h)/(1−h); l(t) = (C+1)t/2 − (C−1)/2, r(t) = l(t) +
  C − 1; with probability e^{ε/2}/(e^{ε/2}+1) = 1/(1+h) the report is uniform on [l(t), r(t)],
  otherwise uniform on [−C, l(t)) ∪ (r(t), C]. Unbiased, Var = t²/(e^{ε/2}−1) +
  (e^{ε/2}+3)/(3(e^{ε/2}−1)²) (Lemma 1).
* Duchi (scalar) at ε: ±c with c = (e^ε+1)/(e^ε−1), Pr[+c] = 1/2 + t(e^ε−1)/(2e^ε+2).
  Unbiased, Var = c² − t².
* HM at ε: PM with probability α, Duchi otherwise; α = 1 − e^{−ε/2} for ε > ε*, else 0, with
  ε* = ln((−5 + 2∛(6353 − 405√241) + 2∛(6353 + 405√241))/27) ≈ 0.61 (Lemma 4). Unbiased, Var =
  α·Var_PM + (1 − α)·Var_Duchi (a mixture of two unbiased reports).
* Duchi (multidimensional, t ∈ [−1, 1]^d): v ∈ {−1, 1}^d with Pr[v_j = 1] = (1 + t_j)/2; with
  probability e^ε/(e^ε+1) the report is uniform on T⁺ = {z ∈ {−B, B}^d : ⟨z, v⟩ ≥ 0}, otherwise
  on T⁻ = {⟨z, v⟩ ≤ 0} (the ties ⟨z, v⟩ = 0 exist only for even d), with B = c·C_d and C_d =
  2^{d−1}/binom(d−1, (d−1)/2) (d odd), (2^{d−1} + binom(d, d/2)/2)/binom(d−1, d/2) (d even).
  Unbiased (E[z_j | v] = v_j·B·(2π−1)·binom/|T⁺|, which B inverts); every coordinate is ±B, so
  Var(z_j) = B² − t_j². ε-LDP: any z is in T⁺(v) or T⁻(v) or both, with probability π/|T⁺|,
  (1−π)/|T⁻| (|T⁺| = |T⁻|) or 1/|T⁺|, whose ratio is at most e^ε.
* Alg. 4 (PM, HM; here Laplace too): k = max(1, min(d, ⌊ε/2.5⌋)) coordinates drawn uniformly
  without replacement; each reports (d/k)·M(t_j) with M the scalar mechanism at ε/k, the others
  0. Unbiased; per coordinate Var = (d/k)(Var_M(t_j; ε/k) + t_j²) − t_j² (Lemma 5). ε-LDP by
  composition over the k coordinates (the sampled set does not depend on the data).
* Laplace at ε: t + Lap(2/ε), Var = 8/ε².

Every report's variance is affine in t_j² per coordinate: Var(Y_j | t) = A + B·t_j², with (A, B)
of ``variance_terms``; the inverse-variance weights use its worst case over [−1, 1], A + max(B, 0).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from fedldp.protocol.api import FloatArray, IntArray, check_epsilons

__all__ = [
    "EPS_STAR",
    "MAX_DIMENSION",
    "SAMPLING_STEP",
    "Mechanism",
    "duchi_bound",
    "duchi_multi_sample",
    "duchi_sample",
    "exact_mse",
    "hm_alpha",
    "hm_sample",
    "inverse_variance_weights",
    "laplace_sample",
    "pm_bound",
    "pm_sample",
    "sampled_coordinates",
    "variance_terms",
    "worst_variance",
]

Mechanism = Literal["laplace", "duchi", "pm", "hm"]
"""The scalar mechanism a classic mean protocol runs (``duchi`` with d > 1: the
multidimensional one)."""

EPS_STAR = math.log(
    (
        -5.0
        + 2.0 * (6353.0 - 405.0 * math.sqrt(241.0)) ** (1.0 / 3.0)
        + 2.0 * (6353.0 + 405.0 * math.sqrt(241.0)) ** (1.0 / 3.0)
    )
    / 27.0
)
"""ε* ≈ 0.61 of Wang et al. 2019, Lemma 4: HM runs PM with probability α > 0 only above it."""

SAMPLING_STEP = 2.5
"""Alg. 4's k = max(1, min(d, ⌊ε/2.5⌋))."""

MAX_DIMENSION = 4096
"""The largest d of the vector protocols (a report is a d-vector of float64)."""


def _h(epsilon: ArrayLike) -> FloatArray:
    """h = e^{−ε/2}, and 1 − h computed without cancellation as −expm1(−ε/2)."""
    return np.asarray(np.exp(-0.5 * check_epsilons(epsilon)), dtype=np.float64)


def _one_minus_h(epsilon: ArrayLike) -> FloatArray:
    return np.asarray(-np.expm1(-0.5 * check_epsilons(epsilon)), dtype=np.float64)


def sampled_coordinates(epsilon: ArrayLike, d: int) -> IntArray:
    """Alg. 4's k per user: max(1, min(d, ⌊ε/2.5⌋)) (1 when d = 1)."""
    eps = check_epsilons(epsilon)
    k = np.floor(eps / SAMPLING_STEP)
    return np.asarray(np.clip(k, 1, d), dtype=np.int64)


def pm_bound(epsilon: ArrayLike) -> FloatArray:
    """C = (e^{ε/2}+1)/(e^{ε/2}−1): PM's reports lie in [−C, C]."""
    return np.asarray((1.0 + _h(epsilon)) / _one_minus_h(epsilon), dtype=np.float64)


def duchi_bound(epsilon: ArrayLike, d: int = 1) -> FloatArray:
    """B = c·C_d with c = (e^ε+1)/(e^ε−1): every coordinate of a Duchi report is ±B (C_1 = 1)."""
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    eps = check_epsilons(epsilon)
    return np.asarray(_duchi_constant(d) / np.tanh(eps / 2.0), dtype=np.float64)


@functools.lru_cache(maxsize=64)
def _duchi_constant(d: int) -> float:
    """C_d, in exact rational arithmetic (the binomials of d = 4096 exceed a float)."""
    if d % 2:
        return float(Fraction(2 ** (d - 1), math.comb(d - 1, (d - 1) // 2)))
    return float(Fraction(2**d + math.comb(d, d // 2), 2 * math.comb(d - 1, d // 2)))


def hm_alpha(epsilon: ArrayLike) -> FloatArray:
    """HM's probability of running PM: 1 − e^{−ε/2} above ε*, else 0 (Lemma 4)."""
    eps = check_epsilons(epsilon)
    return np.asarray(np.where(eps > EPS_STAR, _one_minus_h(eps), 0.0), dtype=np.float64)


def pm_sample(t: ArrayLike, epsilon: ArrayLike, u_keep: ArrayLike, u_pos: ArrayLike) -> FloatArray:
    """PM (Alg. 2) on t ∈ [−1, 1] (any shape; ε broadcast to it), from two uniforms per value:
    ``u_keep`` chooses the centre piece [l(t), r(t)] (below 1/(1+h)), ``u_pos`` the position."""
    x = np.asarray(t, dtype=np.float64)
    eps = np.broadcast_to(check_epsilons(epsilon), x.shape)
    c = pm_bound(eps)
    left = (c + 1.0) / 2.0 * x - (c - 1.0) / 2.0
    right = left + c - 1.0
    pos = np.asarray(u_pos, dtype=np.float64)
    centre = left + (c - 1.0) * pos
    s = (c + 1.0) * pos  # a point of the two outer pieces, of total length C + 1
    outer = np.where(s < left + c, s - c, right + (s - (left + c)))
    keep = np.asarray(u_keep, dtype=np.float64) < 1.0 / (1.0 + _h(eps))
    return np.asarray(np.where(keep, centre, outer), dtype=np.float64)


def duchi_sample(t: ArrayLike, epsilon: ArrayLike, u: ArrayLike) -> FloatArray:
    """Duchi's scalar mechanism (Wang et al. 2019, Alg. 1) on t ∈ [−1, 1], one uniform each."""
    x = np.asarray(t, dtype=np.float64)
    eps = np.broadcast_to(check_epsilons(epsilon), x.shape)
    half = np.tanh(eps / 2.0) / 2.0  # (e^ε − 1)/(2e^ε + 2)
    plus = np.asarray(u, dtype=np.float64) < 0.5 + half * x
    c = duchi_bound(eps)
    return np.asarray(np.where(plus, c, -c), dtype=np.float64)


def hm_sample(
    t: ArrayLike, epsilon: ArrayLike, u_mix: ArrayLike, u_a: ArrayLike, u_b: ArrayLike
) -> FloatArray:
    """HM (Alg. 3): PM (uniforms ``u_a``, ``u_b``) if ``u_mix`` < α, else Duchi (``u_a``)."""
    x = np.asarray(t, dtype=np.float64)
    eps = np.broadcast_to(check_epsilons(epsilon), x.shape)
    pm = pm_sample(x, eps, u_a, u_b)
    duchi = duchi_sample(x, eps, u_a)
    return np.asarray(np.where(np.asarray(u_mix) < hm_alpha(eps), pm, duchi), dtype=np.float64)


def laplace_sample(t: ArrayLike, epsilon: ArrayLike, noise: ArrayLike) -> FloatArray:
    """t + (2/ε)·``noise``, ``noise`` standard Laplace draws."""
    x = np.asarray(t, dtype=np.float64)
    eps = np.broadcast_to(check_epsilons(epsilon), x.shape)
    return np.asarray(x + 2.0 / eps * np.asarray(noise, dtype=np.float64), dtype=np.float64)


def duchi_multi_sample(
    t: ArrayLike,
    epsilon: ArrayLike,
    u_v: ArrayLike,
    u_side: ArrayLike,
    u_count: ArrayLike,
    u_perm: ArrayLike,
) -> FloatArray:
    """Duchi's multidimensional mechanism on rows t ∈ [−1, 1]^d (n, d), ε per row: ``u_v``
    (n, d) draws v, ``u_side`` (n,) chooses T⁺ (below e^ε/(e^ε+1)) or T⁻, ``u_count`` (n,) the
    number m of coordinates where z agrees with v (law ∝ binom(d, m) over m ≥ d/2, the
    uniform law on T⁺ by counts), ``u_perm`` (n, d) which ones (the m smallest). A report of T⁻
    is the negation of one of T⁺ (a bijection)."""
    x = np.asarray(t, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError("t must be an (n, d) array")
    n, d = x.shape
    eps = check_epsilons(epsilon)
    v = np.where(np.asarray(u_v) < (1.0 + x) / 2.0, 1.0, -1.0)
    low = (d + 1) // 2  # the smallest m with 2m − d ≥ 0
    m_values = np.arange(low, d + 1)
    log_w = np.array(
        [math.lgamma(d + 1) - math.lgamma(m + 1) - math.lgamma(d - m + 1) for m in m_values]
    )
    w = np.exp(log_w - log_w.max())
    cdf = np.cumsum(w) / w.sum()
    pick = np.minimum(np.searchsorted(cdf, np.asarray(u_count), side="right"), cdf.size - 1)
    m = m_values[pick]
    rank = np.argsort(np.argsort(np.asarray(u_perm), axis=1), axis=1)
    agree = np.where(rank < m[:, None], 1.0, -1.0)
    side = np.where(np.asarray(u_side) < 1.0 / (1.0 + np.exp(-eps)), 1.0, -1.0)
    b = duchi_bound(eps, d)
    return np.asarray((b * side)[:, None] * agree * v, dtype=np.float64).reshape(n, d)


def variance_terms(
    mechanism: Mechanism, epsilon: ArrayLike, d: int = 1, sampled: bool = False
) -> tuple[FloatArray, FloatArray]:
    """(A, B) per user with Var(Y_j | t) = A + B·t_j² for every coordinate j of the report
    (``sampled``: Alg. 4 over d coordinates at k = ``sampled_coordinates``, the report scaled by
    d/k; otherwise the scalar mechanism, or Duchi's multidimensional one when d > 1)."""
    eps = check_epsilons(epsilon)
    k = sampled_coordinates(eps, d) if sampled else np.ones_like(eps, dtype=np.int64)
    e = eps / k
    h, g = _h(e), _one_minus_h(e)
    c2 = (1.0 / np.tanh(e / 2.0)) ** 2
    a_pm, b_pm = h * (1.0 + 3.0 * h) / (3.0 * g**2), h / g
    if mechanism == "laplace":
        a, b = 8.0 / e**2, np.zeros_like(e)
    elif mechanism == "pm":
        a, b = a_pm, b_pm
    elif mechanism == "hm":
        alpha = hm_alpha(e)
        a, b = alpha * a_pm + (1.0 - alpha) * c2, alpha * b_pm - (1.0 - alpha)
    elif mechanism == "duchi":
        if sampled:
            raise ValueError("Duchi's mechanism is not sampled (it reports every coordinate)")
        a, b = duchi_bound(e, d) ** 2, -np.ones_like(e)
    else:
        raise ValueError(f"unknown mechanism {mechanism!r}")
    if sampled:
        ratio = d / k
        a, b = ratio * a, ratio * (b + 1.0) - 1.0
    return np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)


def worst_variance(a: ArrayLike, b: ArrayLike) -> FloatArray:
    """sup over t ∈ [−1, 1] of A + B·t²: A + max(B, 0) (PM at |t| = 1, Duchi at t = 0)."""
    return np.asarray(np.asarray(a) + np.maximum(np.asarray(b), 0.0), dtype=np.float64)


def inverse_variance_weights(
    mechanism: Mechanism, epsilon: ArrayLike, d: int = 1, sampled: bool = False
) -> FloatArray:
    """a_i = 1/V*_i, V*_i the worst-case variance of a coordinate of user i's report (the
    estimate's weights are a_i/Σa)."""
    a, b = variance_terms(mechanism, epsilon, d, sampled)
    return np.asarray(1.0 / worst_variance(a, b), dtype=np.float64)


def exact_mse(
    mechanism: Mechanism,
    means: ArrayLike,
    epsilon: ArrayLike,
    weights: ArrayLike | None = None,
    sampled: bool = False,
) -> float:
    """E‖θ̂ − Σ w_i t_i‖² of θ̂ = Σ w_i Y_i, w = ``weights``/Σ (None: uniform), for users' clipped
    means ``means`` (n,) or (n, d): Σ_i w_i² Σ_j (A_i + B_i t_ij²), the papers' exact variance
    on these data (what the experiments draw as lines and the tests compare with)."""
    t = np.clip(np.asarray(means, dtype=np.float64), -1.0, 1.0)
    t2 = t.reshape(t.shape[0], -1) ** 2
    d = t2.shape[1]
    eps = check_epsilons(epsilon)
    a, b = variance_terms(mechanism, eps, d, sampled)
    w = np.ones_like(eps) if weights is None else np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    return float(np.sum(w**2 * (d * a + b * t2.sum(axis=1))))

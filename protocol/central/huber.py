"""User-level central-DP mean estimation of Zhao, Lai, Shen, Li, Wu, Liu (NeurIPS 2024), "A Huber
Loss Minimization Approach to Mean Estimation under User-level Differential Privacy", as pure math.

Spec: huber-user-level-dp.md. Every estimator works on the users' means ``y`` (n, d) and their
public sample counts ``m`` (n,) only (§1.3); randomness comes from an explicit numpy Generator (the
trusted server's).

* **WME**, the baseline, is ``fedldp.protocol.central.wme``; the noise constants (with the d = 1
correction of the paper's (7)) are ``fedldp.protocol.mechanisms.dp_noise``.
* **HLM** (the paper's method, §4): μ̂₀ = argmin Σ w_i φ_{T_i}(s, y_i) by the IRLS iteration of
  App. A (29), released as Clip(μ̂₀, R_c) + N(0, (S/α)² I). S is the β-smooth sensitivity of
  Def. 5 (balanced users) or Def. 6 (imbalanced users, with the h̃ fix of §8 E5), capped at 2R_c,
  with Δ(D) replaced by Δ̃, the Hamming distance to a fixed, data-independent set (§4.4,
  ``distance``): exact for d = 1 balanced, lattice balls for d > 1, the θ′-cover for imbalanced
  users. ``paper-proxy``
  (§4.9) replaces S by its leading term: NOT differentially private.

The noise constants α, β (``fedldp.protocol.mechanisms.dp_noise``) come from the release's ε, which
the catalogue protocols (``protocols``) take as the smallest declared ε: one participant with a low
ε shrinks α and raises everyone's noise (S/α), so a study should set ``epsilon_min``. For d = 1 the
``dp`` calibration spends at most ε = ``dp_noise.ONE_D_EPSILON_CAP`` (e^ε overflows beyond).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from fedldp.protocol.api import (
    Calibration,
    FloatArray,
    IntArray,
    as_user_means,
    check_positive,
    noise_constants,
)
from fedldp.protocol.central.distance import (
    delta_cover_1d,
    delta_exact_1d,
    delta_lattice,
    lattice_spacing,
)

__all__ = [
    "THETA_FRACTION",
    "HLMRelease",
    "HuberDesign",
    "SmoothSensitivity",
    "balanced_n_condition",
    "clip_ball",
    "hlm_delta_tilde",
    "hlm_proxy_sensitivity",
    "hlm_release",
    "hlm_sensitivity",
    "huber_design",
    "huber_minimize",
    "huber_objective",
    "imbalanced_n_condition",
    "proxy_sensitivity_balanced",
    "proxy_sensitivity_imbalanced",
    "smooth_sensitivity_balanced",
    "smooth_sensitivity_imbalanced",
    "theta_prime",
    "topsum",
]

THETA_FRACTION = 0.9
"""θ′ = 0.9·θ′_max for the imbalanced cover set (§4.7 [PROPOSAL])."""

# --------------------------------------------------------------------------- HLM minimizer


def huber_objective(s: ArrayLike, y: ArrayLike, weights: ArrayLike, t: ArrayLike) -> float:
    """Σ_i w_i φ_{T_i}(s, y_i) (paper (8)); φ = ½r² for r <= T, T·r − ½T² beyond."""
    ym = as_user_means(y)
    r = np.linalg.norm(ym - np.asarray(s, dtype=np.float64).reshape(1, -1), axis=1)
    tt = np.broadcast_to(np.asarray(t, dtype=np.float64), r.shape)
    phi = np.where(r <= tt, 0.5 * r * r, tt * r - 0.5 * tt * tt)
    return float(np.asarray(weights, dtype=np.float64) @ phi)


def huber_minimize(
    y: ArrayLike, weights: ArrayLike, t: ArrayLike, tolerance: float, max_iter: int
) -> tuple[FloatArray, IntArray]:
    """argmin_s Σ w_i φ_{T_i}(s, y_i) by the IRLS iteration (29) of App. A (§4.2).

    ``y`` is (..., n, d) (leading axes: independent problems, e.g. Monte Carlo trials), weights
    and T broadcast to (..., n). Starts at Σ w_i y_i (§8 E12, E30); u_i = w_i·min(1, T_i/‖c − y_i‖)
    (r = 0 gives 1); stops when ‖c_new − c‖ < ξ = tolerance·min_i T_i (returning c_new) or after
    ``max_iter`` steps. A finished problem is frozen, so each result is the same whether it is
    solved alone or with others. Returns (minimizers (..., d), iterations (...)).
    """
    ym = np.asarray(y, dtype=np.float64)
    if ym.ndim < 2:
        raise ValueError("y must be (..., n, d)")
    lead = ym.shape[:-2]
    w = np.broadcast_to(np.asarray(weights, dtype=np.float64), ym.shape[:-1])
    tt = np.broadcast_to(np.asarray(t, dtype=np.float64), ym.shape[:-1])
    xi = tolerance * np.min(tt, axis=-1)
    c = np.einsum("...n,...nd->...d", w, ym) / np.sum(w, axis=-1)[..., None]
    active = np.ones(lead, dtype=np.bool_)
    iters = np.zeros(lead, dtype=np.int64)
    for _ in range(max_iter):
        r = np.sqrt(np.sum((ym - c[..., None, :]) ** 2, axis=-1))
        ratio = np.divide(tt, r, out=np.ones_like(r), where=r > tt)
        u = w * np.minimum(1.0, ratio)
        new = np.einsum("...n,...nd->...d", u, ym) / np.sum(u, axis=-1)[..., None]
        step = np.sqrt(np.sum((new - c) ** 2, axis=-1))
        c = np.where(active[..., None], new, c)
        iters += active
        active &= step >= xi
        if not np.any(active):
            break
    return c, iters


# --------------------------------------------------------------------------- HLM design


@dataclass(frozen=True)
class HuberDesign:
    """Public constants of one HLM release, from the public counts m_i (§4.1, §4.7).

    Balanced users (every m_i equal): w_i = 1/n, T_i = T = A/√m. Otherwise m_c = γN/n,
    w_i = (m_i ∧ m_c)/Σ_j (m_j ∧ m_c), T_i = A/√(m_i ∧ m_c), k₀ = ⌊n/(8γ)⌋ and the cover
    fraction θ′ (None when no θ′ works: Δ̃ = n, "configuration infeasible").
    """

    weights: FloatArray
    t: FloatArray
    balanced: bool
    n: int
    total: int  # N
    gamma: float
    m_cap: float  # m_c
    k0: int
    theta: float | None


def topsum(values: ArrayLike, k: int) -> float:
    """Sum of the k largest values (0 for k <= 0, the full sum for k >= n)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if k <= 0:
        return 0.0
    if k >= v.size:
        return float(v.sum())
    return float(np.partition(v, v.size - k)[v.size - k :].sum())


def _cover_bounds(w: FloatArray, t: FloatArray, k0: int, theta: float) -> tuple[float, float]:
    """(H(θ′), M(θ′)) of §4.7: Q″(θ′) lies inside the Δ set when H < M."""
    tbar = float(w @ t)
    denom = 1.0 - topsum(w, k0)
    big_h = math.inf if denom <= 0 else topsum(w * (t + theta * (tbar + t)), k0) / denom
    return big_h, (1.0 - theta) * float(t.min()) - theta * tbar


def theta_prime(weights: ArrayLike, t: ArrayLike, k0: int) -> float | None:
    """θ′ = 0.9·sup{θ : H(θ) < M(θ)} (§4.7, bisection), or None when H(0) >= M(0) or k₀ < 1."""
    w = np.asarray(weights, dtype=np.float64)
    tt = np.asarray(t, dtype=np.float64)
    if k0 < 1:
        return None
    h0, m0 = _cover_bounds(w, tt, k0, 0.0)
    if not h0 < m0:
        return None
    lo, hi = 0.0, 1.0  # M(1) = −T̄ < 0 <= H(1)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        hm, mm = _cover_bounds(w, tt, k0, mid)
        if hm < mm:
            lo = mid
        else:
            hi = mid
    return THETA_FRACTION * lo


def huber_design(counts: ArrayLike, scale_a: float, gamma: float = 1.0) -> HuberDesign:
    """The public HLM constants from the counts m_i (>= 1), A and γ (§4.7, §6.3, §4.10)."""
    m = np.asarray(counts, dtype=np.float64).ravel()
    if m.size < 2 or np.any(m < 1) or not np.all(np.isfinite(m)):
        raise ValueError("HLM needs at least 2 users, each with m_i >= 1")
    a = check_positive(scale_a, "scale_a")
    g = float(gamma)
    if not (math.isfinite(g) and g >= 1):
        raise ValueError(f"gamma must be finite and >= 1, got {gamma!r}")
    n, total = int(m.size), int(m.sum())
    if np.all(m == m[0]):
        t = np.full(n, a / math.sqrt(m[0]))
        return HuberDesign(np.full(n, 1.0 / n), t, True, n, total, g, float(m[0]), n // 4, None)
    m_cap = g * total / n
    capped = np.minimum(m, m_cap)
    w = capped / capped.sum()
    t = a / np.sqrt(capped)
    k0 = math.floor(n / (8.0 * g))
    return HuberDesign(w, t, False, n, total, g, m_cap, k0, theta_prime(w, t, k0))


def balanced_n_condition(n: int, r_c: float, t: float, beta: float) -> float:
    """Theorem 2's requirement n > (4/β)·ln(nR_c/T): returns the right-hand side."""
    return 4.0 / beta * math.log(n * r_c / t)


def imbalanced_n_condition(n: int, total: int, gamma: float, beta: float) -> float:
    """Theorem 5's requirement n > 8γ(1 + ln(Nn)/(2β)): returns the right-hand side."""
    return 8.0 * gamma * (1.0 + math.log(total * n) / (2.0 * beta))


# --------------------------------------------------------------------------- smooth sensitivity


@dataclass(frozen=True)
class SmoothSensitivity:
    """S(D) and how it arose (internal diagnostics: data-dependent, never released)."""

    value: float  # S(D) = max_k e^{−βk} G(D, k), G capped at 2R_c
    g0: float  # G(D, 0) (capped)
    case: Literal["a", "b", "c"]  # the case of G(D, 0)
    k_last: int  # last k of case (b) (negative: none)
    floor: float  # the first case-(c) term 2R_c·e^{−β·max(k_last + 1, 1)}
    delta_tilde: int
    z: float  # Z(D) (balanced) or max_i Z_i(D) (imbalanced)

    @property
    def case_c_term(self) -> float:
        """The largest case-(c) term of the max over k: 2R_c at k = 0 when G(D, 0) is in case
        (c), else ``floor`` (the first case-(c) index; later ones are smaller)."""
        return self.g0 if self.case == "c" else self.floor

    @property
    def case_c_share(self) -> float:
        """case_c_term / S in (0, 1]: how much of S the worst-case branch sets (spec §7.2 C1.5;
        1 when S is the case-(c) term itself)."""
        return self.case_c_term / self.value


def _smooth_max(g0: float, later: FloatArray, beta: float, cap: float, k_last: int) -> float:
    """max(min(G0, cap), max_{k=1..k_last} e^{−βk} min(G_k, cap), e^{−β max(k_last+1,1)}·cap)."""
    s = min(g0, cap)
    if later.size:
        k = np.arange(1, later.size + 1, dtype=np.float64)
        s = max(s, float(np.max(np.exp(-beta * k) * np.minimum(later, cap))))
    return max(s, math.exp(-beta * max(k_last + 1, 1)) * cap)


def smooth_sensitivity_balanced(
    n: int, z: float, t: float, r_c: float, beta: float, delta_tilde: int
) -> SmoothSensitivity:
    """Def. 5 with (17), balanced users (§4.3 SmoothSensBalanced, G capped at 2R_c).

    (a) G(D, 0) = (T + Z)/(n − 1) if Z < (1 − 2/n)T; (b) G(D, k) = 2T/(n − k − Δ̃) for
    k <= n/4 − 1 − Δ̃; (c) 2R_c otherwise.
    """
    cap = 2.0 * r_c
    k_last = math.floor(n / 4.0 - 1.0 - delta_tilde)
    case: Literal["a", "b", "c"]
    if z < (1.0 - 2.0 / n) * t:
        g0, case = (t + z) / (n - 1), "a"
    elif k_last >= 0:
        g0, case = 2.0 * t / (n - delta_tilde), "b"
    else:
        g0, case = cap, "c"
    k = np.arange(1, max(k_last, 0) + 1, dtype=np.float64)
    later = 2.0 * t / (n - k - delta_tilde)
    value = _smooth_max(g0, later, beta, cap, k_last)
    floor = math.exp(-beta * max(k_last + 1, 1)) * cap
    return SmoothSensitivity(value, min(g0, cap), case, k_last, floor, delta_tilde, z)


def _h_tilde(w: FloatArray, t: FloatArray, zi: FloatArray, k: int) -> float:
    """h̃(D, k) (§4.7, fix E5): top-k sum of w_i(T_i + Z_i) over 1 − top-k sum of w_i."""
    denom = 1.0 - topsum(w, k)
    return math.inf if denom <= 0 else topsum(w * (t + zi), k) / denom


def smooth_sensitivity_imbalanced(
    design: HuberDesign, zi: ArrayLike, r_c: float, beta: float, delta_tilde: int
) -> SmoothSensitivity:
    """Def. 6 with (17), imbalanced users (§4.7, G capped at 2R_c).

    (a) G(D, 0) = h̃(D, 1) if h̃(D, 1) <= min_i(T_i − Z_i); (b) for k <= k₀ − Δ̃ − 1,
    G(D, k) = 2 max_i(w_i T_i)/(1 − sum of the Δ̃ + k + 1 largest w_i); (c) 2R_c otherwise.
    """
    w, t = design.weights, design.t
    z = np.asarray(zi, dtype=np.float64)
    cap = 2.0 * r_c
    k_last = design.k0 - delta_tilde - 1
    top = 2.0 * float(np.max(w * t))
    cum = np.concatenate(([0.0], np.cumsum(np.sort(w)[::-1])))  # cum[j] = top-j sum

    def case_b(k: IntArray) -> FloatArray:
        denom = 1.0 - cum[np.minimum(delta_tilde + k + 1, w.size)]
        return np.where(denom > 0, top / np.where(denom > 0, denom, 1.0), np.inf)

    h1 = _h_tilde(w, t, z, 1)
    case: Literal["a", "b", "c"]
    if h1 <= float(np.min(t - z)):
        g0, case = h1, "a"
    elif k_last >= 0:
        g0, case = float(case_b(np.zeros(1, np.int64))[0]), "b"
    else:
        g0, case = cap, "c"
    later = case_b(np.arange(1, max(k_last, 0) + 1, dtype=np.int64))
    value = _smooth_max(g0, later, beta, cap, k_last)
    floor = math.exp(-beta * max(k_last + 1, 1)) * cap
    return SmoothSensitivity(value, min(g0, cap), case, k_last, floor, delta_tilde, float(z.max()))


def proxy_sensitivity_balanced(n: int, z: float, t: float) -> float:
    """§4.9 paper-proxy, balanced: (T + Z)/(n − 1) if Z < (1 − 2/n)T, else 2T/n. NOT DP."""
    return (t + z) / (n - 1) if z < (1.0 - 2.0 / n) * t else 2.0 * t / n


def proxy_sensitivity_imbalanced(weights: ArrayLike, t: ArrayLike, zi: ArrayLike) -> float:
    """§4.9 paper-proxy, imbalanced: h̃(D, 1) under condition (a), else
    2 max_i(w_i T_i)/(1 − max_i w_i). NOT DP."""
    w = np.asarray(weights, dtype=np.float64)
    tt = np.asarray(t, dtype=np.float64)
    z = np.asarray(zi, dtype=np.float64)
    h1 = _h_tilde(w, tt, z, 1)
    if h1 <= float(np.min(tt - z)):
        return h1
    return 2.0 * float(np.max(w * tt)) / (1.0 - float(w.max()))


def _deviations(y: FloatArray, w: FloatArray) -> FloatArray:
    """Z_i = ‖ȳ_w − y_i‖ (13), (21)."""
    centre = w @ y
    return np.asarray(np.sqrt(np.sum((y - centre) ** 2, axis=1)), dtype=np.float64)


def hlm_delta_tilde(y: ArrayLike, design: HuberDesign) -> int:
    """Δ̃(D) of §4.4/§4.7: exact (d = 1 balanced), lattice balls r = T/4, h = T/8 (d > 1
    balanced), θ′-cover (imbalanced; n when θ′ is None); coarser lattices: ``lattice_spacing``."""
    ym = as_user_means(y)
    n, d = ym.shape
    t = design.t
    if design.balanced:
        if d == 1:
            return delta_exact_1d(ym[:, 0], float(t[0]))
        radii = np.full(n, 0.25 * float(t[0]))
        return delta_lattice(ym, radii, lattice_spacing(radii, 0.125 * float(t[0]), d))
    if design.theta is None:
        return int(n)
    radii = design.theta * t
    if d == 1:
        return delta_cover_1d(ym[:, 0], radii)
    h0 = 0.5 * design.theta * float(t.min())
    return delta_lattice(ym, radii, lattice_spacing(radii, h0, d))


def hlm_sensitivity(
    y: ArrayLike, design: HuberDesign, r_c: float, beta: float
) -> SmoothSensitivity:
    """The smooth sensitivity S(D) of the release (Def. 5 or Def. 6 with Δ̃)."""
    ym = as_user_means(y)
    zi = _deviations(ym, design.weights)
    dt = hlm_delta_tilde(ym, design)
    if design.balanced:
        return smooth_sensitivity_balanced(design.n, float(zi.max()), float(design.t[0]), r_c,
                                           beta, dt)  # fmt: skip
    return smooth_sensitivity_imbalanced(design, zi, r_c, beta, dt)


def hlm_proxy_sensitivity(y: ArrayLike, design: HuberDesign) -> float:
    """The §4.9 proxy S for these users (NOT DP)."""
    ym = as_user_means(y)
    zi = _deviations(ym, design.weights)
    if design.balanced:
        return proxy_sensitivity_balanced(design.n, float(zi.max()), float(design.t[0]))
    return proxy_sensitivity_imbalanced(design.weights, design.t, zi)


def clip_ball(v: ArrayLike, radius: float) -> FloatArray:
    """Clip(v, R) = v·min(1, R/‖v‖) along the last axis (paper (12))."""
    vv = np.asarray(v, dtype=np.float64)
    norm = np.sqrt(np.sum(vv * vv, axis=-1, keepdims=True))
    factor = np.minimum(1.0, np.divide(radius, norm, out=np.ones_like(norm), where=norm > 0))
    return np.asarray(vv * factor, dtype=np.float64)


@dataclass(frozen=True)
class HLMRelease:
    """An HLM release with its internal diagnostics (``sensitivity``, ``minimizer``,
    ``iterations``, ``sigma`` are data-dependent: never publish them in a deployment)."""

    estimate: FloatArray  # (d,)
    sigma: float  # S/α
    alpha: float
    beta: float
    calibration: Calibration
    design: HuberDesign
    sensitivity: SmoothSensitivity | None  # None in paper-proxy mode
    proxy: float | None  # the proxy S (paper-proxy mode)
    minimizer: FloatArray
    iterations: int


def hlm_release(
    y: ArrayLike,
    counts: ArrayLike,
    *,
    epsilon: float,
    delta: float,
    scale_a: float,
    r_c: float,
    rng: np.random.Generator,
    gamma: float = 1.0,
    calibration: Calibration = "dp",
    tolerance: float = 1e-10,
    max_iter: int = 20_000,
    constants: tuple[float, float] | None = None,
) -> HLMRelease:
    """HLM_Release (§4.8): Clip(μ̂₀, R_c) + N(0, (S/α)² I_d), one standard-normal vector drawn.

    ``constants`` overrides (α, β) (research only, e.g. the paper's invalid d = 1 pair).
    """
    ym = as_user_means(y)
    d = ym.shape[1]
    design = huber_design(counts, scale_a, gamma)
    if design.n != ym.shape[0]:
        raise ValueError("one count per user mean expected")
    alpha, beta = constants or noise_constants(epsilon, delta, d, calibration)
    mu0, iters = huber_minimize(ym, design.weights, design.t, tolerance, max_iter)
    sens: SmoothSensitivity | None = None
    proxy: float | None = None
    if calibration == "dp":
        sens = hlm_sensitivity(ym, design, r_c, beta)
        s = sens.value
    else:
        proxy = hlm_proxy_sensitivity(ym, design)
        s = proxy
    sigma = s / alpha
    est = clip_ball(mu0, r_c) + sigma * rng.standard_normal(d)
    return HLMRelease(est, sigma, alpha, beta, calibration, design, sens, proxy, mu0, int(iters))

"""Local randomizers and their theory (heterogeneous-ldp.md §1.5, §2, §3; user-level-ldp.md §2.1).

Every sampler is a pure vectorised function over a block of users: ε is an array (one value per
user), the first axis of the data is the user axis, and randomness comes from an explicit ``rng:
RandomSource`` (a numpy Generator or ``fedldp.protocol.core.streams.UserStreams``). Each sampler
draws a FIXED number of values per user per call, never conditionally, so a user gets identical
output whether drawn alone or in a block (docs/architecture.md, convention 9). Beside each sampler
sit the functions of its theory (noise scale, keep probability, debiasing factor, variance) that
estimators and tests use.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedldp.protocol.core.base.records import FloatArray, IntArray, check_epsilons
from fedldp.protocol.core.streams import RandomSource, UserStreams, stream_key

__all__ = [
    "JL_MAX_ENTRIES",
    "duchi_density",
    "duchi_hemisphere_probability",
    "duchi_radius",
    "duchi_report",
    "from_unit",
    "jl_dimension",
    "jl_estimate",
    "jl_items",
    "jl_report",
    "jl_report_probability",
    "jl_sign",
    "jl_signs",
    "kappa",
    "laplace",
    "laplace_log_density",
    "laplace_mean_report",
    "laplace_scale",
    "laplace_variance",
    "one_bit_report",
    "randomized_response",
    "rr_debias",
    "rr_keep_probability",
    "rr_plus_probability",
    "rr_variance",
    "to_unit",
]


def _per_user(values: FloatArray, ndim: int) -> FloatArray:
    """Reshape a per-user array (n,) so it broadcasts over ``ndim``-dimensional data (n, ...)."""
    return values.reshape(values.shape + (1,) * (ndim - values.ndim))


# --------------------------------------------------------------------------- Laplace


def laplace_scale(sensitivity: ArrayLike, epsilon: ArrayLike) -> FloatArray:
    """Laplace scale Δ1/ε_i of an ε_i-LDP release with ℓ1-sensitivity Δ1 (user-level-ldp §2.1)."""
    eps = check_epsilons(epsilon)
    sens = np.asarray(sensitivity, dtype=np.float64)
    if not np.all(np.isfinite(sens) & (sens > 0)):
        raise ValueError(f"sensitivity must be finite and > 0, got {sensitivity!r}")
    return np.asarray(sens / eps, dtype=np.float64)


def laplace_variance(scale: ArrayLike) -> FloatArray:
    """Variance 2b² of Lap(b) (heterogeneous-ldp §2.1: 8/ε² at b = 2/ε)."""
    b = np.asarray(scale, dtype=np.float64)
    return np.asarray(2.0 * b * b, dtype=np.float64)


def laplace(x: ArrayLike, scale: ArrayLike, rng: RandomSource) -> FloatArray:
    """``x + scale·Lap(1)``: x of shape (n,) or (n, k, ...), scale per user (n,) or scalar.

    Draws ``prod(x.shape[1:])`` standard Laplace values per user (user-level-ldp §2.1 LapMech).
    """
    v = np.asarray(x, dtype=np.float64)
    if v.ndim == 0:
        raise ValueError("x needs a leading user axis")
    if not np.all(np.isfinite(v)):
        raise ValueError("x must be finite")
    b = np.asarray(scale, dtype=np.float64)
    if not np.all(np.isfinite(b) & (b > 0)):
        raise ValueError("the Laplace scale must be finite and > 0")
    if b.ndim > 1 or (b.ndim == 1 and b.shape[0] != v.shape[0]):
        raise ValueError(f"scale must be a scalar or one value per user, got shape {b.shape}")
    noise = np.asarray(rng.laplace(0.0, 1.0, size=v.shape), dtype=np.float64)
    b = _per_user(b, v.ndim) if b.ndim == 1 else b
    return np.asarray(v + b * noise, dtype=np.float64)


def laplace_mean_report(
    x: ArrayLike, epsilon: ArrayLike, rng: RandomSource, lo: float = -1.0, hi: float = 1.0
) -> FloatArray:
    """Client step of Alg 1 (heterogeneous-ldp §2.1): map [lo, hi] → [-1, 1], clip, add Lap(2/ε_i).

    One Laplace draw per user. The server maps an estimate θ' back with ``from_unit``.
    """
    eps = check_epsilons(epsilon)
    u = np.clip(to_unit(x, lo, hi), -1.0, 1.0)
    if u.ndim != 1 or u.shape != eps.shape:
        raise ValueError("x and epsilon must both be one value per user")
    return laplace(u, laplace_scale(2.0, eps), rng)


def _check_range(lo: float, hi: float) -> None:
    if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):
        raise ValueError(f"the data range must be finite with hi > lo, got [{lo}, {hi}]")


def to_unit(x: ArrayLike, lo: float, hi: float) -> FloatArray:
    """X' = (2X − lo − hi)/(hi − lo): [lo, hi] onto [-1, 1] (heterogeneous-ldp §2.1 step 1)."""
    _check_range(lo, hi)
    v = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(v)):
        raise ValueError("x must be finite")
    return np.asarray((2.0 * v - lo - hi) / (hi - lo), dtype=np.float64)


def from_unit(theta: ArrayLike, lo: float, hi: float) -> FloatArray:
    """θ = ((hi − lo)·θ' + lo + hi)/2, the inverse of ``to_unit``."""
    _check_range(lo, hi)
    t = np.asarray(theta, dtype=np.float64)
    return np.asarray(((hi - lo) * t + lo + hi) / 2.0, dtype=np.float64)


def laplace_log_density(y: ArrayLike, x: ArrayLike, scale: ArrayLike) -> FloatArray:
    """log f(y | x) of x + Lap(b): −log(2b) − |y − x|/b (the exact law for privacy tests, §3)."""
    b = np.asarray(scale, dtype=np.float64)
    diff = np.abs(np.asarray(y, dtype=np.float64) - np.asarray(x, dtype=np.float64))
    return np.asarray(-np.log(2.0 * b) - diff / b, dtype=np.float64)


# --------------------------------------------------------------------------- randomized response


def rr_keep_probability(epsilon: ArrayLike) -> FloatArray:
    """π = e^ε/(e^ε + 1) = 1/(1 + e^−ε), the probability that RR keeps the bit (§1.5).

    The logistic form never overflows (e^ε does for ε > 709).
    """
    eps = check_epsilons(epsilon)
    return np.asarray(1.0 / (1.0 + np.exp(-eps)), dtype=np.float64)


def rr_debias(epsilon: ArrayLike) -> FloatArray:
    """c = (e^ε + 1)/(e^ε − 1) = 1/tanh(ε/2): E[c·Y | X] = X for RR (§1.5, Alg 2 line 3)."""
    eps = check_epsilons(epsilon)
    return np.asarray(1.0 / np.tanh(eps / 2.0), dtype=np.float64)


def rr_plus_probability(x: ArrayLike, epsilon: ArrayLike) -> FloatArray:
    """Pr[Y = +1 | x] = 1/2 + x·tanh(ε/2)/2: RR (x = ±1) and the 1-bit mechanism (x ∈ [-1, 1])."""
    eps = check_epsilons(epsilon)
    v = np.asarray(x, dtype=np.float64)
    return np.asarray(0.5 + 0.5 * v * np.tanh(eps / 2.0), dtype=np.float64)


def rr_variance(epsilon: ArrayLike, theta: ArrayLike = 0.0) -> FloatArray:
    """Var(c·Y) = c² − θ² of one debiased RR or 1-bit report with mean θ (§2.2 exact moments)."""
    c = rr_debias(epsilon)
    t = np.asarray(theta, dtype=np.float64)
    return np.asarray(c * c - t * t, dtype=np.float64)


def _flip(bits: FloatArray, epsilon: FloatArray, uniform: FloatArray) -> FloatArray:
    keep = uniform < rr_keep_probability(epsilon)
    return np.asarray(np.where(keep, bits, -bits), dtype=np.float64)


def _user_epsilons(epsilon: ArrayLike, n: int) -> FloatArray:
    eps = check_epsilons(epsilon)
    if eps.ndim != 1 or eps.shape[0] != n:
        raise ValueError(f"epsilon must hold one value per user ({n}), got shape {eps.shape}")
    return eps


def randomized_response(x: ArrayLike, epsilon: ArrayLike, rng: RandomSource) -> FloatArray:
    """Alg 2 client step: Y = X with probability π_i, else −X. One uniform per user.

    Only binary input is private: on X ∈ (−1, 1) the output ±X would reveal |X| (§2.2 pitfall),
    so anything but ±1 raises ValueError (use ``one_bit_report`` for [-1, 1] data).
    """
    v = np.asarray(x, dtype=np.float64)
    if v.ndim != 1 or not np.all((v == 1.0) | (v == -1.0)):
        raise ValueError("randomized response takes one value in {-1, +1} per user")
    eps = _user_epsilons(epsilon, v.shape[0])
    u = np.asarray(rng.random(size=(v.shape[0],)), dtype=np.float64)
    return _flip(v, eps, u)


def one_bit_report(x: ArrayLike, epsilon: ArrayLike, rng: RandomSource) -> FloatArray:
    """Alg 2′ (§2.2 [PROPOSAL]) for X ∈ [-1, 1]: round to ±1 with Pr[+1] = (1 + X)/2, then RR.

    Input is clipped to [-1, 1]. Exactly 2 uniforms per user (rounding, then RR). The law is
    Pr[Y = +1] = ``rr_plus_probability(x, ε)``, i.e. Alg 4 at d = 1, r = 1.
    """
    v = np.asarray(x, dtype=np.float64)
    if v.ndim != 1 or not np.all(np.isfinite(v)):
        raise ValueError("the 1-bit mechanism takes one finite value per user")
    eps = _user_epsilons(epsilon, v.shape[0])
    u = np.asarray(rng.random(size=(v.shape[0], 2)), dtype=np.float64)
    rounded = np.where(u[:, 0] < (1.0 + np.clip(v, -1.0, 1.0)) / 2.0, 1.0, -1.0)
    return _flip(rounded, eps, u[:, 1])


# --------------------------------------------------------------------------- Duchi et al. (Alg 4)


def _check_dimension(d: int) -> None:
    if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 1:
        raise ValueError(f"dimension must be an integer >= 1, got {d!r}")


def _check_radius(r: float) -> None:
    if not (math.isfinite(r) and r > 0):
        raise ValueError(f"radius must be finite and > 0, got {r!r}")


def kappa(d: int) -> float:
    """κ_d = E|U_1| for U uniform on S^{d−1}: Γ(d/2)/(√π·Γ((d+1)/2)), via lgamma (§1.5).

    κ_1 = 1, κ_2 = 2/π, κ_3 = 1/2.
    """
    _check_dimension(d)
    return math.exp(math.lgamma(d / 2.0) - math.lgamma((d + 1) / 2.0)) / math.sqrt(math.pi)


def duchi_radius(epsilon: ArrayLike, d: int, r: float = 1.0) -> FloatArray:
    """B = c·r/κ_d, the norm of every Alg 4 output [FIX, §2.3: the paper prints 2·c·r/κ_d]."""
    _check_radius(r)
    return np.asarray(rr_debias(epsilon) * r / kappa(d), dtype=np.float64)


def duchi_hemisphere_probability(norm: ArrayLike, epsilon: ArrayLike, r: float = 1.0) -> FloatArray:
    """p(X) = Pr[<Y, X> > 0 | X] = 1/2 + (‖X‖/(2r))·tanh(ε/2) (eq. (51)); ‖X‖ is capped at r."""
    _check_radius(r)
    rho = np.clip(np.asarray(norm, dtype=np.float64), 0.0, r) / r
    return rr_plus_probability(rho, epsilon)


def duchi_density(y: ArrayLike, x: ArrayLike, epsilon: ArrayLike, r: float = 1.0) -> FloatArray:
    """Density of Y | X w.r.t. the uniform law on S^{d−1}(B) (§3): 2p(X) on the half-space
    <y, X> > 0, 2(1 − p(X)) elsewhere; 1 at X = 0. Rows of y and x are users (or broadcast)."""
    yv = np.asarray(y, dtype=np.float64)
    xv = np.asarray(x, dtype=np.float64)
    norm = np.linalg.norm(xv, axis=-1)
    p = duchi_hemisphere_probability(norm, epsilon, r)
    inner = np.sum(yv * xv, axis=-1)
    dens = np.where(inner > 0, 2.0 * p, 2.0 * (1.0 - p))
    return np.asarray(np.where(norm > 0, dens, 1.0), dtype=np.float64)


def duchi_report(x: ArrayLike, epsilon: ArrayLike, rng: RandomSource, r: float = 1.0) -> FloatArray:
    """Alg 4 (Duchi–Jordan–Wainwright) for X ∈ B^d(r), with the corrected B [FIX, §2.3].

    Rows of x (n, d) with ‖X‖ > r are projected onto the ball. Draws per user, always: d normals
    (the direction), then 2 uniforms (s, then T). Step 1 rounds X to s·r·u with
    Pr[s = +1] = 1/2 + ‖X‖/(2r); a uniform direction G/‖G‖ is flipped into the hemisphere
    <U, s·u> > 0 if T = 1 (Pr π) and into <U, s·u> ≤ 0 otherwise; Y = B·U. At X = 0 the paper
    divides by zero (§6 item 19); u = e_1 is used, and since then Pr[s = +1] = 1/2, Y is
    exactly uniform on S^{d−1}(B), the law the spec prescribes.
    """
    _check_radius(r)
    v = np.asarray(x, dtype=np.float64)
    if v.ndim != 2 or not np.all(np.isfinite(v)):
        raise ValueError("x must be a finite (n, d) array of user vectors")
    n, d = v.shape
    eps = _user_epsilons(epsilon, n)
    norm = np.linalg.norm(v, axis=1)
    scale = np.where(norm > r, r / np.where(norm > 0, norm, 1.0), 1.0)
    v = v * scale[:, None]
    norm = np.minimum(norm, r)
    e1 = np.zeros(d)
    e1[0] = 1.0
    safe = np.where(norm > 0, norm, 1.0)
    u_dir = np.where((norm > 0)[:, None], v / safe[:, None], e1)

    g = np.asarray(rng.standard_normal(size=(n, d)), dtype=np.float64)
    coins = np.asarray(rng.random(size=(n, 2)), dtype=np.float64)
    g_norm = np.linalg.norm(g, axis=1)
    unit = np.where((g_norm > 0)[:, None], g / np.where(g_norm > 0, g_norm, 1.0)[:, None], e1)
    s = np.where(coins[:, 0] < 0.5 + norm / (2.0 * r), 1.0, -1.0)
    t = coins[:, 1] < rr_keep_probability(eps)
    h = s * np.sum(unit * u_dir, axis=1)
    flip = (t & (h < 0)) | (~t & (h > 0))
    unit = np.where(flip[:, None], -unit, unit)
    return np.asarray(duchi_radius(eps, d, r)[:, None] * unit, dtype=np.float64)


# --------------------------------------------------------------------------- JL + RR (Alg 5)

JL_MAX_ENTRIES = 1 << 40
"""m·d must stay below this: entry (j, x) of σ is counter-hashed as stream index j·d + x."""

_JL_PURPOSE = 0x4A4C  # "JL": the key family of the public sign matrix under its public seed


def jl_dimension(d: int, beta: float, s_rr: float, *, at_least_s_rr: bool = False) -> int:
    """m = ceil(log(d+1)·log(2/β)·S_RR/log(2d/β)), at least 1 (Alg 5 lines 4–5 [FIX], §2.5).

    γ = sqrt(log(2d/β)/S_RR) (the paper drops the square root over S_RR); with
    ``at_least_s_rr`` also m ≥ ceil(S_RR) (§2.5 step 3 [PROPOSAL]).
    """
    _check_dimension(d)
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta must lie in (0, 1), got {beta!r}")
    if not (math.isfinite(s_rr) and s_rr > 0):
        raise ValueError(f"S_RR must be finite and > 0, got {s_rr!r}")
    gamma_sq = math.log(2.0 * d / beta) / s_rr
    m = max(1, math.ceil(math.log(d + 1.0) * math.log(2.0 / beta) / gamma_sq))
    if at_least_s_rr:
        m = max(m, math.ceil(s_rr))
    return m


def _check_jl(seed: int, m: int, d: int) -> None:
    _check_dimension(d)
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
        raise ValueError(f"m must be an integer >= 1, got {m!r}")
    if m * d > JL_MAX_ENTRIES:
        raise ValueError(f"m·d = {m * d} exceeds 2**40 sign-matrix entries")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"the JL seed must be a non-negative integer, got {seed!r}")


def jl_sign(seed: int, m: int, d: int, rows: ArrayLike, items: ArrayLike) -> NDArray[np.int8]:
    """Entries σ[j, x] ∈ {±1} of the public sign matrix (Φ = σ/√m), elementwise over (rows, items).

    Entry (j, x) is the first draw of counter stream j·d + x under the key of the public seed,
    so one entry costs O(1) and the m×d matrix is never needed (§2.5 step 4).
    """
    _check_jl(seed, m, d)
    j, v = np.broadcast_arrays(np.asarray(rows, dtype=np.int64), np.asarray(items, dtype=np.int64))
    if np.any((j < 0) | (j >= m)) or np.any((v < 0) | (v >= d)):
        raise ValueError("sign-matrix index out of range")
    flat = (j * d + v).reshape(-1)
    u = UserStreams(stream_key(int(seed), _JL_PURPOSE), flat).random(size=(flat.shape[0], 1))
    return np.where(u[:, 0] < 0.5, 1, -1).astype(np.int8).reshape(j.shape)


def jl_signs(seed: int, m: int, d: int, start: int, stop: int) -> NDArray[np.int8]:
    """Rows start..stop−1 of σ as an int8 (stop − start, d) block (generation in row chunks)."""
    _check_jl(seed, m, d)
    if not 0 <= start <= stop <= m:
        raise ValueError(f"row range [{start}, {stop}) outside [0, {m})")
    rows = np.arange(start, stop, dtype=np.int64)[:, None]
    return jl_sign(seed, m, d, rows, np.arange(d, dtype=np.int64)[None, :])


def jl_items(x: ArrayLike, d: int) -> IntArray:
    """Validate one item in {0..d−1} per user (integer-valued floats allowed); else ValueError."""
    v = np.asarray(x)
    if v.ndim != 1:
        raise ValueError("items must be one value per user")
    if not np.issubdtype(v.dtype, np.integer):
        f = np.asarray(v, dtype=np.float64)
        if not np.all(np.isfinite(f) & (np.floor(f) == f)):
            raise ValueError("items must be integers")
    items = np.asarray(v, dtype=np.int64)
    if np.any((items < 0) | (items >= d)):
        raise ValueError(f"items must lie in 0..{d - 1}")
    return items


def jl_report(
    x: ArrayLike, epsilon: ArrayLike, m: int, seed: int, rng: RandomSource, *, d: int
) -> tuple[IntArray, FloatArray]:
    """Alg 5 client step (Bassily–Smith): item x ∈ {0..d−1} ↦ (j, ς = b·σ[j, x]).

    j uniform on {0..m−1} (the user's private coin) and b = +1 with probability π_i: exactly 2
    uniforms per user. The dense m-vector z_i = ς·c_i·√m·e_j is never built (§2.5 step 8).
    Items outside [0, d) raise ValueError (§2.8).
    """
    _check_jl(seed, m, d)
    items = jl_items(x, d)
    eps = _user_epsilons(epsilon, items.shape[0])
    u = np.asarray(rng.random(size=(items.shape[0], 2)), dtype=np.float64)
    j = np.minimum(np.floor(u[:, 0] * m).astype(np.int64), m - 1)
    sigma = jl_sign(seed, m, d, j, items).astype(np.float64)
    return j, _flip(sigma, eps, u[:, 1])


def jl_report_probability(
    j: ArrayLike, sign: ArrayLike, x: ArrayLike, epsilon: ArrayLike, m: int, seed: int, *, d: int
) -> FloatArray:
    """Pr[(j, ς) | x] = (1/m)·(π if ς = σ[j, x] else 1 − π), the exact law (§3)."""
    pi = rr_keep_probability(epsilon)
    match = np.asarray(sign, dtype=np.float64) == jl_sign(seed, m, d, j, x)
    return np.asarray(np.where(match, pi, 1.0 - pi) / m, dtype=np.float64)


def jl_estimate(
    zbar: ArrayLike, m: int, d: int, seed: int, *, chunk_rows: int = 1024
) -> FloatArray:
    """p̂ = Φᵀ z̄ = Σ_j z̄_j·σ[j, :]/√m over all d items, σ generated in row chunks (§2.5 step 11)."""
    _check_jl(seed, m, d)
    z = np.asarray(zbar, dtype=np.float64)
    if z.shape != (m,):
        raise ValueError(f"zbar must have shape ({m},), got {z.shape}")
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be >= 1")
    out = np.zeros(d, dtype=np.float64)
    for start in range(0, m, chunk_rows):
        stop = min(m, start + chunk_rows)
        out += z[start:stop] @ jl_signs(seed, m, d, start, stop).astype(np.float64)
    return np.asarray(out / math.sqrt(m), dtype=np.float64)

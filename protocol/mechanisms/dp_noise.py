"""Noise calibration of the central user-level DP estimators (spec huber-user-level-dp.md §1.2,
§2.2–§2.3): the classical Gaussian mechanism's coefficient and the smooth-sensitivity Gaussian
mechanism's (α, β), checked against the exact privacy loss; with the input checks WME
(``fedldp.protocol.central.wme``) and HLM (``fedldp.protocol.central.huber``) share.

**[CORRECTION] to spec §1.2 / paper (7), d = 1.** The printed pair α = ε/√ln(1/δ),
β = ε/(2 ln(1/δ)) does not make the smooth-sensitivity Gaussian mechanism (ε, δ)-DP: for the
worst neighbouring pair the smooth-sensitivity framework allows (shift = S, scales S/α and
e^{±β}S/α), the exact hockey-stick divergence at ε = 1, δ = 1e-5 is 1.28e-3, 128× the target
(``smooth_gaussian_delta``). The ``dp`` calibration therefore keeps the paper's β and uses the
largest α whose exact worst-case δ(ε) is at most δ (``calibrated_alpha``; 0.10539 at ε = 1,
δ = 1e-5 against the printed 0.29472, i.e. 7.8× the noise variance); for large ε·δ, where the
paper's β alone leaks more than δ, β is halved first (``smooth_beta``). For d > 1 the printed pair
(NRS07's) is valid (worst-case δ ≈ 1.5e-12 at d = 3, ε = 1) up to ε = 10, and is used at
min(ε, 10) (``MULTI_D_EPSILON_CAP``). ``paper-proxy`` uses the printed pair for every d, as the
paper's figures presumably did. Tests: tests/protocol/central/test_huber.py (exact divergences).
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import ndtr

from fedldp.protocol.core.base.records import FloatArray

__all__ = [
    "MULTI_D_EPSILON_CAP",
    "ONE_D_EPSILON_CAP",
    "Calibration",
    "as_user_means",
    "calibrated_alpha",
    "check_delta",
    "check_positive",
    "gaussian_coefficient",
    "gaussian_hockey_stick",
    "noise_constants",
    "paper_alpha_beta",
    "smooth_beta",
    "smooth_gaussian_delta",
]

Calibration = Literal["dp", "paper-proxy"]
"""``dp``: provably (ε, δ)-DP; ``paper-proxy``: the paper's figures, NOT differentially private."""


def check_positive(value: float, name: str) -> float:
    """``value`` as a float; ValueError naming ``name`` unless it is finite and > 0."""
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return v


def check_delta(delta: float) -> float:
    """``delta`` as a float; ValueError unless it lies in the open interval (0, 1)."""
    v = float(delta)
    if not (math.isfinite(v) and 0 < v < 1):
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    return v


def as_user_means(y: ArrayLike) -> FloatArray:
    """User means as (n, d): a 1-D array is n scalars."""
    arr = np.asarray(y, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] < 1:
        raise ValueError(f"user means must be (n,) or (n, d) with n >= 1, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("user means must be finite")
    return arr


# --------------------------------------------------------------------------- noise constants


def paper_alpha_beta(epsilon: float, delta: float, d: int) -> tuple[float, float]:
    """(α, β) of paper (7) as printed (spec §1.2). For d = 1 the pair is NOT valid (module doc)."""
    eps, dl = check_positive(epsilon, "epsilon"), check_delta(delta)
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    if d == 1:
        log_inv = math.log(1.0 / dl)
        return eps / math.sqrt(log_inv), eps / (2.0 * log_inv)
    log_two = math.log(2.0 / dl)
    return eps / (5.0 * math.sqrt(2.0 * log_two)), eps / (4.0 * (d + log_two))


def gaussian_hockey_stick(
    shift: ArrayLike, scale_p: ArrayLike, scale_q: ArrayLike, epsilon: float
) -> FloatArray:
    """Exact δ(ε) = sup_A P(A) − e^ε Q(A) for P = N(0, scale_p²), Q = N(shift, scale_q²) (1-D).

    The privacy-loss set {x : ln p(x)/q(x) > ε} is {a x² + b x + c > 0}, so δ is a sum of normal
    CDF differences at the quadratic's roots (stable root formula). Vectorised; clipped at 0.
    """
    mu, s1, s2 = np.broadcast_arrays(
        np.asarray(shift, dtype=np.float64),
        np.asarray(scale_p, dtype=np.float64),
        np.asarray(scale_q, dtype=np.float64),
    )
    a = 0.5 / s2**2 - 0.5 / s1**2
    b = -mu / s2**2
    c = 0.5 * mu**2 / s2**2 + np.log(s2 / s1) - epsilon
    e = math.exp(epsilon)
    out = np.zeros(mu.shape, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        disc = b * b - 4.0 * a * c
        sq = np.sqrt(np.maximum(disc, 0.0))
        q = -0.5 * (b + np.where(b >= 0, sq, -sq))
        r1 = np.where(a != 0, q / a, np.inf)
        r2 = np.where(q != 0, c / q, np.inf)
        lo, hi = np.minimum(r1, r2), np.maximum(r1, r2)
        # a > 0 with real roots: A = (−∞, lo) ∪ (hi, ∞)
        outside = (ndtr(lo / s1) + ndtr(-hi / s1)) - e * (
            ndtr((lo - mu) / s2) + ndtr(-(hi - mu) / s2)
        )
        # a < 0 with real roots: A = (lo, hi)
        inside = (ndtr(hi / s1) - ndtr(lo / s1)) - e * (ndtr((hi - mu) / s2) - ndtr((lo - mu) / s2))
        # a = 0 (equal scales): A = {b x + c > 0}; b < 0 when shift > 0, so A = (−∞, −c/b)
        root = -c / b
        linear = np.where(
            b < 0,
            ndtr(root / s1) - e * ndtr((root - mu) / s2),
            np.where(b > 0, ndtr(-root / s1) - e * ndtr(-(root - mu) / s2), 0.0),
        )
    real = disc > 0
    out = np.where(a == 0, linear, 0.0)
    out = np.where((a > 0) & real, outside, out)
    out = np.where((a < 0) & real, inside, out)
    # a > 0 without real roots: A = R, δ = 1 − e^ε < 0; a < 0 without roots: A = ∅
    return np.asarray(np.maximum(out, 0.0), dtype=np.float64)


_DILATIONS = 33  # grid of scale ratios over [e^−β, e^β], endpoints included


def smooth_gaussian_delta(alpha: float, beta: float, epsilon: float) -> float:
    """Worst-case δ(ε) of the 1-D smooth-sensitivity Gaussian mechanism f(D) + (S(D)/α)·N(0, 1).

    Neighbours D, D′ have S(D′) = r·S(D) with r ∈ [e^−β, e^β] (β-smoothness) and
    |f(D) − f(D′)| ≤ min(LS(D), LS(D′)) ≤ min(S(D), S(D′)); with S(D) = 1 the pair of output laws is
    N(0, 1/α²) and N(shift, r²/α²), shift ≤ min(1, r). δ is largest at the largest shift and at an
    end of the r range (checked by a dense search in tests); both orders of the pair are taken.
    """
    a, bt = check_positive(alpha, "alpha"), float(beta)
    if not (math.isfinite(bt) and bt >= 0):
        raise ValueError(f"beta must be finite and >= 0, got {beta!r}")
    r = np.exp(np.linspace(-bt, bt, _DILATIONS))
    shift = np.minimum(1.0, r)
    one = np.full(r.shape, 1.0 / a)
    both = np.concatenate(
        (
            gaussian_hockey_stick(shift, one, r / a, epsilon),
            gaussian_hockey_stick(shift, r / a, one, epsilon),
        )
    )
    return float(np.max(both))


@functools.lru_cache(maxsize=256)
def calibrated_alpha(epsilon: float, delta: float, beta: float) -> float:
    """The largest α (to 1e-12 relative) with ``smooth_gaussian_delta(α, β, ε) <= δ`` (d = 1).

    Bisection keeps its lower end feasible, so the returned α is always valid. ValueError when
    even α → 0 exceeds δ (β too large for this δ: the scale change alone leaks more than δ).
    """
    eps, dl = check_positive(epsilon, "epsilon"), check_delta(delta)
    lo = 1e-9 * eps
    if smooth_gaussian_delta(lo, beta, eps) > dl:
        raise ValueError(f"beta = {beta} is too large for delta = {dl} at epsilon = {eps}")
    hi = eps
    while smooth_gaussian_delta(hi, beta, eps) <= dl:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-12 * hi:
        mid = 0.5 * (lo + hi)
        if smooth_gaussian_delta(mid, beta, eps) <= dl:
            lo = mid
        else:
            hi = mid
    return lo


MULTI_D_EPSILON_CAP = 10.0
"""For d > 1 the printed (7) pair is used at ε' = min(ε, 10): it was checked valid (exact
worst-case δ(ε) <= δ) for d = 2..8, ε <= 10 and δ <= 0.1, but it fails at ε = 30 (δ >= 0.01).
Spending less than ε is always valid."""


ONE_D_EPSILON_CAP = 700.0
"""For d = 1 the ``dp`` calibration is computed at ε' = min(ε, 700): the exact δ(ε) needs e^ε,
which overflows a float past ε ≈ 709.8. Spending less than ε is always valid, and any larger ε
(e.g. the enrollment bound 1e3) used to raise OverflowError instead."""


def smooth_beta(epsilon: float, delta: float) -> float:
    """β of the d = 1 ``dp`` calibration: the paper's ε/(2 ln(1/δ)), halved while the scale
    change alone (α → 0) would leak more than δ/2 (only for large ε·δ, e.g. ε >= 5 at δ = 0.01)."""
    eps, dl = check_positive(epsilon, "epsilon"), check_delta(delta)
    beta = paper_alpha_beta(eps, dl, 1)[1]
    while smooth_gaussian_delta(1e-9 * eps, beta, eps) > 0.5 * dl:
        beta *= 0.5
    return beta


def noise_constants(
    epsilon: float, delta: float, d: int, calibration: Calibration = "dp"
) -> tuple[float, float]:
    """(α, β) of the release: ``paper-proxy`` → paper (7) as printed; ``dp`` → (7) at
    min(ε, ``MULTI_D_EPSILON_CAP``) for d > 1 and, for d = 1, ``smooth_beta`` (the paper's β for
    ordinary ε, δ) with the largest valid α (``calibrated_alpha``, module doc), at
    min(ε, ``ONE_D_EPSILON_CAP``)."""
    if calibration == "paper-proxy":
        return paper_alpha_beta(epsilon, delta, d)
    if calibration != "dp":
        raise ValueError(f"unknown calibration {calibration!r}")
    if d > 1:
        return paper_alpha_beta(min(float(epsilon), MULTI_D_EPSILON_CAP), delta, d)
    eps = min(float(epsilon), ONE_D_EPSILON_CAP)
    beta = smooth_beta(eps, delta)
    return calibrated_alpha(eps, float(delta), beta), beta


def gaussian_coefficient(delta: float) -> float:
    """√(2 ln(1.25/δ)) of the classical Gaussian mechanism (§2.2): 4.8448 at δ = 1e-5."""
    return math.sqrt(2.0 * math.log(1.25 / check_delta(delta)))

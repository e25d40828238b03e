"""The winsorized mean estimator (WME), the baseline of Zhao et al. NeurIPS 2024, as pure math
(spec huber-user-level-dp.md §3.2–§3.4; Levy et al. 2021 as reconstructed there).

Stage 1 finds [a, b] with b − a = 4τ from a Laplace histogram of the user means (random grid
offset), stage 2 averages the clipped means with weights m_i/N and adds Lap(8τ·max_i v_i/ε); for
d > 1 a random Hadamard rotation, per-coordinate ranges at ε/(2d′) and Gaussian noise with
Δ₂ = 4τ√d′·max_i v_i (the classical Gaussian mechanism at min(ε/2, 1)). Randomness comes from an
explicit numpy Generator (the trusted server's).

Every noise scale is proportional to 1/ε and ``fedldp.protocol.central.release`` releases at the
smallest declared ε (so one participant with a low ε raises everyone's noise: give a study an
``epsilon_min``); an ε so small that a scale overflows gives a non-finite estimate, which the
central protocols refuse (ValueError).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from fedldp.protocol.api import FloatArray, as_user_means, check_positive, gaussian_coefficient
from fedldp.protocol.mechanisms.transforms import fwht, next_power_of_two

__all__ = [
    "WMERelease",
    "histogram_bins",
    "private_range",
    "wme_gaussian_sigma",
    "wme_laplace_scale",
    "wme_release",
]


# --------------------------------------------------------------------------- WME (§3)


def wme_laplace_scale(tau: float, max_weight: float, epsilon: float) -> float:
    """Stage-2 Laplace scale 4τ·max_i v_i/(ε/2) (§3.2): 8τ/(nε) balanced, 8τ·m_max/(Nε) else."""
    return 4.0 * tau * max_weight / (0.5 * check_positive(epsilon, "epsilon"))


def wme_gaussian_sigma(
    tau: float, padded_dim: int, max_weight: float, epsilon: float, delta: float
) -> float:
    """Stage-2 Gaussian σ = Δ₂·√(2 ln(1.25/δ))/ε₂ with Δ₂ = 4τ√d′·max_i v_i (§3.3).

    ε₂ = min(ε/2, 1): the classical Gaussian mechanism (§2.2) needs ε′ <= 1, so a release ε > 2
    spends only 1 in stage 2 (still (ε/2, δ)-DP, as (1, δ)-DP implies it).
    """
    eps2 = min(0.5 * check_positive(epsilon, "epsilon"), 1.0)
    return 4.0 * tau * math.sqrt(padded_dim) * max_weight * gaussian_coefficient(delta) / eps2


def histogram_bins(tau: float, bound: float) -> int:
    """Most stage-1 bins: K = ⌈(2B + u)/(2τ)⌉ with the grid offset u < 2τ (§3.2)."""
    t, b = check_positive(tau, "tau"), check_positive(bound, "bound")
    return math.ceil((2.0 * b + 2.0 * t) / (2.0 * t))


def private_range(
    z: ArrayLike, tau: float, bound: float, epsilon1: float, rng: np.random.Generator
) -> tuple[FloatArray, FloatArray]:
    """Stage 1 of WME (§3.2, PrivateRange) on each column of z (n, k): intervals [a_j, b_j].

    Per column: a public offset u ~ U[0, 2τ), bins of width 2τ from −B − u (values outside fall in
    the end bins), one count per user plus Lap(2/ε₁) per bin (ℓ1 sensitivity 2 under replacement),
    argmax (ties → the smaller bin), [a, b] = centre ± 2τ. Draws k offsets, then k·K_max Laplace
    values (bins past a column's K are masked), whatever the data.
    """
    zz = np.asarray(z, dtype=np.float64)
    if zz.ndim != 2:
        raise ValueError(f"private_range needs an (n, k) array, got shape {zz.shape}")
    k = zz.shape[1]
    width = 2.0 * check_positive(tau, "tau")
    k_max = histogram_bins(tau, bound)
    u = rng.uniform(0.0, width, size=k)
    lo = -bound - u
    n_bins = np.ceil((2.0 * bound + u) / width).astype(np.int64)
    pos = np.clip(np.floor((zz - lo) / width), 0, n_bins - 1).astype(np.int64)
    flat = pos + np.arange(k, dtype=np.int64) * k_max
    counts = np.bincount(flat.ravel(), minlength=k * k_max).reshape(k, k_max).astype(np.float64)
    noisy = counts + rng.laplace(0.0, 2.0 / check_positive(epsilon1, "epsilon1"), (k, k_max))
    noisy[np.arange(k_max)[None, :] >= n_bins[:, None]] = -np.inf
    best = np.argmax(noisy, axis=1)
    centre = lo + width * best + 0.5 * width
    return centre - width, centre + width


@dataclass(frozen=True)
class WMERelease:
    """A WME release and its public constants (every field is safe to publish)."""

    estimate: FloatArray  # (d,)
    noise: Literal["laplace", "gaussian"]
    noise_scale: float  # Laplace scale (d = 1) or Gaussian σ per coordinate (d > 1)
    padded_dim: int
    epsilon1: float  # stage 1, per coordinate
    epsilon2: float
    lower: FloatArray  # stage-1 intervals (rotated coordinates when d > 1)
    upper: FloatArray


def wme_release(
    y: ArrayLike,
    weights: ArrayLike,
    tau: float,
    bound: float,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
    rotate: bool = True,
) -> WMERelease:
    """WME_1D (§3.2) for d = 1, WME_HD (§3.3) for d > 1; ``rotate=False`` is the coordinate-wise
    ablation (no Hadamard rotation, d′ = d). ``weights`` v_i sum to 1 (m_i/N, or 1/n).

    Randomness, in order: the rotation signs (d > 1, rotate), the stage-1 offsets and histogram
    noise, the stage-2 noise. Privacy: stage 1 is ε/2-DP by composition over the d′ coordinates,
    stage 2 is ε/2-DP (Laplace) or (min(ε/2, 1), δ)-DP (Gaussian) given the intervals.
    """
    ym = as_user_means(y)
    v = np.asarray(weights, dtype=np.float64)
    if v.shape != (ym.shape[0],) or np.any(v < 0) or not math.isclose(v.sum(), 1.0, rel_tol=1e-9):
        raise ValueError("weights must be one non-negative value per user, summing to 1")
    eps = check_positive(epsilon, "epsilon")
    vmax = float(v.max())
    d = ym.shape[1]
    if d == 1:
        lower, upper = private_range(ym, tau, bound, 0.5 * eps, rng)
        clipped = np.clip(ym[:, 0], lower[0], upper[0])
        scale = wme_laplace_scale(tau, vmax, eps)
        est = np.array([float(v @ clipped) + float(rng.laplace(0.0, scale))])
        return WMERelease(est, "laplace", scale, 1, 0.5 * eps, 0.5 * eps, lower, upper)
    dp = next_power_of_two(d) if rotate else d
    signs = rng.choice(np.array([-1.0, 1.0]), size=dp) if rotate else np.ones(dp)
    padded = np.zeros((ym.shape[0], dp))
    padded[:, :d] = ym
    # rows of Y Uᵀ with U = H diag(s)/√d′ (H symmetric): fwht(Y·s)/√d′
    rotated = fwht(padded * signs) / math.sqrt(dp) if rotate else padded
    eps1 = eps / (2.0 * dp)
    lower, upper = private_range(rotated, tau, bound, eps1, rng)
    mean = v @ np.clip(rotated, lower, upper)
    sigma = wme_gaussian_sigma(tau, dp, vmax, eps, delta)
    noisy = mean + sigma * rng.standard_normal(dp)
    back = signs * fwht(noisy) / math.sqrt(dp) if rotate else noisy
    eps2 = min(0.5 * eps, 1.0)
    return WMERelease(back[:d].copy(), "gaussian", sigma, dp, eps1, eps2, lower, upper)

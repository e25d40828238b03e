"""Alg 1 of Zhao et al. 2024 (arXiv:2405.17079): the two-stage user-level LDP mean, as pure math.

Spec: user-level-ldp.md §3.1 (Alg 1), §3.2 (heavy-tail variant Alg 1-HT), §2.2 (clamping), §2.7
(N_ref), §1.5 (feasibility), §5.3 (constant-level MSE prediction), §8 (per-user ε, non-paper).

* Stage I (``⌊n/2⌋`` users): the clamped local mean's bin as a one-hot B-vector plus i.i.d.
  ``Lap(2/ε_i)`` per coordinate. The server sums the histograms (weights ∝ ε_i², §8), takes the
  modal bin k̂ (ties → smallest k) and the interval ``[L, R]`` = bins k̂−1..k̂+1 (width 3h).
* Stage II (the other users): ``clip(Ȳ, L−Δ, R+Δ) + Lap((3h+2Δ)/ε_i)``; the server takes the
  inverse-variance weighted mean (§8), which is the plain mean when every ε_i is equal.

Bins are 0-based here: bin j is ``[−D + j·h, −D + (j+1)·h)``, the last one closed (§3.11 U3); the
paper's 1-based k is j + 1, so ``L = −D + (j−1)·h`` and ``R = −D + (j+2)·h``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike

from fedldp.protocol.api import (
    JSON,
    FloatArray,
    IntArray,
    RandomSource,
    check_epsilons,
    laplace,
    laplace_scale,
)

__all__ = [
    "FEASIBLE_SCORE",
    "MIN_SCORE",
    "STAGE_ONE_SENSITIVITY",
    "Design",
    "bin_index",
    "bounded_design",
    "c_star",
    "check_stage_one",
    "clipping_bias_bound",
    "heavy_tail_design",
    "predicted_mse",
    "select_interval",
    "stage_one_report",
    "stage_one_scale",
    "stage_one_score",
    "stage_one_vector",
    "stage_one_weights",
    "stage_two_report",
    "stage_two_scale",
    "stage_two_value",
    "stage_two_variances",
    "stage_two_weights",
    "weighted_variance",
]

STAGE_ONE_SENSITIVITY = 2.0
"""ℓ1 distance between two one-hot vectors (§4.1): the stage-I noise is Lap(2/ε) per bin."""

FEASIBLE_SCORE = 500.0
"""Stage-one score Σ min(ε_i², 1) at or above which no warning is given (§1.5 [PROPOSAL])."""

MIN_SCORE = 300.0
"""Below this stage-one score the plan is refused (§1.5 [PROTOTYPE]: failure rate ≈ 0.5–3%)."""


@dataclass(frozen=True)
class Design:
    """Public constants of one Alg-1 call (§3.1 "Derived public constants").

    ``bound`` is D: the support bound, or the clip radius of the heavy-tail variant (§3.2).
    ``sample_var`` bounds the variance of one sample (D² for bounded support, s² = M_p^{2/p} for
    heavy tails); it enters the stage-II weights and the predicted MSE only.
    """

    bound: float
    m: int
    h: float
    n_bins: int
    delta: float
    n_ref: int
    sample_var: float
    heavy_tail: bool = False

    @property
    def width(self) -> float:
        """Stage-II clip width, i.e. its ℓ1 sensitivity: hi − lo = 3h + 2Δ."""
        return 3.0 * self.h + 2.0 * self.delta

    def edges(self) -> FloatArray:
        """The B + 1 bin edges −D + j·h, j = 0..B (the last may lie beyond D)."""
        return -self.bound + self.h * np.arange(self.n_bins + 1, dtype=np.float64)

    def as_json(self) -> JSON:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: JSON) -> Design:
        d = cls(
            bound=float(raw["bound"]),
            m=int(raw["m"]),
            h=float(raw["h"]),
            n_bins=int(raw["n_bins"]),
            delta=float(raw["delta"]),
            n_ref=int(raw["n_ref"]),
            sample_var=float(raw["sample_var"]),
            heavy_tail=bool(raw["heavy_tail"]),
        )
        values = (d.bound, d.h, d.delta, d.sample_var)
        if not all(math.isfinite(v) for v in values) or d.bound <= 0 or d.h <= 0:
            raise ValueError("design constants must be finite with bound > 0 and h > 0")
        if d.m < 1 or d.n_bins < 1 or d.n_ref < 1 or d.delta < 0:
            raise ValueError("design needs m, n_bins, n_ref >= 1 and delta >= 0")
        return d


def _check_m_n(m: int, n_ref: int) -> None:
    if m < 1:
        raise ValueError(f"samples per user m must be >= 1, got {m}")
    if n_ref < 1:
        raise ValueError(f"N_ref must be >= 1, got {n_ref}")


def bounded_design(bound: float, m: int, n_ref: int) -> Design:
    """Alg 1 constants [PAPER Thm 1, eq. 42; §3.11 U2, U5]: h = 4D/√m, B = ⌈√m/2⌉ (≥ 1),
    Δ = D·√(ln N_ref / m) with N_ref the users of the top-level invocation (§2.7)."""
    _check_m_n(m, n_ref)
    if not (math.isfinite(bound) and bound > 0):
        raise ValueError(f"bound D must be finite and > 0, got {bound}")
    root = math.sqrt(m)  # exact for perfect squares, so B = √m/2 exactly when m = 4k²
    return Design(
        bound=float(bound),
        m=m,
        h=4.0 * bound / root,
        n_bins=max(1, math.ceil(root / 2.0)),
        delta=bound * math.sqrt(math.log(n_ref) / m),
        n_ref=n_ref,
        sample_var=float(bound) ** 2,
    )


def heavy_tail_design(
    moment_p: float, moment_bound: float, m: int, n_ref: int, sum_eps_sq: float
) -> Design:
    """Alg 1-HT constants (§3.2, [PAPER eq. 84] with c = 1, §3.11 U9).

    s = M_p^{1/p}; Δ = max(s·√(ln m/m), s·(nε²)^{1/(2p)}·m^{−(1−1/p)}); D = max(2s, 4Δ);
    h = 4s/√m; B = ⌈2D/h⌉. ``sum_eps_sq`` is n_c·ε_c² of the call; with per-user ε it is
    Σ_i ε_i² over the call's users (§8 [PROPOSAL], equal to nε² when all ε_i = ε).
    """
    _check_m_n(m, n_ref)
    if not (math.isfinite(moment_p) and moment_p >= 2.0):
        raise ValueError(f"moment order p must be >= 2, got {moment_p}")
    if not (math.isfinite(moment_bound) and moment_bound > 0):
        raise ValueError(f"moment bound M_p must be finite and > 0, got {moment_bound}")
    if not (math.isfinite(sum_eps_sq) and sum_eps_sq > 0):
        raise ValueError("Σ ε_i² must be finite and > 0")
    p = float(moment_p)
    s = float(moment_bound) ** (1.0 / p)
    delta = max(
        s * math.sqrt(math.log(m) / m),
        s * sum_eps_sq ** (1.0 / (2.0 * p)) * m ** (-(1.0 - 1.0 / p)),
    )
    radius = max(2.0 * s, 4.0 * delta)
    h = 4.0 * s / math.sqrt(m)
    ratio = 2.0 * radius / h
    n_bins = max(1, math.ceil(ratio - 1e-9 * ratio))  # tolerate rounding of an exact integer
    return Design(radius, m, h, n_bins, delta, n_ref, s * s, heavy_tail=True)


def c_star(n_ref: int) -> float:
    """c* = 12 + 2√(ln N_ref), so that 3h + 2Δ = c*·D/√m for Alg 1 (§5.3)."""
    return 12.0 + 2.0 * math.sqrt(math.log(n_ref))


def clipping_bias_bound(design: Design) -> float:
    """Stage-II clipping bias bound given stage-I success, 4√(2π)·D/√(m·N_ref) (§3.1, §2.7)."""
    return 4.0 * math.sqrt(2.0 * math.pi) * design.bound / math.sqrt(design.m * design.n_ref)


# --------------------------------------------------------------------------- client side


def bin_index(means: ArrayLike, design: Design) -> IntArray:
    """0-based bin of each mean after clamping to [−D, D] (§2.2); last bin closed (U3)."""
    y = np.asarray(means, dtype=np.float64)
    if np.any(np.isnan(y)):
        raise ValueError("user means must not be NaN")
    y = np.clip(y, -design.bound, design.bound)
    j = np.searchsorted(design.edges(), y, side="right") - 1
    return np.clip(j, 0, design.n_bins - 1).astype(np.int64)


def stage_one_vector(means: ArrayLike, design: Design) -> FloatArray:
    """The pre-noise stage-I message: the one-hot vector e_bin(clamp(Ȳ)), shape (n, B)."""
    j = bin_index(means, design).reshape(-1)
    onehot = np.zeros((j.shape[0], design.n_bins), dtype=np.float64)
    onehot[np.arange(j.shape[0]), j] = 1.0
    return onehot


def stage_one_scale(epsilon: ArrayLike) -> FloatArray:
    """Per-user stage-I Laplace scale 2/ε_i (§4.1)."""
    return np.asarray(laplace_scale(STAGE_ONE_SENSITIVITY, epsilon), dtype=np.float64)


def stage_one_report(
    means: ArrayLike, design: Design, epsilon: ArrayLike, rng: RandomSource
) -> FloatArray:
    """Client step of stage I for a block of users: ``e_bin + Lap(2/ε_i)^B`` (B draws per user)."""
    eps = check_epsilons(epsilon)
    return laplace(stage_one_vector(means, design), stage_one_scale(eps), rng)


def _check_interval(lo: float, hi: float) -> None:
    if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
        raise ValueError(f"the stage-two interval must be finite with hi > lo, got [{lo}, {hi}]")


def stage_two_value(
    means: ArrayLike, lo: float, hi: float, radius: float | None = None
) -> FloatArray:
    """The pre-noise stage-II message clip(Ȳ, lo, hi) (§3.1 step 4).

    With ``radius`` (heavy tails, §3.2) the mean is first clamped to [−radius, radius].
    """
    _check_interval(lo, hi)
    y = np.asarray(means, dtype=np.float64)
    if radius is not None:
        y = np.clip(y, -radius, radius)
    return np.asarray(np.clip(y, lo, hi), dtype=np.float64)


def stage_two_scale(lo: float, hi: float, epsilon: ArrayLike) -> FloatArray:
    """Per-user stage-II Laplace scale (hi − lo)/ε_i = (3h + 2Δ)/ε_i (§4.1)."""
    _check_interval(lo, hi)
    return np.asarray(laplace_scale(hi - lo, epsilon), dtype=np.float64)


def stage_two_report(
    means: ArrayLike,
    lo: float,
    hi: float,
    epsilon: ArrayLike,
    rng: RandomSource,
    radius: float | None = None,
) -> FloatArray:
    """Client step of stage II: ``clip(Ȳ, lo, hi) + Lap((hi − lo)/ε_i)`` (one draw per user).

    The noise scale is derived from the clip interval itself, so the message is (ε_i)-LDP for
    whatever interval the server broadcasts.
    """
    eps = check_epsilons(epsilon)
    return laplace(stage_two_value(means, lo, hi, radius), stage_two_scale(lo, hi, eps), rng)


# --------------------------------------------------------------------------- server side


def stage_one_weights(epsilon: ArrayLike) -> FloatArray:
    """Stage-I histogram weights ∝ ε_i² (inverse noise variance, §8), summing to 1."""
    eps_sq = check_epsilons(epsilon) ** 2
    return np.asarray(eps_sq / eps_sq.sum(), dtype=np.float64)


def select_interval(sums: ArrayLike, design: Design) -> tuple[IntArray, FloatArray, FloatArray]:
    """k̂ (0-based, ties → smallest), L and R from summed histograms of shape (..., B) (§3.1)."""
    s = np.asarray(sums, dtype=np.float64)
    if s.shape[-1:] != (design.n_bins,):
        raise ValueError(f"histogram sums must have {design.n_bins} bins, got shape {s.shape}")
    k = np.argmax(s, axis=-1).astype(np.int64)
    left = -design.bound + (k - 1).astype(np.float64) * design.h
    right = -design.bound + (k + 2).astype(np.float64) * design.h
    return k, left, right


def stage_two_variances(epsilon: ArrayLike, design: Design) -> FloatArray:
    """Per-user variance bound of a stage-II report: sample_var/m + 2((3h+2Δ)/ε_i)² (§5.3, §8)."""
    eps = check_epsilons(epsilon)
    return np.asarray(
        design.sample_var / design.m + 2.0 * (design.width / eps) ** 2, dtype=np.float64
    )


def stage_two_weights(epsilon: ArrayLike, design: Design) -> FloatArray:
    """Inverse-variance stage-II weights w_i ∝ 1/(D²/m + 2(3h+2Δ)²/ε_i²) (§8), summing to 1."""
    inv = 1.0 / stage_two_variances(epsilon, design)
    return np.asarray(inv / inv.sum(), dtype=np.float64)


def weighted_variance(weights: ArrayLike, variances: ArrayLike) -> float:
    """Variance Σ w_i² V_i / (Σ w_i)² of a weighted mean of independent reports."""
    w = np.asarray(weights, dtype=np.float64)
    v = np.asarray(variances, dtype=np.float64)
    return float(np.sum(w * w * v) / np.sum(w) ** 2)


def predicted_mse(design: Design, epsilon_stage_two: ArrayLike) -> float:
    """§5.3 prediction (1/n2)·[σ²/m + 2c*²D²/(mε²)] with σ² → ``design.sample_var``.

    Per-user ε: the variance of the inverse-variance weighted mean, 1/Σ_i (1/V_i). It holds
    conditionally on stage-I success and ignores the clipping bias (``clipping_bias_bound``).
    """
    v = stage_two_variances(epsilon_stage_two, design)
    return float(1.0 / np.sum(1.0 / v))


def stage_one_score(epsilon_stage_one: ArrayLike) -> float:
    """Σ over stage-I users of min(ε_i², 1); equals ⌊n_c/2⌋·min(ε_c², 1) for equal ε (§1.5, §8)."""
    eps = check_epsilons(epsilon_stage_one)
    squares = np.atleast_1d(eps * eps)
    np.minimum(squares, 1.0, out=squares)  # no second temporary of the stage's size
    return float(np.sum(squares))


def check_stage_one(
    epsilon_stage_one: ArrayLike, n_bins: int, n_total: int, *, refuse: bool = True
) -> tuple[str, ...]:
    """The §1.5 feasibility check of one Alg-1 call; returns warnings, raises if infeasible
    (with ``refuse`` False, an infeasible plan is a warning too: the plan as the paper's analysis
    runs it whatever n, e.g. for §6.2 E2, which measures how stage one fails at small n).

    The spec asks for a score Σ min(ε_i², 1) ≥ 500 and a warning below 300; read literally the
    warning could never fire. Resolution: refuse below ``MIN_SCORE`` = 300 (prototype failure
    rate 0.5–3%), warn in [300, 500), accept silently at ≥ 500 (failure ≈ 0.1–0.3%). With B ≤ 2
    bins (m ≤ 16 in the bounded case) [L, R] ⊇ [−D, D] whatever k̂ is, so stage I cannot fail and
    no condition is imposed.
    """
    if n_bins <= 2:
        return ()
    eps = check_epsilons(epsilon_stage_one)
    score = stage_one_score(eps)
    if score >= FEASIBLE_SCORE:
        return ()
    per_user = score / max(1, eps.size)
    needed = 2 * math.ceil(MIN_SCORE / per_user) if per_user > 0 else 0
    recommended = 2 * math.ceil(FEASIBLE_SCORE / per_user) if per_user > 0 else 0
    detail = (
        f"stage one of the two-stage mean has score Σ min(ε_i², 1) = {score:.1f} over its "
        f"{eps.size} users (user-level-ldp.md §1.5); {MIN_SCORE:g} is required and "
        f"{FEASIBLE_SCORE:g} recommended for it to find the interval reliably with {n_bins} bins"
    )
    if score < MIN_SCORE and not refuse:
        return (f"infeasible plan run as asked (enforce_feasibility false): {detail}",)
    if score < MIN_SCORE:
        raise ValueError(
            f"infeasible plan: {detail}. Enroll more participants (about {needed} in total at "
            f"the current ε's; {n_total} enrolled), or raise their ε towards 1; with bounded data, "
            "samples_per_user <= 16 gives at most 2 bins, where stage one cannot fail."
        )
    return (
        f"{detail}; the interval search may fail with probability of order 1%. About "
        f"{recommended} participants in total would reach the recommended score.",
    )

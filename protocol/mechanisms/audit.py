"""Empirical privacy audit of a randomizer on two neighbouring inputs (the distinguishing test of
user-level-ldp.md §4.2 TP3; heterogeneous-ldp.md's spot checks are the same test).

A randomizer that is ε-LDP satisfies P(M(x) ∈ S) ≤ e^ε·P(M(x') ∈ S) for every event S and every
pair of inputs. The audit draws the randomizer's output many times on each of two inputs A and B,
reduces each output to a scalar statistic (any function of the output: DP survives
post-processing, and the privacy-loss statistic of the mechanism's own law is the most powerful
one, Neyman–Pearson), cuts the statistic's line into bins of equal probability (under A and
under B, so both tails are seen), and for every bin S bounds log P_A(S)/P_B(S) and its reverse
with Clopper–Pearson intervals. Atoms of the statistic (a clamped privacy loss, say) get a bin of
their own.

* ``lower``: a lower confidence bound of the largest log-ratio over the bins. Every per-bin bound
  holds with probability 1 − α/(2·comparisons) on each of its two counts (Bonferroni over the
  bins and both directions), so a randomizer that is ε-LDP gives ``lower`` > ε with probability at
  most α: ``lower <= epsilon`` is the audit's pass condition, and a randomizer with too little
  noise fails it (the negative control of TP3).
* ``upper``: the upper confidence bound of the log-ratio on the same event (the bin and direction
  of ``lower``). A randomizer whose loss reaches ε on some event (the Laplace mechanism in its
  tails, where that event is the one selected) gives ``upper >= epsilon``; one with too much
  noise (loss ε/2, say) gives ``upper`` < ε on every event: the tightness half.
* ``loss``: the point estimate log(k_A/k_B) (or its reverse) on that event, infinite when one
  input never produced it.

``audit_samples`` works on the two samples of statistics; ``laplace_loss_statistic`` is the
ℓ1 privacy-loss statistic of a Laplace mechanism of equal scale on every coordinate. The
mechanisms' own worst-case inputs live with their families (``fedldp.protocol.user_level.audit``
for the user-level randomizers); ``fedldp.protocol.catalogue.AUDITS`` lists them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import betaincinv

from fedldp.protocol.core.base.records import FloatArray

__all__ = [
    "AuditCase",
    "Draw",
    "PrivacyAudit",
    "audit_samples",
    "clopper_pearson",
    "laplace_loss_statistic",
    "run_audit",
]


def clopper_pearson(
    successes: ArrayLike, trials: int, alpha: float
) -> tuple[FloatArray, FloatArray]:
    """One-sided Clopper–Pearson bounds at level 1 − α each: (lower, upper) for every count.

    The bounds are Beta quantiles, taken as ``scipy.special.betaincinv`` (the regularized incomplete
    beta's inverse, which ``scipy.stats.beta.ppf`` calls): importing ``scipy.stats`` would add
    0.3 s to every start of the CLI and the server, which import the catalogue and so this module.
    """
    k = np.asarray(successes, dtype=np.float64)
    if trials < 1 or np.any((k < 0) | (k > trials)):
        raise ValueError("counts must lie in [0, trials] with trials >= 1")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    with np.errstate(invalid="ignore"):
        lo = np.where(k > 0, betaincinv(k, trials - k + 1, alpha), 0.0)
        hi = np.where(k < trials, betaincinv(k + 1, trials - k, 1.0 - alpha), 1.0)
    return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)


@dataclass(frozen=True)
class PrivacyAudit:
    """The audit of one randomizer at one claimed ε (module docstring)."""

    epsilon: float
    loss: float
    lower: float
    upper: float
    bins: int
    draws: int
    confidence: float

    def as_json(self) -> dict[str, float | int]:
        return {
            "epsilon": self.epsilon,
            "loss": self.loss,
            "lower": self.lower,
            "upper": self.upper,
            "bins": self.bins,
            "draws": self.draws,
            "confidence": self.confidence,
        }


def _edges(a: FloatArray, b: FloatArray, bins: int) -> FloatArray:
    """Interior bin edges: the k/bins quantiles of A and of B; every edge e also gets
    nextafter(e, +inf), so an atom at e (values equal to a quantile) is a bin of its own."""
    levels = np.arange(1, bins) / bins
    q = np.unique(np.concatenate([np.quantile(a, levels), np.quantile(b, levels)]))
    return np.unique(np.concatenate([q, np.nextafter(q, np.inf)]))


def audit_samples(
    a: ArrayLike, b: ArrayLike, epsilon: float, *, bins: int = 40, confidence: float = 0.999
) -> PrivacyAudit:
    """The audit of ``epsilon``-LDP from statistics of the randomizer's outputs on input A
    (``a``) and on its neighbour B (``b``), equally many draws of each."""
    sa = np.asarray(a, dtype=np.float64).reshape(-1)
    sb = np.asarray(b, dtype=np.float64).reshape(-1)
    if sa.size != sb.size or sa.size < 2:
        raise ValueError("need equally many draws (>= 2) on each input")
    if not (np.all(np.isfinite(sa)) and np.all(np.isfinite(sb))):
        raise ValueError("statistics must be finite")
    if bins < 2:
        raise ValueError(f"bins must be >= 2, got {bins}")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon}")
    n = int(sa.size)
    edges = _edges(sa, sb, bins)
    cells = edges.size + 1
    ka = np.bincount(np.searchsorted(edges, sa, side="right"), minlength=cells)
    kb = np.bincount(np.searchsorted(edges, sb, side="right"), minlength=cells)
    seen = (ka + kb) > 0
    ka, kb = ka[seen], kb[seen]
    alpha = (1.0 - confidence) / (4.0 * int(seen.sum()))  # 2 directions × 2 counts per bin
    lo_a, hi_a = clopper_pearson(ka, n, alpha)
    lo_b, hi_b = clopper_pearson(kb, n, alpha)
    with np.errstate(divide="ignore"):
        # rows: the log-ratio A over B, then B over A, for every bin
        lower = np.stack([np.log(lo_a) - np.log(hi_b), np.log(lo_b) - np.log(hi_a)])
        upper = np.stack([np.log(hi_a) - np.log(lo_b), np.log(hi_b) - np.log(lo_a)])
        point = np.stack([np.log(ka) - np.log(kb), np.log(kb) - np.log(ka)])
    # the most distinguishing event: the bin and direction of the largest lower bound; its
    # interval [lower, upper] holds the loss on that event (simultaneously with every other)
    best = np.unravel_index(int(np.argmax(lower)), lower.shape)
    return PrivacyAudit(
        epsilon=float(epsilon),
        loss=float(point[best]),
        lower=float(lower[best]),
        upper=float(upper[best]),
        bins=int(seen.sum()),
        draws=n,
        confidence=float(confidence),
    )


def laplace_loss_statistic(z: ArrayLike, v_a: ArrayLike, v_b: ArrayLike) -> FloatArray:
    """‖z − v_B‖₁ − ‖z − v_A‖₁ per output row: (Δ1/ε)·the privacy loss log p(z|A)/p(z|B) of a
    Laplace mechanism with equal scale on every coordinate and noiseless outputs v_A, v_B."""
    out = np.asarray(z, dtype=np.float64)
    out = out.reshape(out.shape[0], -1)
    va = np.asarray(v_a, dtype=np.float64).reshape(1, -1)
    vb = np.asarray(v_b, dtype=np.float64).reshape(1, -1)
    # each coordinate's term depends on z only through clip(z, [v_A, v_B]): clipping first makes
    # the loss's atoms (z beyond either end) exact, not a cloud of rounding errors that the
    # audit's bins would split by the size of z
    c = np.clip(out, np.minimum(va, vb), np.maximum(va, vb))
    return np.asarray(np.abs(c - vb).sum(axis=1) - np.abs(c - va).sum(axis=1))


Draw = Callable[[float, int, np.random.Generator], tuple[FloatArray, FloatArray]]


@dataclass(frozen=True)
class AuditCase:
    """A randomizer and its worst-case neighbouring inputs, for ``run_audit``.

    ``draw(epsilon, draws, rng)`` runs the randomizer as its protocol does at privacy
    ``epsilon``, ``draws`` times on input A and ``draws`` times on input B, and returns the two
    samples of a scalar statistic of the outputs. ``tight``: the randomizer's loss reaches ε on
    some event (so the audit's ``upper`` must reach ε too).
    """

    name: str
    summary: str
    draw: Draw
    tight: bool = True


def run_audit(
    case: AuditCase,
    epsilon: float,
    *,
    draws: int,
    rng: np.random.Generator,
    noise: float = 1.0,
    bins: int = 40,
    confidence: float = 0.999,
) -> PrivacyAudit:
    """Audit ``case`` for ``epsilon``-LDP. ``noise`` < 1 runs the randomizer with that fraction
    of its noise scale (it is given ε/noise) while the audit still claims ε: the negative
    control (``noise`` = 0.5 is TP3's halved noise scale, a 2ε randomizer)."""
    if not (math.isfinite(noise) and noise > 0):
        raise ValueError(f"noise must be finite and > 0, got {noise}")
    a, b = case.draw(epsilon / noise, draws, rng)
    return audit_samples(a, b, epsilon, bins=bins, confidence=confidence)

"""Plausibility bounds: how far an honest report of an unbounded mechanism can reasonably reach.

A Laplace (or Gaussian) report may be any real number, so a range check cannot refuse anything:
a server that stores a report of 1.18e21 for a bound-1 scalar protocol has lost its estimate.
Instead, a protocol whose honest reports are unbounded refuses a report whose probability under
the honest randomizer at the declared ε is tiny: it keeps a report ``Y = x + noise`` (x the
pre-noise message, known to lie in [lo, hi]) only if ``lo − r <= Y <= hi + r``, where the *reach*
``r`` of the noise is its ``1 − IMPLAUSIBLE_PROBABILITY`` two-sided quantile:

* Laplace of scale b: ``P(|L| > r) = exp(−r/b)``, so ``r = b·ln(10^12)`` (≈ 27.6·b);
* the mean of m independent Laplace(b) draws (item-level baseline): ``|mean| <= Σ|L_i|/m`` with
  ``Σ|L_i| ~ Gamma(m, b)``, so r is Gamma(m, b)'s upper 10^-12 quantile over m;
* Gaussian of standard deviation σ: ``r = σ·z`` with ``P(|Z| > z) = 10^-12`` (z ≈ 7.13).

Per coordinate, an honest report is refused with probability at most 10^-12 (exactly
``laplace_false_refusal`` for Laplace); a d-coordinate report at most d·10^-12 (union bound).
Those same bounds are what an ``output`` attacker may send at most (``fedldp.client.behaviour``).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from fedldp.protocol.core.base.records import FloatArray

__all__ = [
    "IMPLAUSIBLE_PROBABILITY",
    "LAPLACE_TAIL",
    "around",
    "gaussian_reach",
    "laplace_false_refusal",
    "laplace_mean_reach",
    "laplace_reach",
]

IMPLAUSIBLE_PROBABILITY = 1e-12
"""Per coordinate, the largest probability that an honest report falls outside its bounds."""

LAPLACE_TAIL = math.log(1.0 / IMPLAUSIBLE_PROBABILITY)
"""ln(10^12): the Laplace reach in units of the scale."""

_GAUSSIAN_TAIL = float(-special.ndtri(IMPLAUSIBLE_PROBABILITY / 2.0))


def _scale(scale: ArrayLike) -> FloatArray:
    b = np.asarray(scale, dtype=np.float64)
    if np.any(~np.isfinite(b) | (b <= 0)):
        raise ValueError("a noise scale must be finite and > 0")
    return b


def laplace_reach(scale: ArrayLike) -> FloatArray:
    """``b·ln(10^12)``: an honest Laplace(b) draw exceeds it in absolute value with
    probability exactly 10^-12."""
    return _scale(scale) * LAPLACE_TAIL


def laplace_mean_reach(scale: ArrayLike, m: int) -> FloatArray:
    """Reach of the mean of ``m`` independent Laplace(b) draws: Gamma(m, b)'s upper 10^-12
    quantile over m (it bounds the mean's absolute value, whose tail is lighter): the inverse
    regularized upper incomplete gamma, as ``scipy.stats.gamma.isf`` computes it (the same
    number), without importing ``scipy.stats`` (0.3 s at every CLI and server start)."""
    if m < 1:
        raise ValueError("m must be >= 1")
    b = _scale(scale)
    return np.asarray(special.gammainccinv(m, IMPLAUSIBLE_PROBABILITY) * b / m, dtype=np.float64)


def gaussian_reach(sigma: ArrayLike) -> FloatArray:
    """``σ·z`` with ``P(|N(0, σ²)| > σ·z) = 10^-12``."""
    return _scale(sigma) * _GAUSSIAN_TAIL


def laplace_false_refusal(x: ArrayLike, lo: float, hi: float, scale: ArrayLike) -> FloatArray:
    """Exact probability that an honest ``x + Lap(b)`` with x in [lo, hi] falls outside
    ``[lo − r, hi + r]``, r = ``laplace_reach(b)``: ``½e^{−(r + hi − x)/b} + ½e^{−(r + x − lo)/b}``,
    at most 10^-12·(1 + e^{−(hi−lo)/b})/2 <= 10^-12 (the worst case is x at an end)."""
    b = _scale(scale)
    v = np.asarray(x, dtype=np.float64)
    if np.any((v < lo) | (v > hi)):
        raise ValueError("x must lie in [lo, hi]")
    r = LAPLACE_TAIL
    return np.asarray(
        0.5 * np.exp(-r - (hi - v) / b) + 0.5 * np.exp(-r - (v - lo) / b), dtype=np.float64
    )


def around(
    lo: ArrayLike, hi: ArrayLike, reach: ArrayLike, ndim: int
) -> tuple[FloatArray, FloatArray]:
    """``(lo − r, hi + r)`` with a per-user reach ``r`` (shape (n,)) shaped to broadcast over
    payloads of ``ndim`` dimensions per user (``Protocol.report_bounds``)."""
    r = np.asarray(reach, dtype=np.float64)
    r = r.reshape(r.shape + (1,) * ndim)
    low = np.asarray(lo, dtype=np.float64) - r
    high = np.asarray(hi, dtype=np.float64) + r
    return np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)

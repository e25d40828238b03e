"""Server-side estimators of Aliakbarpour et al. 2025 (arXiv:2510.11895), heterogeneous ε.

Spec: heterogeneous-ldp.md. Every estimator is a normalized weighted average of unbiased
per-user reports, θ̂ = Σ a_i·x_i / Σ a_i, with unnormalized weights a_i that depend only on the
public ε_i (§2.0):

* Alg 1 (Laplace): paper a_i = ε_i²/(1+ε_i²); ``inverse_variance`` a_i = 1/(1 + 8/ε_i²).
* Alg 2 / 2′ (RR, 1-bit) and Alg 5 (JL + RR): a_i = 1/c_i² = tanh²(ε_i/2) (both options).
* Alg 3 (Duchi): paper a_i = ε_i² (which over-weights ε > 1, §2.6); ``inverse_variance``
  a_i = tanh²(ε_i/2) ∝ 1/B_i².
* ``uniform``: a_i = 1, the §2.7 baseline.

``Accumulator`` keeps the sums num = Σ a_i x_i, den = Σ a_i and the few sums the error bars need;
it is order-independent and merges, so reports can be streamed in chunks, and normalizing by the
den of the reports received renormalizes the weights over whoever reported (§2.0). The error bars
are the explicit-constant bounds of §4.2: exact Hoeffding for Alg 2/2′ and Alg 5, the tighter
[DERIVED] Laplace bound of §4.2(b), and the CLT approximation for Alg 3 (labelled approximate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedldp.protocol.api import (
    JSON,
    FloatArray,
    check_epsilons,
    duchi_radius,
    laplace_scale,
    rr_debias,
)

__all__ = [
    "Accumulator",
    "Mechanism",
    "WeightKind",
    "as_float_list",
    "capped_epsilons",
    "duchi_clt_half_width",
    "duchi_mse",
    "effective_sizes",
    "jl_half_width",
    "laplace_half_width",
    "laplace_mse",
    "project_ball",
    "project_simplex",
    "report_spread",
    "rr_half_width",
    "rr_mse",
    "weighted_mean",
    "weights",
]

WeightKind = Literal["paper", "uniform", "inverse_variance"]
Mechanism = Literal["laplace", "rr", "duchi", "jl"]


def capped_epsilons(epsilon: ArrayLike, cap: float | None) -> FloatArray:
    """The ε a client runs at: min(ε_i, cap) (§2.6 [PROPOSAL]; still ε_i-LDP). None: no cap."""
    eps = check_epsilons(epsilon)
    if cap is None:
        return eps
    if not (math.isfinite(cap) and cap > 0):
        raise ValueError(f"eps_cap must be finite and > 0, got {cap!r}")
    return np.asarray(np.minimum(eps, cap), dtype=np.float64)


def effective_sizes(epsilon: ArrayLike) -> dict[str, float]:
    """S = Σ ε_i², S_RR = Σ tanh²(ε_i/2), W = Σ ε_i²/(1+ε_i²) (§1.5)."""
    eps = check_epsilons(epsilon)
    sq = eps * eps
    return {
        "S": float(sq.sum()),
        "S_RR": float(np.sum(np.tanh(eps / 2.0) ** 2)),
        "W": float(np.sum(sq / (1.0 + sq))),
    }


def weights(mechanism: Mechanism, epsilon: ArrayLike, kind: WeightKind = "paper") -> FloatArray:
    """Unnormalized weights a_i of ``mechanism`` under ``kind`` (§2.1–2.7; module docstring)."""
    if mechanism not in ("laplace", "rr", "duchi", "jl"):
        raise ValueError(f"unknown mechanism {mechanism!r}")
    if kind not in ("paper", "uniform", "inverse_variance"):
        raise ValueError(f"unknown weight kind {kind!r}")
    eps = check_epsilons(epsilon)
    sq = eps * eps
    if kind == "uniform":
        a = np.ones_like(eps)
    elif mechanism == "laplace":
        a = sq / (1.0 + sq) if kind == "paper" else sq / (sq + 8.0)
    elif mechanism == "duchi" and kind == "paper":
        a = sq
    else:
        a = np.tanh(eps / 2.0) ** 2
    return np.asarray(a, dtype=np.float64)


def report_spread(
    mechanism: Mechanism, epsilon: ArrayLike, *, d: int = 1, r: float = 1.0
) -> FloatArray:
    """Per-user noise size s_i that the error bars use.

    Laplace: its scale 2/ε_i; RR, 1-bit, JL: c_i (the decoded report is ±c_i); Duchi: B_i = ‖Y_i‖.
    """
    if mechanism == "laplace":
        return laplace_scale(2.0, epsilon)
    if mechanism in ("rr", "jl"):
        return rr_debias(epsilon)
    if mechanism == "duchi":
        return duchi_radius(epsilon, d, r)
    raise ValueError(f"unknown mechanism {mechanism!r}")


def weighted_mean(a: ArrayLike, values: ArrayLike) -> FloatArray:
    """Σ_i a_i x_i / Σ_i a_i over the user axis: values (..., n) for scalars, a of shape (n,).

    Vectorised over leading repetition axes (tests simulate R repetitions at once).
    """
    w = np.asarray(a, dtype=np.float64)
    x = np.asarray(values, dtype=np.float64)
    return np.asarray((x @ w) / w.sum(), dtype=np.float64)


# --------------------------------------------------------------------------- accumulator


@dataclass
class Accumulator:
    """Streaming sums of one weighted-average estimator (order-independent; ``merge`` adds).

    num = Σ a_i x_i (x_i scalar or vector), den = Σ a_i, sq = Σ a_i², sq_spread = Σ a_i² s_i²,
    max_spread = max a_i s_i, with s_i from ``report_spread``; ``eps_sq``, ``eps_rr``, ``eps_w``
    are S, S_RR and W of the reporters.
    """

    num: FloatArray = field(default_factory=lambda: np.zeros(()))
    den: float = 0.0
    sq: float = 0.0
    sq_spread: float = 0.0
    max_spread: float = 0.0
    n: int = 0
    eps_sq: float = 0.0
    eps_rr: float = 0.0
    eps_w: float = 0.0

    def add(self, epsilon: ArrayLike, a: ArrayLike, spread: ArrayLike, values: ArrayLike) -> None:
        """Add a block of reports: decoded values (n,) or (n, k) with their a_i and s_i."""
        w = self._add_stats(epsilon, a, spread)
        x = np.asarray(values, dtype=np.float64)
        if x.shape[:1] != w.shape:
            raise ValueError("values must hold one row per user")
        self.num = self.num + np.tensordot(w, x, axes=(0, 0))

    def add_sparse(
        self,
        epsilon: ArrayLike,
        a: ArrayLike,
        spread: ArrayLike,
        index: ArrayLike,
        values: ArrayLike,
        size: int,
    ) -> None:
        """Add reports whose decoded vector of length ``size`` is ``values[i]`` at ``index[i]``
        and 0 elsewhere (Alg 5's z_i), without building the dense rows."""
        w = self._add_stats(epsilon, a, spread)
        idx = np.asarray(index, dtype=np.int64)
        x = np.asarray(values, dtype=np.float64)
        if idx.shape != w.shape or x.shape != w.shape:
            raise ValueError("index and values must hold one entry per user")
        if np.any((idx < 0) | (idx >= size)):
            raise ValueError(f"index out of range [0, {size})")
        self.num = self.num + np.bincount(idx, weights=w * x, minlength=size)

    def _add_stats(self, epsilon: ArrayLike, a: ArrayLike, spread: ArrayLike) -> FloatArray:
        eps = check_epsilons(epsilon)
        w = np.asarray(a, dtype=np.float64)
        s = np.asarray(spread, dtype=np.float64)
        if eps.ndim != 1 or w.shape != eps.shape or s.shape != eps.shape:
            raise ValueError("epsilon, weights and spreads must be one value per user")
        if not np.all(np.isfinite(w) & (w >= 0)):
            raise ValueError("weights must be finite and >= 0")
        self.den += float(w.sum())
        self.sq += float(w @ w)
        ws = w * s
        self.sq_spread += float(ws @ ws)
        self.max_spread = max(self.max_spread, float(ws.max(initial=0.0)))
        self.n += int(eps.shape[0])
        if eps.size:
            sizes = effective_sizes(eps)
            self.eps_sq += sizes["S"]
            self.eps_rr += sizes["S_RR"]
            self.eps_w += sizes["W"]
        return w

    def merge(self, other: Accumulator) -> Accumulator:
        return Accumulator(
            self.num + other.num,
            self.den + other.den,
            self.sq + other.sq,
            self.sq_spread + other.sq_spread,
            max(self.max_spread, other.max_spread),
            self.n + other.n,
            self.eps_sq + other.eps_sq,
            self.eps_rr + other.eps_rr,
            self.eps_w + other.eps_w,
        )

    def _check(self) -> None:
        if self.n == 0 or self.den <= 0:
            raise ValueError("no reports with positive weight to aggregate")

    def mean(self) -> FloatArray:
        """θ̂ = num/den."""
        self._check()
        return np.asarray(self.num / self.den, dtype=np.float64)

    @property
    def sum_w2(self) -> float:
        """Σ w_i² with w_i = a_i/Σ a_j."""
        self._check()
        return self.sq / self.den**2

    @property
    def sum_w2_spread2(self) -> float:
        """Σ w_i² s_i²."""
        self._check()
        return self.sq_spread / self.den**2

    @property
    def max_w_spread(self) -> float:
        """max_i w_i s_i."""
        self._check()
        return self.max_spread / self.den

    def sizes(self) -> JSON:
        return {"S": self.eps_sq, "S_RR": self.eps_rr, "W": self.eps_w, "n_reports": self.n}


# --------------------------------------------------------------------------- error bars (§4.2)


def _check_beta(beta: float) -> None:
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta must lie in (0, 1), got {beta!r}")


def rr_half_width(sum_w2_c2: float, beta: float) -> float:
    """Hoeffding (§4.2(a), exact): |θ̂ − θ| ≤ sqrt(2·log(2/β)·Σ w_i² c_i²) w.p. ≥ 1 − β.

    The terms w_i c_i Y_i lie in [−w_i c_i, w_i c_i]; with paper weights Σ w_i² c_i² = 1/S_RR.
    """
    _check_beta(beta)
    return math.sqrt(2.0 * math.log(2.0 / beta) * sum_w2_c2)


def laplace_half_width(sum_w2: float, sum_w2_b2: float, max_w_b: float, beta: float) -> float:
    """The [DERIVED] Alg 1 bound of §4.2(b) on [-1, 1] data, w.p. ≥ 1 − β:

    sqrt(2·Σw_i²·L) + max(sqrt(8·Σ(w_i b_i)²·L), 2√2·max_i w_i b_i·L), L = log(4/β), with b_i =
    2/ε_i the Laplace scale: Hoeffding on the data (β/2) plus a two-sided Laplace Chernoff bound
    using log E e^{λbZ} ≤ 2λ²b² for |λb| ≤ 1/√2 (β/2).
    """
    _check_beta(beta)
    big_l = math.log(4.0 / beta)
    noise = max(math.sqrt(8.0 * sum_w2_b2 * big_l), 2.0 * math.sqrt(2.0) * max_w_b * big_l)
    return math.sqrt(2.0 * sum_w2 * big_l) + noise


def jl_half_width(sum_w2_c2: float, d: int, m: int, beta: float) -> float:
    """§4.2(d) [DERIVED], over random Φ and data, w.p. ≥ 1 − β, in ℓ∞:

    ‖p̂ − p‖∞ ≤ sqrt(2·log(4d/β))·(sqrt(Σ w_i² c_i²) + 1/√m) (= 1/sqrt(S_RR) + 1/√m with paper
    weights): Hoeffding + union bound for the privacy term (Claim D.1), and for the JL bias.
    """
    _check_beta(beta)
    return math.sqrt(2.0 * math.log(4.0 * d / beta)) * (math.sqrt(sum_w2_c2) + 1.0 / math.sqrt(m))


def duchi_clt_half_width(sum_w2_b2: float, d: int, beta: float) -> float:
    """CLT approximation (§2.8, approximate): ‖θ̂ − θ‖ ≲ sqrt(Σ w_i² B_i² · χ²_{d,1−β}/d)."""
    _check_beta(beta)
    from scipy.stats import chi2

    return math.sqrt(sum_w2_b2 * float(chi2.ppf(1.0 - beta, d)) / d)


# --------------------------------------------------------------------------- closed forms (§4.4)


def _normalized(a: FloatArray) -> FloatArray:
    return np.asarray(a / a.sum(), dtype=np.float64)


def laplace_mse(epsilon: ArrayLike, var_x: float, kind: WeightKind = "paper") -> float:
    """Exact MSE of unclipped Alg 1 on [-1, 1] data: Σ w_i² (Var_P X + 8/ε_i²) (§2.1, §4.4)."""
    eps = check_epsilons(epsilon)
    w = _normalized(weights("laplace", eps, kind))
    return float(np.sum(w * w * (var_x + 8.0 / eps**2)))


def rr_mse(epsilon: ArrayLike, theta: float, kind: WeightKind = "paper") -> float:
    """Exact MSE of unclipped Alg 2 / 2′: Σ w_i² (c_i² − θ²) (§2.2, §4.4)."""
    eps = check_epsilons(epsilon)
    w = _normalized(weights("rr", eps, kind))
    return float(np.sum(w * w * (rr_debias(eps) ** 2 - theta**2)))


def duchi_mse(
    epsilon: ArrayLike, d: int, r: float, theta_norm_sq: float, kind: WeightKind = "paper"
) -> float:
    """Exact E‖θ̂ − θ‖² of unprojected Alg 3: Σ w_i² (B_i² − ‖θ‖²) (§2.4, §4.4)."""
    eps = check_epsilons(epsilon)
    w = _normalized(weights("duchi", eps, kind))
    return float(np.sum(w * w * (duchi_radius(eps, d, r) ** 2 - theta_norm_sq)))


# --------------------------------------------------------------------------- post-processing


def project_ball(theta: ArrayLike, r: float) -> FloatArray:
    """θ·min(1, r/‖θ‖): the non-expansive projection onto B^d(r) (§2.4 step 4)."""
    t = np.asarray(theta, dtype=np.float64)
    norm = float(np.linalg.norm(t))
    return np.asarray(t * min(1.0, r / norm) if norm > 0 else t, dtype=np.float64)


def project_simplex(v: ArrayLike) -> FloatArray:
    """Euclidean projection onto the probability simplex (sort-based; §2.5 step 12).

    For display only: in ℓ∞ it can double the error (§6 item 15), so the raw p̂ is the output.
    """
    x = np.asarray(v, dtype=np.float64).reshape(-1)
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("cannot project an empty or non-finite vector")
    u = np.sort(x)[::-1]
    css = np.cumsum(u) - 1.0
    k = np.arange(1, x.size + 1)
    rho = int(np.flatnonzero(u - css / k > 0)[-1])
    tau = css[rho] / (rho + 1)
    return np.asarray(np.maximum(x - tau, 0.0), dtype=np.float64)


def as_float_list(x: NDArray[Any]) -> list[float]:
    return [float(v) for v in np.asarray(x, dtype=np.float64).reshape(-1)]

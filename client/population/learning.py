"""Exact truths and risks of the learning tasks on the labeled laws
(``fedldp.client.population.distributions``).

The simulator prints these next to the result of a learning protocol. Everything is computed from
the law, never from samples, and exactly (closed forms, or a 1-D root to machine precision):

* stochastic optimization (user-level-ldp.md §3.7 Alg 3, §6.2 E9), on the sparse laws, whose
  features are the 2d atoms ±e_j with probability 1/(2d) each, so every expectation is a finite
  sum: ``ridge_minimizer``, ``logistic_minimizer``, ``population_loss`` and
  ``population_gradient`` of the regularised risk L(θ) = E[l(x, y, θ)] + (λ/2)‖θ‖²;
* nonparametric classification (§3.8 Alg 4, E7): ``classification_excess_risk`` of a predictor
  that is constant (±1) on each bin of the grid, ``classification_risk``,
  ``bayes_classification_risk`` and ``trivial_classification_risk``;
* nonparametric regression (§3.9 Alg 5, E8): ``regression_risk`` ∫(η̂ − η)² f of a binned
  predictor, exactly (E8 proposes 200 grid points per bin), and ``trivial_regression_risk``.

Bins: M per axis, B = M^d hypercubes; x lies in bin b(x) = Σ_a min(⌊x_a M⌋, M − 1)·M^a (0-based,
axis 0 fastest: §3.8 writes the same index 1-based). The binned laws have X ~ U[0,1]^d (f = 1)
and η depending on x_1 only, so a bin's integral is the exact integral over its x_1 interval
times the volume M^−(d−1) of its other sides.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import brentq
from scipy.special import expit

from fedldp.client.population.build import AnyPopulation
from fedldp.client.population.features import SemiFeaturePopulation
from fedldp.client.population.labeled import (
    BinnedClassification,
    BinnedLaw,
    SparseLaw,
    SparseLinear,
)
from fedldp.protocol.core.base.records import JSON, FloatArray, IntArray

__all__ = [
    "Loss",
    "bayes_classification_risk",
    "bin_index",
    "classification_excess_risk",
    "classification_risk",
    "evaluate_summary",
    "logistic_minimizer",
    "population_gradient",
    "population_loss",
    "regression_risk",
    "ridge_minimizer",
    "trivial_classification_risk",
    "trivial_regression_risk",
]

Loss = Literal["squared", "logistic"]


def _check_lam(lam: float) -> float:
    if not (math.isfinite(lam) and lam >= 0):
        raise ValueError(f"the regularisation λ must be finite and >= 0, got {lam}")
    return float(lam)


def _check_theta(law: SparseLaw, theta: ArrayLike) -> FloatArray:
    t = np.asarray(theta, dtype=np.float64)
    if t.shape != (law.dimension,) or not np.all(np.isfinite(t)):
        raise ValueError(f"θ must be {law.dimension} finite numbers, got shape {t.shape}")
    return t


# --------------------------------------------------------------------------- optimization


def ridge_minimizer(law: SparseLaw, lam: float) -> FloatArray:
    """θ* of L(θ) = E[½(y − θᵀx)²] + (λ/2)‖θ‖² on a sparse law.

    ∇L(θ) = E[xxᵀ]θ − E[xy] + λθ with E[xxᵀ] = I/d, so θ* = E[xy]/(1/d + λ): θ_true/(1 + λd)
    for sparse-linear (E[xy] = θ_true/d). For d = 2 that is θ_true/(2(½ + λ)), E9's θ*. Needs
    λ > 0 or a finite E[xxᵀ]⁻¹ (always here, so λ = 0 gives the least-squares θ).
    """
    lam = _check_lam(lam)
    d = law.dimension
    if isinstance(law, SparseLinear):
        return law.theta_true / (1.0 + lam * d)
    return law.xy_moment() / (1.0 / d + lam)


def logistic_minimizer(law: SparseLaw, lam: float) -> FloatArray:
    """θ* of L(θ) = E[log(1 + exp(−y θᵀx))] + (λ/2)‖θ‖² on a sparse law (sparse-logistic).

    θᵀx = sθ_j on the atom x = s·e_j, so L separates into one convex problem per coordinate:
    ∂L/∂θ_j(t) = (1/(2d)) Σ_{s=±1} E[−y s σ(−y s t) | x = s e_j] + λt, increasing in t, whose
    root ``scipy.optimize.brentq`` finds to 1e-15. With λ = 0 on the well-specified logistic
    law the root is θ_true. ValueError when a coordinate has no finite minimizer: λ = 0 and the
    labels separable on it (sparse-linear labels sθ_j ± ξ with |θ_j| > ξ).
    """
    lam = _check_lam(lam)
    d = law.dimension
    out = np.empty(d, dtype=np.float64)
    signs = np.array([[1.0], [-1.0]])
    for j in range(d):
        atoms = np.zeros((2, d), dtype=np.float64)
        atoms[:, j] = signs[:, 0]
        values, probs = law.label_atoms(atoms)
        ys = values * signs  # y·s on each atom and label value
        # f'(t) → (1/(2d))·Σ_{ys<0} p|ys| > 0 as t → +∞ and −(1/(2d))·Σ_{ys>0} p·ys as t → −∞:
        # without λ the root is finite iff both kinds of label carry mass
        if lam == 0 and not (np.any((ys < 0) & (probs > 0)) and np.any((ys > 0) & (probs > 0))):
            raise ValueError(
                f"the logistic risk has no finite minimizer on axis {j}: the labels are "
                "separable there and λ = 0"
            )

        def slope(t: float, ys: FloatArray = ys, probs: FloatArray = probs) -> float:
            return float(np.sum(probs * -ys * expit(-ys * t)) / (2 * d) + lam * t)

        lo, hi = -1.0, 1.0
        while slope(lo) > 0 or slope(hi) < 0:
            if hi > 2.0**60:
                raise ValueError(f"no bracket for the logistic minimizer on axis {j}")
            lo, hi = 2.0 * lo, 2.0 * hi
        out[j] = brentq(slope, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)
    return out


def _per_atom(
    law: SparseLaw, loss: Loss, theta: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """The atoms x (2d, d); per atom and label value (2d, 2): the label's probability given x,
    the loss, and the loss's derivative in the margin θᵀx (so ∇_θ l = that derivative · x)."""
    x = law.feature_atoms()
    values, probs = law.label_atoms(x)
    margin = (x @ theta)[:, None]
    if loss == "squared":
        residual = values - margin
        return x, probs, 0.5 * residual**2, -residual
    if loss == "logistic":
        z = values * margin
        return x, probs, np.logaddexp(0.0, -z), -values * expit(-z)
    raise ValueError(f"unknown loss {loss!r}: squared or logistic")


def population_loss(law: SparseLaw, loss: Loss, lam: float, theta: ArrayLike) -> float:
    """L(θ) = E[l(x, y, θ)] + (λ/2)‖θ‖² exactly, l = ½(y − θᵀx)² ("squared") or
    log(1 + exp(−yθᵀx)) ("logistic"): a finite sum over the atoms of the sparse law."""
    lam, t = _check_lam(lam), _check_theta(law, theta)
    x, probs, values, _ = _per_atom(law, loss, t)
    return float(np.sum(probs * values) / x.shape[0] + lam / 2.0 * float(t @ t))


def population_gradient(law: SparseLaw, loss: Loss, lam: float, theta: ArrayLike) -> FloatArray:
    """∇L(θ) exactly (see ``population_loss``): zero at θ*, the first-order condition."""
    lam, t = _check_lam(lam), _check_theta(law, theta)
    x, probs, _, slopes = _per_atom(law, loss, t)
    per_atom = np.sum(probs * slopes, axis=1)
    return np.asarray(x.T @ per_atom / x.shape[0] + lam * t, dtype=np.float64)


# --------------------------------------------------------------------------- binned predictors


def bin_index(x: ArrayLike, bins_per_axis: int) -> IntArray:
    """b(x) = Σ_a min(⌊x_a M⌋, M − 1)·M^a for rows x ∈ [0,1]^d (0-based, axis 0 fastest)."""
    m = _check_bins(bins_per_axis)
    pts = np.atleast_2d(np.asarray(x, dtype=np.float64))
    cells = np.clip(np.floor(pts * m), 0, m - 1).astype(np.int64)
    return np.asarray(cells @ (m ** np.arange(pts.shape[1], dtype=np.int64)), dtype=np.int64)


def _check_bins(bins_per_axis: int) -> int:
    if isinstance(bins_per_axis, bool) or int(bins_per_axis) != bins_per_axis or bins_per_axis < 1:
        raise ValueError(f"bins_per_axis must be an integer >= 1, got {bins_per_axis}")
    return int(bins_per_axis)


def _per_bin(law: BinnedLaw, bins_per_axis: int, per_bin: ArrayLike, what: str) -> FloatArray:
    m = _check_bins(bins_per_axis)
    v = np.asarray(per_bin, dtype=np.float64).reshape(-1)
    if v.size != m**law.dimension:
        raise ValueError(
            f"{what} needs one value per bin: M^d = {m}^{law.dimension} = {m**law.dimension}, "
            f"got {v.size}"
        )
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{what} must be finite")
    return v


def _intervals(bins_per_axis: int, law: BinnedLaw) -> tuple[FloatArray, FloatArray, float]:
    """x_1 interval of each bin (its axis-0 cell b mod M) and the volume of its other sides."""
    m = bins_per_axis
    cell = np.arange(m**law.dimension) % m
    return cell / m, (cell + 1.0) / m, float(m) ** -(law.dimension - 1)


def classification_excess_risk(
    law: BinnedClassification, bins_per_axis: int, bin_signs: ArrayLike
) -> float:
    """R − R* of the classifier Ŷ(x) = sign_b on bin b (user-level-ldp.md §6.2 E7), exactly:

    R − R* = Σ_b ∫_{bin b} |η(x)|·1(sign_b ≠ sign η(x)) f(x) dx. η is ≤ 0 left of the boundary
    c and ≥ 0 right of it, so the integrand is η's positive part on a bin predicted −1 and its
    negative part on a bin predicted +1, each an exact ramp integral over [a, b] ∩ [c, 1] or
    [a, b] ∩ [0, c]. ``bin_signs``: ±1 per bin (Alg 4 maps sign(0) to +1 before this).
    """
    signs = _per_bin(law, bins_per_axis, bin_signs, "bin_signs")
    if not np.all(np.abs(signs) == 1.0):
        raise ValueError("bin_signs must be +1 or -1")
    a, b, volume = _intervals(bins_per_axis, law)
    c = law.boundary
    positive = law.eta_integral(np.maximum(a, c), np.maximum(b, c))
    negative = -law.eta_integral(np.minimum(a, c), np.minimum(b, c))
    wrong = np.where(signs > 0, negative, positive)
    return float(volume * np.sum(wrong))


def bayes_classification_risk(law: BinnedClassification) -> float:
    """R* = E[(1 − |η(X)|)/2], the risk of sign η (P(Y ≠ Ŷ) for ±1 labels)."""
    c = np.array([law.boundary])
    abs_eta = law.eta_integral(c, np.ones(1)) - law.eta_integral(np.zeros(1), c)
    return float(0.5 - 0.5 * abs_eta[0])


def classification_risk(
    law: BinnedClassification, bins_per_axis: int, bin_signs: ArrayLike
) -> float:
    """R = P(Y ≠ Ŷ(X)) of the binned classifier: R* + its excess risk."""
    excess = classification_excess_risk(law, bins_per_axis, bin_signs)
    return bayes_classification_risk(law) + excess


def trivial_classification_risk(law: BinnedClassification) -> float:
    """The risk of the best constant classifier, sign E[Y]: (1 − |E[Y]|)/2."""
    return 0.5 * (1.0 - abs(law.mean_label()))


def regression_risk(law: BinnedLaw, bins_per_axis: int, bin_values: ArrayLike) -> float:
    """∫(η̂(x) − η(x))² f(x) dx of the predictor η̂ = v_b on bin b (user-level-ldp.md §3.9, E8),
    exactly: per bin, v²·|bin| − 2v∫η + ∫η², with the law's exact integrals over x_1."""
    v = _per_bin(law, bins_per_axis, bin_values, "bin_values")
    a, b, volume = _intervals(bins_per_axis, law)
    per_bin = v**2 * (b - a) - 2.0 * v * law.eta_integral(a, b) + law.eta_square_integral(a, b)
    return float(volume * np.sum(per_bin))


def trivial_regression_risk(law: BinnedLaw) -> float:
    """The risk ∫η² f of predicting 0 (E8: A²/2 = 0.125 for η = 0.5 sin(2πx))."""
    return float(law.eta_square_integral(np.zeros(1), np.ones(1))[0])


def evaluate_summary(
    summary: JSON, population: AnyPopulation, predictions: FloatArray | None = None
) -> JSON:
    """``summary`` (``fedldp.client.results.result_summary``) with the truth and the error of a
    learning protocol replaced by the task's own (the population's raw truth, θ_true or E[y], is not
    what these protocols estimate), plus an ``evaluation`` object:

    * ``user-sgd``: truth θ* of the regularised risk; error ‖θ̂ − θ*‖₂; the excess loss
      L(θ̂) − L(θ*) (sparse laws);
    * ``user-classify``: error = the excess risk R − R* of the per-cell signs, next to the
      trivial (constant) classifier's excess risk (binned-classification);
    * ``user-regress``: error = the L2 risk ∫(η̂ − η)² f, next to the risk of predicting 0
      (binned-regression);
    * semi-feature populations (``fedldp.client.population.features``) with the study's
    ``predictions`` at their
      test features: error = the excess risk (synthetic data) or the test MSE (diabetes).

    Other protocols and laws are returned unchanged.
    """
    law, name = population.labeled, summary.get("protocol")
    params, estimate = summary.get("params") or {}, summary.get("estimate")
    diagnostics = summary.get("diagnostics") or {}
    out = dict(summary)
    if isinstance(population, SemiFeaturePopulation):
        if predictions is None:
            return out
        scores = population.evaluate(predictions)
        metric = "excess_risk" if "excess_risk" in scores else "test_mse"
        return out | {
            "truth": None,
            "error": scores[metric],
            "error_norm": metric.replace("_", " ").replace("mse", "MSE"),
            "evaluation": scores,
        }
    if name == "user-sgd" and isinstance(law, SparseLaw) and estimate is not None:
        loss: Loss = params.get("loss", "squared")
        lam = float(params.get("regularization", 0.0))
        star = logistic_minimizer(law, lam) if loss == "logistic" else ridge_minimizer(law, lam)
        theta = np.asarray(estimate, dtype=np.float64)
        excess = population_loss(law, loss, lam, theta) - population_loss(law, loss, lam, star)
        out |= {
            "truth": star.tolist(),
            "error": float(np.linalg.norm(theta - star)),
            "error_norm": "l2",
            "evaluation": {"target": "minimizer θ* of the regularised risk", "excess_loss": excess},
        }
    elif name == "user-classify" and isinstance(law, BinnedClassification):
        bins = int(diagnostics["bins_per_axis"])
        excess = classification_excess_risk(law, bins, np.asarray(estimate))
        trivial = trivial_classification_risk(law) - bayes_classification_risk(law)
        out |= {
            "truth": None,
            "error": excess,
            "error_norm": "excess risk",
            "evaluation": {"excess_risk": excess, "trivial_excess_risk": trivial},
        }
    elif name == "user-regress" and isinstance(law, BinnedLaw):
        bins = int(diagnostics["bins_per_axis"])
        risk = regression_risk(law, bins, np.asarray(estimate))
        out |= {
            "truth": None,
            "error": risk,
            "error_norm": "L2 risk",
            "evaluation": {"risk": risk, "trivial_risk": trivial_regression_risk(law)},
        }
    return out

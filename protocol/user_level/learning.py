"""Learning with user-level LDP (Zhao et al. 2024, arXiv:2405.17079) on the Alg-2 engine:
stochastic optimization by gradient rounds (Alg 3), nonparametric classification (Alg 4) and
regression (Alg 5).

Spec: user-level-ldp.md §3.7–§3.9, §3.11 (U10–U19), §5.3. Every user holds m labeled samples
(x_ij ∈ R^d, y_ij); see ``fedldp.protocol.user_level.driver.ComponentProtocol`` for rounds,
grouping, the per-user ε rule and the ledger.

* ``user-sgd``: t0 sequential invocations on disjoint user groups; in invocation t the users
  compute per-sample gradients at the broadcast θ_t, clip each to ℓ2 norm D, and privatize their
  average through Alg 2-K (Kashin, default) or Alg 2 (ℓ∞); the server decodes the gradient ĝ_t
  and steps θ_{t+1} = Π(θ_t − η ĝ_t) onto the ℓ2 ball of the parameter set.
* ``user-classify`` / ``user-regress``: [0,1]^d cut into M^d bins; labels Hadamard-encoded per
  bin (U_ijk = y_ij·H_{k,b(x_ij)}, and for regression also V_ijk = H_{k,b(x_ij)}); Alg 2 on the K
  (2K) encodings; decoding q̂ = H Q̂/K (p̂ = H P̂/K). Predictions: sign(q̂_b) (sign(0) = +1) and
  clip(q̂_b / max(p̂_b, f_L l^d/2), −T, T). ``predict`` maps feature rows to predictions.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
from numpy.typing import ArrayLike
from pydantic import Field, model_validator

from fedldp.protocol.core.base import (
    JSON,
    DataKind,
    FloatArray,
    IntArray,
    Plan,
    Predictor,
    Protocol,
    ReportChunk,
    Result,
    UserData,
)
from fedldp.protocol.core.broadcast import described
from fedldp.protocol.mechanisms.transforms import KashinFrame, fwht, next_power_of_two
from fedldp.protocol.user_level import components as comp
from fedldp.protocol.user_level import two_stage as ts
from fedldp.protocol.user_level.driver import (
    ComponentParams,
    ComponentProtocol,
    kashin_public,
    study_frame,
    user_sample_block,
)

__all__ = [
    "PROTOCOLS",
    "BinnedParams",
    "ClassifyParams",
    "RegressParams",
    "SgdParams",
    "UserClassify",
    "UserRegress",
    "UserSgd",
    "grid_bins",
    "sgd_rounds",
]

MAX_BINS = 1 << 12
"""Upper bound on the bins M^d of a classification or regression grid."""


def _labeled_block(data: UserData, m: int, d: int) -> tuple[FloatArray, FloatArray]:
    """The users' first m labeled samples: features (n, m, d) and labels (n, m)."""
    if data.labels is None:
        raise ValueError("this protocol takes labeled samples (features and a label)")
    x = np.asarray(user_sample_block(data, m, d), dtype=np.float64)
    kept = data.truncated(m)
    assert kept.labels is not None
    y = np.asarray(kept.labels, dtype=np.float64).reshape(x.shape[0], m)
    if not np.all(np.isfinite(y)):
        raise ValueError("labels must be finite")
    return x, y


# --------------------------------------------------------------------------- Alg 3


class SgdParams(ComponentParams):
    dimension: int = Field(ge=1, le=1024, description="d: dimension of features and of θ")
    loss: Literal["squared", "logistic"] = Field(
        "squared",
        description="squared: ½(y − θᵀx)² (linear regression); logistic: log(1 + e^{−yθᵀx}), "
        "y = ±1 (classification); both plus (λ/2)‖θ‖²",
    )
    regularization: float = Field(0.0, ge=0, le=1e6, description="λ of the (λ/2)‖θ‖² term")
    gradient_bound: float = Field(
        1.0, gt=0, description="D: per-sample gradients are clipped to ‖g‖₂ <= D (§3.7, U10)"
    )
    smoothness: float = Field(1.0, gt=0, description="G: per-sample losses are G-smooth")
    strong_convexity: float = Field(
        0.5, gt=0, description="γ: the population loss is γ-strongly convex"
    )
    step: float | None = Field(None, gt=0, description="η (default 1/G, §3.7)")
    rounds: int | None = Field(
        None, ge=1, le=200, description="t0 gradient rounds (default: the §3.7 formula)"
    )
    initial_distance: float = Field(
        1.0, gt=0, description="R0: a bound on ‖θ0 − θ*‖ (sets the default t0)"
    )
    parameter_radius: float = Field(
        10.0, gt=0, description="θ is projected onto the ℓ2 ball of this radius after each step"
    )
    mean_estimator: Literal["l2", "linf"] = Field(
        "l2", description="l2: Alg 2-K on Kashin coefficients (U11); linf: the literal Alg 2"
    )
    kashin_constant: float = Field(2.5, gt=0, le=100, description="K of the Kashin bound")

    @model_validator(mode="after")
    def _step_size(self) -> SgdParams:
        if self.step is not None and self.step > 1.0 / self.smoothness:
            raise ValueError("step η must be <= 1/G (Thm 8)")
        return self


def sgd_rounds(params: SgdParams, n: int) -> int:
    """t0 (§3.7 [PROPOSAL]): ⌈(2/(ηγ))·ln(max(e, R0·γ·√(nm)/D))⌉, at least 1, unless given."""
    if params.rounds is not None:
        return params.rounds
    eta = params.step or 1.0 / params.smoothness
    gamma, m = params.strong_convexity, params.samples_per_user
    ratio = params.initial_distance * gamma * math.sqrt(n * m) / params.gradient_bound
    return max(1, math.ceil(2.0 / (eta * gamma) * math.log(max(math.e, ratio))))


class UserSgd(ComponentProtocol[SgdParams]):
    """Alg 3 (§3.7): t0 gradient rounds, each an Alg-2(-K) invocation on a fresh disjoint group of
    n/t0 users, θ0 = 0, η = 1/G, projected steps. Each stage-II round's output carries θ_t, the
    decoded gradient estimate ĝ_t, the step η and θ_{t+1}; every user is charged in one round only.
    """

    name: ClassVar[str] = "user-sgd"
    broadcast_fields: ClassVar[Mapping[str, str]] = described(
        "invocation",
        "layout",
        "families",
        "reference_epsilon",
        "n_ref",
        "c_star",
        "step",
        "frame_seed",
        "kashin_observed",
        "theta",
        "sensitivity",
        "lo",
        "hi",
    )
    summary: ClassVar[str] = (
        "User-level LDP stochastic optimization (linear or logistic regression): gradient "
        "rounds on disjoint user groups, each averaging privatized local gradients."
    )
    source: ClassVar[str] = "Zhao et al. 2024 (arXiv:2405.17079), Alg. 3 and Thm 8"
    heterogeneity: ClassVar[str] = (
        "As Alg 2 (user-mean-linf): the regime comes from a reference ε (default the median) and "
        "every user spends the same fraction of its own ε_i, with inverse-variance weights."
    )
    data_kind: ClassVar[DataKind] = "labeled"
    params_model = SgdParams

    def invocations(
        self, params: SgdParams, eps: FloatArray, eps_ref: float, c: int
    ) -> tuple[int, str]:
        """t0 from §3.7; the default is lowered until every round's groups pass the §1.5 score
        (§3.7 "Feasibility": reduce t0 and warn). An explicit ``rounds`` is kept as given."""
        n = int(eps.size)
        t0 = sgd_rounds(params, n)
        if (
            params.rounds is not None
            or ts.bounded_design(1.0, params.samples_per_user, n).n_bins <= 2
        ):
            return t0, ""
        wanted = t0
        while t0 > 1 and comp.typical_score(c, eps_ref, n // t0) < ts.FEASIBLE_SCORE:
            t0 -= 1
        if t0 == wanted:
            return t0, ""
        return t0, (
            f"{wanted} gradient rounds (§3.7) would leave each round too few users for its "
            f"stage-one interval search (§1.5); using {t0}: the optimization term of the error "
            "may dominate"
        )

    def public_extras(self, params: SgdParams, eps: FloatArray, eps_ref: float, seed: int) -> JSON:
        out: JSON = {"step": params.step or 1.0 / params.smoothness}
        if params.mean_estimator == "l2":
            out |= kashin_public(params.dimension, seed, params.kashin_constant)
        return out

    def n_components(self, params: SgdParams, public: JSON) -> int:
        if params.mean_estimator == "l2":
            return self._frame(params, public).n_coef
        return params.dimension

    def _frame(self, params: SgdParams, public: JSON) -> KashinFrame:
        return study_frame(params.dimension, params.kashin_constant, public)

    def families(self, params: SgdParams, c: int, n_ref: int, call_eps_sq: float) -> comp.Families:
        bound = params.gradient_bound
        if params.mean_estimator == "l2":
            bound = params.kashin_constant * bound / math.sqrt(params.dimension)
        design = ts.bounded_design(bound, params.samples_per_user, n_ref)
        return comp.Families((design,), np.zeros(c, dtype=np.int64))

    def gradients(self, params: SgdParams, theta: FloatArray, x: FloatArray, y: FloatArray) -> Any:
        """Per-sample gradients of the loss plus (λ/2)‖θ‖², clipped to ℓ2 norm D: (..., d)."""
        margin = x @ theta
        if params.loss == "squared":
            g = (margin - y)[..., None] * x
        else:
            g = (-y / (1.0 + np.exp(np.clip(y * margin, -700, 700))))[..., None] * x
        g = g + params.regularization * theta
        norms = np.linalg.norm(g, axis=-1, keepdims=True)
        scale = np.minimum(1.0, params.gradient_bound / np.maximum(norms, 1e-300))
        return g * scale

    def component_values(self, params: SgdParams, broadcast: JSON, data: UserData) -> FloatArray:
        x, y = _labeled_block(data, params.samples_per_user, params.dimension)
        theta = np.asarray(broadcast["theta"], dtype=np.float64)
        g = self.gradients(params, theta, x, y)
        if params.mean_estimator == "l2":
            frame = self._frame(params, broadcast)
            g = frame.coefficients(g.reshape(-1, params.dimension)).reshape(*x.shape[:2], -1)
        return np.asarray(g.mean(axis=1), dtype=np.float64)

    def _decode(self, params: SgdParams, public: JSON, theta_hat: FloatArray) -> FloatArray:
        if params.mean_estimator == "l2":
            return np.asarray(self._frame(params, public).decode(theta_hat), dtype=np.float64)
        return theta_hat

    def _project(self, params: SgdParams, theta: FloatArray) -> FloatArray:
        norm = float(np.linalg.norm(theta))
        if norm > params.parameter_radius:
            return np.asarray(theta * (params.parameter_radius / norm), dtype=np.float64)
        return theta

    def trajectory(
        self, params: SgdParams, plan: Plan, outputs: Sequence[JSON]
    ) -> list[FloatArray]:
        """θ_0, θ_1, ... as far as the stage-II outputs go (θ0 = 0)."""
        thetas = [np.zeros(params.dimension, dtype=np.float64)]
        for t in range(len(outputs) // 2):
            g = self._decode(params, plan.public, self.component_estimate(outputs, t)[0])
            step = float(plan.public["step"])
            thetas.append(self._project(params, thetas[-1] - step * g))
        return thetas

    def invocation_message(
        self, params: SgdParams, plan: Plan, t: int, outputs: Sequence[JSON]
    ) -> JSON:
        if len(outputs) < 2 * t:
            raise ValueError(f"gradient round {t} needs the outputs of the rounds before it")
        return {"theta": self.trajectory(params, plan, outputs[: 2 * t])[t].tolist()}

    def aggregate(
        self,
        params: SgdParams,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        out = super().aggregate(params, plan, round_index, broadcast, chunks)
        if round_index % 2 == 0:
            return out
        theta = np.asarray(broadcast["theta"], dtype=np.float64)
        gradient = self._decode(params, plan.public, np.asarray(out["estimate"]))
        step = float(plan.public["step"])
        return out | {
            "theta": theta.tolist(),
            "gradient": gradient.tolist(),
            "step": step,
            "theta_next": self._project(params, theta - step * gradient).tolist(),
        }

    def finalize(self, params: SgdParams, plan: Plan, outputs: Sequence[JSON]) -> Result:
        thetas = self.trajectory(params, plan, outputs)
        rounds = len(plan.public["invocations"])
        if len(thetas) != rounds + 1:
            raise ValueError(f"user-sgd finalizes after its {2 * rounds} rounds")
        diagnostics: JSON = {
            **self.stage_diagnostics(plan, outputs, 0),
            "gradient_rounds": rounds,
            "step": plan.public["step"],
            "trajectory": [t.tolist() for t in thetas],
            "loss": params.loss,
            "regularization": params.regularization,
        }
        return Result(thetas[-1].tolist(), None, diagnostics, plan.warnings)


# --------------------------------------------------------------------------- Alg 4 / Alg 5


class BinnedParams(ComponentParams):
    dimension: int = Field(1, ge=1, le=12, description="d: features lie in [0, 1]^d")
    bins_per_axis: int | None = Field(
        None, ge=2, le=MAX_BINS, description="M (default: the §3.8/§3.9 bias-variance rule)"
    )
    holder_constant: float = Field(1.0, gt=0, description="C_b of the Hölder condition")
    holder_exponent: float = Field(1.0, gt=0, le=1, description="β of the Hölder condition")
    density_lower: float = Field(1.0, gt=0, description="f_L: the feature density is >= f_L")


B = TypeVar("B", bound=BinnedParams)


def grid_bins(x: ArrayLike, bins_per_axis: int) -> IntArray:
    """0-based bin b(x) = Σ_a min(⌊x_a M⌋, M − 1)·M^a of feature rows (..., d) (§3.8, U12);
    features are clipped into [0, 1] first."""
    v = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
    cell = np.minimum(np.floor(v * bins_per_axis).astype(np.int64), bins_per_axis - 1)
    weights = bins_per_axis ** np.arange(v.shape[-1], dtype=np.int64)
    return np.asarray(cell @ weights, dtype=np.int64)


class _Binned(ComponentProtocol[B], Predictor[B]):
    """Shared by Alg 4 and Alg 5: the grid, the Hadamard encodings and the decoding."""

    data_kind: ClassVar[DataKind] = "labeled"
    heterogeneity: ClassVar[str] = UserSgd.heterogeneity
    encodings: ClassVar[int]  # 1 (U only, Alg 4) or 2 (U and V, Alg 5)

    @abstractmethod
    def noise_sd(self, params: B, n: int, m: int, eps: float, r: int) -> float:
        """σ of a decoded bin value in the high (ε <= 1) or medium (r = ⌊ε⌋) regime."""

    @abstractmethod
    def side(self, params: B, sd: float | None, n: int, m: int) -> float:
        """The bin side l from the §3.8/§3.9 rule (``sd`` None: the low-regime rule)."""

    def _grid(self, params: B, n: int, eps_ref: float) -> int:
        """M: the §3.8/§3.9 rule, then decreased until every Alg-1 call passes the §1.5
        feasibility score 500 for a user at the reference ε (U19)."""
        m, d = params.samples_per_user, params.dimension
        if params.bins_per_axis is not None:
            return params.bins_per_axis
        r = max(1, math.floor(eps_ref))
        bins = max(
            2, math.ceil(1.0 / self.side(params, self.noise_sd(params, n, m, eps_ref, r), n, m))
        )
        components = self.encodings * next_power_of_two(min(bins**d, MAX_BINS))
        if eps_ref >= components * math.log(n):  # the low-privacy regime (§3.8, §3.9)
            bins = max(2, math.ceil(1.0 / self.side(params, None, n, m)))
        while bins > 2 and (bins**d > MAX_BINS or not self._feasible(bins, n, eps_ref, d)):
            bins -= 1
        return bins

    def _feasible(self, bins: int, n: int, eps_ref: float, d: int) -> bool:
        c = self.encodings * next_power_of_two(bins**d)
        return comp.typical_score(c, eps_ref, n) >= ts.FEASIBLE_SCORE

    def families(self, params: B, c: int, n_ref: int, call_eps_sq: float) -> comp.Families:
        """Alg 4: every encoding U_ijk = y·H_{k,b(x)} is bounded by 1 (D = 1)."""
        design = ts.bounded_design(1.0, params.samples_per_user, n_ref)
        return comp.Families((design,), np.zeros(c, dtype=np.int64))

    def public_extras(self, params: B, eps: FloatArray, eps_ref: float, seed: int) -> JSON:
        bins = self._grid(params, int(eps.size), eps_ref)
        n_cells = bins**params.dimension
        return {"bins_per_axis": bins, "n_cells": n_cells, "hadamard": next_power_of_two(n_cells)}

    def n_components(self, params: B, public: JSON) -> int:
        return self.encodings * int(public["hadamard"])

    def component_values(self, params: B, broadcast: JSON, data: UserData) -> FloatArray:
        m = params.samples_per_user
        x, y = _labeled_block(data, m, params.dimension)
        k = int(broadcast["hadamard"])
        cells = grid_bins(x, int(broadcast["bins_per_axis"]))  # (n, m)
        n = cells.shape[0]
        flat = (np.arange(n)[:, None] * k + cells).reshape(-1)
        label_sums = np.bincount(flat, y.reshape(-1), minlength=n * k).reshape(n, k)
        values = [fwht(label_sums) / m]
        if self.encodings == 2:
            counts = np.bincount(flat, minlength=n * k).reshape(n, k).astype(np.float64)
            values.append(fwht(counts) / m)
        return np.asarray(np.concatenate(values, axis=1), dtype=np.float64)

    def decoded(self, plan: Plan, outputs: Sequence[JSON]) -> tuple[FloatArray, FloatArray]:
        """q̂ (and p̂ for Alg 5) per cell, each = H·(estimated encodings)/K, first n_cells."""
        theta, _ = self.component_estimate(outputs, 0)
        k, cells = int(plan.public["hadamard"]), int(plan.public["n_cells"])
        parts = theta.reshape(self.encodings, k)
        q = fwht(parts[0]) / k
        p = fwht(parts[-1]) / k if self.encodings == 2 else np.ones(k)
        return np.asarray(q[:cells]), np.asarray(p[:cells])

    @abstractmethod
    def cell_predictions(self, params: B, plan: Plan, outputs: Sequence[JSON]) -> FloatArray:
        """The prediction on each grid cell."""

    def feature_dimension(self, params: B) -> int:
        return params.dimension

    def predict(
        self, params: B, plan: Plan, outputs: Sequence[JSON], features: ArrayLike
    ) -> FloatArray:
        """Predictions for feature rows (k, d) from a finished study's round outputs."""
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != params.dimension or not np.all(np.isfinite(x)):
            raise ValueError(f"features must be finite rows of dimension {params.dimension}")
        table = self.cell_predictions(params, plan, outputs)
        return np.asarray(table[grid_bins(x, int(plan.public["bins_per_axis"]))])

    def finalize(self, params: B, plan: Plan, outputs: Sequence[JSON]) -> Result:
        predictions = self.cell_predictions(params, plan, outputs)
        q, p = self.decoded(plan, outputs)
        _, var = self.component_estimate(outputs, 0)
        diagnostics: JSON = {
            **self.stage_diagnostics(plan, outputs, 0),
            "bins_per_axis": plan.public["bins_per_axis"],
            "n_cells": plan.public["n_cells"],
            "hadamard": plan.public["hadamard"],
            "q_hat": q.tolist(),
            "component_mse": float(np.mean(var)),
        }
        if self.encodings == 2:
            diagnostics["p_hat"] = p.tolist()
        return Result(predictions.tolist(), None, diagnostics, plan.warnings)


class ClassifyParams(BinnedParams):
    pass


class UserClassify(_Binned[ClassifyParams]):
    """Alg 4 (§3.8): labels y = ±1; q̂_b estimates E[Y·1(X ∈ bin b)]; the classifier is
    sign(q̂_b) on bin b. The result's estimate is the prediction (±1) of every cell."""

    name: ClassVar[str] = "user-classify"
    broadcast_fields: ClassVar[Mapping[str, str]] = described(
        "invocation",
        "layout",
        "families",
        "reference_epsilon",
        "n_ref",
        "c_star",
        "bins_per_axis",
        "n_cells",
        "hadamard",
        "sensitivity",
        "lo",
        "hi",
    )
    summary: ClassVar[str] = (
        "User-level LDP nonparametric classification: binned features, Hadamard-encoded "
        "labels, sign of the estimated per-bin label mass."
    )
    source: ClassVar[str] = "Zhao et al. 2024 (arXiv:2405.17079), Alg. 4 and Thm 9"
    params_model = ClassifyParams
    encodings: ClassVar[int] = 1

    def noise_sd(self, params: ClassifyParams, n: int, m: int, eps: float, r: int) -> float:
        c2 = ts.c_star(n) ** 2
        if eps <= 1.0:
            return math.sqrt(2.0 / (n * m) * (1.0 + 2.0 * c2 / eps**2))
        return math.sqrt(2.0 / (n * m * r) * (1.0 + 2.0 * c2))

    def side(self, params: ClassifyParams, sd: float | None, n: int, m: int) -> float:
        d, beta = params.dimension, params.holder_exponent
        low = float((n * m / math.log(n)) ** (-1.0 / (2.0 * beta + d)))
        if sd is None:
            return low
        denominator = beta * params.holder_constant * d ** (beta / 2.0) * params.density_lower
        return float((d * sd / denominator) ** (1.0 / (d + beta)))

    def cell_predictions(
        self, params: ClassifyParams, plan: Plan, outputs: Sequence[JSON]
    ) -> FloatArray:
        q, _ = self.decoded(plan, outputs)
        return np.where(q >= 0, 1.0, -1.0)  # sign(0) := +1 (U13)


class RegressParams(BinnedParams):
    label_bound: float = Field(1.0, gt=0, description="T: every label has |y| <= T")


class UserRegress(_Binned[RegressParams]):
    """Alg 5 (§3.9): 2K encodings, U (labels, bound T) and V (bin indicators, bound 1), as 2K
    Alg-2 components (U14); η̂_b = clip(q̂_b / max(p̂_b, f_L l^d/2), −T, T) (U15). The result's
    estimate is the prediction of every cell."""

    name: ClassVar[str] = "user-regress"
    broadcast_fields: ClassVar[Mapping[str, str]] = described(
        "invocation",
        "layout",
        "families",
        "reference_epsilon",
        "n_ref",
        "c_star",
        "bins_per_axis",
        "n_cells",
        "hadamard",
        "sensitivity",
        "lo",
        "hi",
    )
    summary: ClassVar[str] = (
        "User-level LDP nonparametric regression: binned features, Hadamard-encoded labels "
        "and bin masses, ratio of the estimates per bin."
    )
    source: ClassVar[str] = "Zhao et al. 2024 (arXiv:2405.17079), Alg. 5 and Thm 11"
    params_model = RegressParams
    encodings: ClassVar[int] = 2

    def families(
        self, params: RegressParams, c: int, n_ref: int, call_eps_sq: float
    ) -> comp.Families:
        m = params.samples_per_user
        designs = (
            ts.bounded_design(params.label_bound, m, n_ref),
            ts.bounded_design(1.0, m, n_ref),
        )
        family = np.repeat(np.arange(2, dtype=np.int64), c // 2)
        return comp.Families(designs, family)

    def noise_sd(self, params: RegressParams, n: int, m: int, eps: float, r: int) -> float:
        c2 = ts.c_star(n) ** 2
        eff = eps**2 if eps <= 1.0 else float(r)
        base = 4.0 / (n * m) * (1.0 + 2.0 * c2 / eff)
        t2 = params.label_bound**2
        return math.sqrt((t2 * base + t2 * base) / params.density_lower)

    def side(self, params: RegressParams, sd: float | None, n: int, m: int) -> float:
        d, beta = params.dimension, params.holder_exponent
        if sd is None:
            return float((m * n / math.log(n)) ** (-1.0 / (2.0 * beta + d)))
        b = sd**2  # (σ_q² + T²σ_p²)/f_L
        cb2 = params.holder_constant**2
        return float((d * b / (beta * cb2 * d**beta)) ** (1.0 / (2.0 * (beta + d))))

    def cell_predictions(
        self, params: RegressParams, plan: Plan, outputs: Sequence[JSON]
    ) -> FloatArray:
        q, p = self.decoded(plan, outputs)
        side = 1.0 / int(plan.public["bins_per_axis"])
        floor = params.density_lower * side**params.dimension / 2.0
        t = params.label_bound
        return np.asarray(np.clip(q / np.maximum(p, floor), -t, t), dtype=np.float64)


PROTOCOLS: tuple[Protocol[Any], ...] = (UserSgd(), UserClassify(), UserRegress())

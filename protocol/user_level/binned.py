"""Nonparametric classification (Alg 4) and regression (Alg 5) under user-level LDP (Zhao et al.
2024, arXiv:2405.17079) as the catalogue protocols ``user-classify`` and ``user-regress``, on the
Alg-2 engine; a finished study is a predictor.

Spec: user-level-ldp.md §3.8–§3.9, §3.11 (U10–U19), §5.3. Every user holds m labeled samples
(x_ij ∈ [0,1]^d, y_ij); see ``fedldp.protocol.user_level.driver.ComponentProtocol`` for rounds,
grouping, the per-user ε rule and the ledger. [0,1]^d is cut into M^d bins; labels are
Hadamard-encoded per bin (U_ijk = y_ij·H_{k,b(x_ij)}, and for regression also
V_ijk = H_{k,b(x_ij)}); Alg 2 runs on the K (2K) encodings; decoding q̂ = H Q̂/K (p̂ = H P̂/K).
Predictions: sign(q̂_b) (sign(0) = +1) and clip(q̂_b / max(p̂_b, f_L l^d/2), −T, T). ``predict``
maps feature rows to predictions.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
from numpy.typing import ArrayLike
from pydantic import Field, model_validator

from fedldp.protocol.api import (
    JSON,
    DataKind,
    FloatArray,
    IntArray,
    Plan,
    Predictor,
    Protocol,
    Result,
    UserData,
)
from fedldp.protocol.core.base.bounds import SCALE_MIN, Scale
from fedldp.protocol.mechanisms.transforms import fwht, next_power_of_two
from fedldp.protocol.user_level import two_stage as ts
from fedldp.protocol.user_level.driver import (
    MAX_COMPONENTS,
    ComponentParams,
    ComponentProtocol,
    component_fields,
    labeled_sample_block,
)
from fedldp.protocol.user_level.layout import Families, typical_score
from fedldp.protocol.user_level.sgd import UserSgd

__all__ = [
    "MAX_BINS",
    "PROTOCOLS",
    "BinnedParams",
    "ClassifyParams",
    "RegressParams",
    "UserClassify",
    "UserRegress",
    "grid_bins",
]

MAX_BINS = 1 << 12
"""Upper bound on the bins M^d of a classification or regression grid."""


class BinnedParams(ComponentParams):
    # d <= 12: at least 2 bins per axis, and 2^12 = MAX_BINS cells
    dimension: int = Field(1, ge=1, le=12, description="d: features lie in [0, 1]^d")
    bins_per_axis: int | None = Field(
        None, ge=2, le=MAX_BINS, description="M (default: the §3.8/§3.9 bias-variance rule)"
    )
    holder_constant: Scale = Field(1.0, description="C_b of the Hölder condition")
    holder_exponent: float = Field(
        1.0,
        ge=SCALE_MIN,  # with C_b and f_L >= SCALE_MIN, the rule's β·C_b·f_L stays a normal float
        le=1,
        description="β of the Hölder condition",
    )
    density_lower: Scale = Field(1.0, description="f_L: the feature density is >= f_L")

    encodings: ClassVar[int] = 1
    """Alg-2 components per Hadamard row: 1 (U only, Alg 4) or 2 (U and V, Alg 5)."""

    @model_validator(mode="after")
    def _grid_fits(self) -> BinnedParams:
        m = self.bins_per_axis
        if m is not None:  # the plan's component cap, checked whatever the population
            c = self.encodings * next_power_of_two(m**self.dimension)
            if c > MAX_COMPONENTS:
                raise ValueError(
                    f"bins_per_axis^dimension = {m}^{self.dimension} cells need {c} Alg-2 "
                    f"components, more than the {MAX_COMPONENTS} an invocation runs"
                )
        return self


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

    broadcast_fields: ClassVar[Mapping[str, str]] = component_fields(
        "bins_per_axis", "n_cells", "hadamard"
    )

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
        bins = min(bins, MAX_BINS)  # no more per axis fits the grid cap: the loop starts there
        while bins > 2 and (bins**d > MAX_BINS or not self._feasible(bins, n, eps_ref, d)):
            bins -= 1
        return bins

    def _feasible(self, bins: int, n: int, eps_ref: float, d: int) -> bool:
        c = self.encodings * next_power_of_two(bins**d)
        return typical_score(c, eps_ref, n) >= ts.FEASIBLE_SCORE

    def families(self, params: B, c: int, n_ref: int, call_eps_sq: float) -> Families:
        """Alg 4: every encoding U_ijk = y·H_{k,b(x)} is bounded by 1 (D = 1)."""
        design = ts.bounded_design(1.0, params.samples_per_user, n_ref)
        return Families((design,), np.zeros(c, dtype=np.int64))

    def public_extras(self, params: B, eps: FloatArray, eps_ref: float, seed: int) -> JSON:
        bins = self._grid(params, int(eps.size), eps_ref)
        n_cells = bins**params.dimension
        return {"bins_per_axis": bins, "n_cells": n_cells, "hadamard": next_power_of_two(n_cells)}

    def n_components(self, params: B, public: JSON) -> int:
        return self.encodings * int(public["hadamard"])

    def component_values(self, params: B, broadcast: JSON, data: UserData) -> FloatArray:
        m = params.samples_per_user
        x, y = labeled_sample_block(data, m, params.dimension)
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
    summary: ClassVar[str] = (
        "User-level LDP nonparametric classification: binned features, Hadamard-encoded "
        "labels, sign of the estimated per-bin label mass."
    )
    source: ClassVar[str] = "Zhao et al. 2024 (arXiv:2405.17079), Alg. 4 and Thm 9"
    params_model = ClassifyParams
    encodings: ClassVar[int] = ClassifyParams.encodings

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
    label_bound: Scale = Field(1.0, description="T: every label has |y| <= T")

    encodings: ClassVar[int] = 2


class UserRegress(_Binned[RegressParams]):
    """Alg 5 (§3.9): 2K encodings, U (labels, bound T) and V (bin indicators, bound 1), as 2K
    Alg-2 components (U14); η̂_b = clip(q̂_b / max(p̂_b, f_L l^d/2), −T, T) (U15). The result's
    estimate is the prediction of every cell."""

    name: ClassVar[str] = "user-regress"
    summary: ClassVar[str] = (
        "User-level LDP nonparametric regression: binned features, Hadamard-encoded labels "
        "and bin masses, ratio of the estimates per bin."
    )
    source: ClassVar[str] = "Zhao et al. 2024 (arXiv:2405.17079), Alg. 5 and Thm 11"
    params_model = RegressParams
    encodings: ClassVar[int] = RegressParams.encodings

    def families(self, params: RegressParams, c: int, n_ref: int, call_eps_sq: float) -> Families:
        m = params.samples_per_user
        designs = (
            ts.bounded_design(params.label_bound, m, n_ref),
            ts.bounded_design(1.0, m, n_ref),
        )
        family = np.repeat(np.arange(2, dtype=np.int64), c // 2)
        return Families(designs, family)

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


PROTOCOLS: tuple[Protocol[Any], ...] = (UserClassify(), UserRegress())

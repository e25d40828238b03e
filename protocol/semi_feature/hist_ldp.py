"""``hist-ldp``, the classical-LDP histogram baseline of semi-feature LDP (Ma, Jia, Yang; spec
public-features-ldp.md §3, §3.1): every feature and the label are private, each user sends
Laplace-privatized one-hot and label vectors over the cells of a regular grid, and the predictor
is the ratio of their sums per cell. Compared with HistOfTree
(``fedldp.protocol.semi_feature.histoftree``) and the tree baselines
(``fedldp.protocol.semi_feature.tree_baselines``) side by side. Data layout and label reports:
``fedldp.protocol.semi_feature.common``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import Field, model_validator

from fedldp.protocol.api import (
    JSON,
    DataKind,
    FloatArray,
    IntArray,
    Plan,
    Predictor,
    Protocol,
    RandomSource,
    ReportChunk,
    Result,
    RoundPlan,
    RoundTask,
    UserData,
    around,
    check_epsilons,
    laplace,
    laplace_reach,
    laplace_scale,
)
from fedldp.protocol.core.broadcast import described
from fedldp.protocol.semi_feature.common import (
    MAX_HIST_CELLS,
    POPULATION_PROBE,
    SEMI_POPULATION_RULE,
    SemiParams,
    features_of,
    plan_epsilons,
    probe_metadata,
    semi_feature_block,
)
from fedldp.protocol.semi_feature.partition import histogram_bins

__all__ = ["PROTOCOLS", "HistLdp", "HistParams", "grid_cells"]


class HistParams(SemiParams):
    bins: int = Field(2, ge=1, le=64, description="t: bins per feature (t^d cells)")
    truncation: float = Field(
        0.05, ge=0, le=1, description="ζ: a cell with estimated mass p̂_k < ζ is truncated"
    )
    truncate_to: Literal["centre", "zero"] = Field(
        "centre",
        description="truncated cells predict the label centre m (default) or the raw 0 (the "
        "literal 'truncated to 0', spec #21)",
    )

    @model_validator(mode="after")
    def _grid_fits(self) -> HistParams:
        cells = self.bins**self.dimension
        if cells > MAX_HIST_CELLS:  # the plan's cap, whatever the population
            raise ValueError(
                f"bins^dimension = {self.bins}^{self.dimension} = {cells} cells; at most "
                f"{MAX_HIST_CELLS} are supported (spec §3: infeasible)"
            )
        return self


def grid_cells(x: FloatArray, t: int) -> IntArray:
    """C-order flat index of the t^d equal-width cell of each row (§2.3 bins on every axis)."""
    bins = histogram_bins(x, t)
    weights = t ** np.arange(x.shape[1] - 1, -1, -1, dtype=np.int64)
    return np.asarray(bins @ weights, dtype=np.int64)


class HistLdp(Protocol[HistParams], Predictor[HistParams]):
    """Hist (§3, App. C.1; Berrett et al. 2021, Györfi & Kroll 2022): classical LDP, every feature
    and the label private. Each user sends Z̃ = Y_c·1{X ∈ C_k} + Lap(4M/ε_i) and W̃ = 1{X ∈ C_k} +
    Lap(4/ε_i) over the K = t^d cells (ε_i/2 each: two messages). Cell value ΣZ̃/ΣW̃ when
    p̂_k = ΣW̃/n >= ζ, else the truncation value; clipped to [y_lo, y_hi]."""

    population_rule: ClassVar[str] = SEMI_POPULATION_RULE
    population_probe: ClassVar[Mapping[str, Any]] = POPULATION_PROBE

    def population_metadata(self, params: HistParams, n: int) -> Mapping[str, NDArray[Any]]:
        return probe_metadata(n, params.dimension)

    name: ClassVar[str] = "hist-ldp"
    broadcast_fields: ClassVar[Mapping[str, str]] = described(
        "cells", "bins", "dimension", "label_low", "label_high"
    )
    summary: ClassVar[str] = (
        "Classical-LDP histogram regression: Laplace-noised per-cell label sums and counts on an "
        "equal-width grid over all features, truncated where the estimated mass is small."
    )
    source: ClassVar[str] = (
        "Ma, Jia, Yang (baseline Hist, App. C.1); Berrett et al. 2021; Györfi & Kroll 2022; "
        "spec public-features-ldp.md §3"
    )
    heterogeneity: ClassVar[str] = (
        "Non-paper extension: per-user Laplace scales 4M/ε_i and 4/ε_i; the server sums the "
        "vectors with equal weights (the paper's estimator when every ε_i is equal)."
    )
    data_kind: ClassVar[DataKind] = "labeled"
    params_model = HistParams

    def _cells(self, params: HistParams) -> int:
        cells = params.bins**params.dimension
        if cells > MAX_HIST_CELLS:
            raise ValueError(
                f"Hist with t = {params.bins} in d = {params.dimension} needs {cells} cells; at "
                f"most {MAX_HIST_CELLS} are supported (spec §3: infeasible)"
            )
        return int(cells)

    def plan(
        self,
        params: HistParams,
        epsilon: FloatArray,
        metadata: Mapping[str, NDArray[Any]],
        seed: int,
    ) -> Plan:
        eps = plan_epsilons(epsilon)
        n, cells = eps.size, self._cells(params)
        two = np.full(n, 2, dtype=np.int64)  # Z̃ and W̃, ε_i/2 each
        rp = RoundPlan(
            0, "histogram", np.arange(n, dtype=np.int64), eps, "vector", (2 * cells,), messages=two
        )
        public: JSON = {"cells": cells, "bins": params.bins, "dimension": params.dimension}
        return Plan(n, (rp,), public)

    def broadcast(
        self, params: HistParams, plan: Plan, round_index: int, outputs: Sequence[JSON]
    ) -> JSON:
        if round_index != 0:
            raise ValueError(f"{self.name} has a single round 0, not {round_index}")
        return {**plan.public, "label_low": params.label_low, "label_high": params.label_high}

    def privatize(
        self,
        params: HistParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        x, _, y = semi_feature_block(data, params.dimension)
        eps = check_epsilons(epsilon)
        cells = self._cells(params)
        onehot = np.zeros((y.size, cells))
        onehot[np.arange(y.size), grid_cells(x, params.bins)] = 1.0
        big_m = params.half_range
        centred = np.clip(y - params.centre, -big_m, big_m)
        noise = laplace(np.zeros((y.size, 2 * cells)), np.ones(y.size), rng)
        z = centred[:, None] * onehot + (
            laplace_scale(4.0 * big_m, eps)[:, None] * noise[:, :cells]
        )
        w = onehot + laplace_scale(4.0, eps)[:, None] * noise[:, cells:]
        return np.asarray(np.concatenate([z, w], axis=1), dtype=np.float64)

    def report_bounds(
        self, params: HistParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        """Z̃ entries lie in [−M, M] plus Lap(4M/ε_i), W̃ entries in [0, 1] plus Lap(4/ε_i);
        each ± its Laplace reach (``fedldp.protocol.mechanisms.plausibility``)."""
        eps = check_epsilons(epsilon)
        cells, big_m = self._cells(params), params.half_range
        z_lo, z_hi = around(-big_m, big_m, laplace_reach(laplace_scale(4.0 * big_m, eps)), 1)
        w_lo, w_hi = around(0.0, 1.0, laplace_reach(laplace_scale(4.0, eps)), 1)
        n = eps.shape[0]
        lo = np.concatenate(
            [np.broadcast_to(z_lo, (n, cells)), np.broadcast_to(w_lo, (n, cells))], 1
        )
        hi = np.concatenate(
            [np.broadcast_to(z_hi, (n, cells)), np.broadcast_to(w_hi, (n, cells))], 1
        )
        return lo, hi

    def aggregate(
        self,
        params: HistParams,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        if round_index != 0:
            raise ValueError(f"{self.name} has a single round 0, not {round_index}")
        cells = self._cells(params)
        z_sum, w_sum, count = np.zeros(cells), np.zeros(cells), 0
        for chunk in chunks:
            p = np.asarray(chunk.payloads, dtype=np.float64).reshape(chunk.slots.size, 2 * cells)
            z_sum += p[:, :cells].sum(axis=0)
            w_sum += p[:, cells:].sum(axis=0)
            count += int(chunk.slots.size)
        if count == 0:
            raise ValueError("no reports to aggregate")
        mass = w_sum / count
        kept = (mass >= params.truncation) & (w_sum > 0)
        ratio = np.divide(z_sum, w_sum, out=np.zeros(cells), where=kept)
        big_m, m = params.half_range, params.centre
        fill = 0.0 if params.truncate_to == "centre" else -m  # on the centred scale
        values = np.where(kept, np.clip(ratio, -big_m, big_m), fill) + m
        return {
            "values": values.tolist(),
            "mass": mass.tolist(),
            "truncated_cells": int(np.count_nonzero(~kept)),
            "n_reports": count,
        }

    def finalize(self, params: HistParams, plan: Plan, outputs: Sequence[JSON]) -> Result:
        if len(outputs) != 1:
            raise ValueError(f"{self.name} finalizes after its single round")
        out = outputs[0]
        diagnostics: JSON = {
            "bins": params.bins,
            "cells": plan.public["cells"],
            "mass": out["mass"],
            "truncated_cells": out["truncated_cells"],
            "n_reports": out["n_reports"],
        }
        return Result(list(out["values"]), None, diagnostics, plan.warnings)

    def feature_dimension(self, params: HistParams) -> int:
        return params.dimension

    def predict(
        self, params: HistParams, plan: Plan, outputs: Sequence[JSON], features: ArrayLike
    ) -> FloatArray:
        x = features_of(params, features)
        values = np.asarray(outputs[0]["values"], dtype=np.float64)
        return np.asarray(values[grid_cells(x, params.bins)], dtype=np.float64)


PROTOCOLS: tuple[Protocol[Any], ...] = (HistLdp(),)

"""Semi-feature LDP regression: HistOfTree and AdHistOfTree of Ma, Jia and Yang, "Locally Private
Estimation with Public Features" (spec public-features-ldp.md §2.2–§2.9), as catalogue protocols:
their parameters and how each chooses its structure (s, p, t): fixed, with the ε-aware default
bins, or by the paper's rule (15). The two rounds they share are in
``fedldp.protocol.semi_feature.histoftree_base``; the paper's baselines in
``fedldp.protocol.semi_feature.hist_ldp`` and ``fedldp.protocol.semi_feature.tree_baselines``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from pydantic import Field, model_validator

from fedldp.protocol.api import JSON, BoolArray, FloatArray, Protocol
from fedldp.protocol.core.base.bounds import Scale
from fedldp.protocol.core.broadcast import described
from fedldp.protocol.semi_feature.common import (
    MAX_DIMENSION,
    MAX_RR_CELLS,
)
from fedldp.protocol.semi_feature.histoftree_base import HistOfTreeBase, HotParams
from fedldp.protocol.semi_feature.partition import (
    MAX_CELLS,
    MAX_PRIVATE_CELLS,
    always_private,
    tuned_structure,
)
from fedldp.protocol.semi_feature.trees import MAX_DEPTH

__all__ = [
    "PROTOCOLS",
    "SMALL_EPSILON",
    "HistOfTree",
    "HistOfTreeParams",
    "HistOfTreeTuned",
    "TunedParams",
    "default_bins",
]


SMALL_EPSILON = 3.0
"""Below this median ε the default histogram has one bin (t = 1), from it two (t = 2)."""


def default_bins(epsilon: FloatArray) -> int:
    """The ε-aware default t: 1 (ignore the private features) when the median ε is below 3,
    else 2. At small ε the index budget (1 − ρ)ε cannot tell t^s cells apart and the noise of
    the cell reports costs more than the private features give; the spec's tuned runs pick
    t = 1 there (public-features-ldp.md §6.2 E1, §6.4). Measured on sin-sum, s* = 1, n = 10⁴,
    ρ = 0.7, p = 2 (experiments/semi-feature-e4-bins.yaml, 4 seeds): excess risk t = 1 vs 2 is
    0.27 vs 5.2 at ε = 1, 0.14 vs 0.37 at ε = 2, 0.10 vs 0.078 at ε = 4, 0.095 vs 0.052 at ε = 8.
    """
    return 1 if float(np.median(epsilon)) < SMALL_EPSILON else 2


class HistOfTreeParams(HotParams):
    bins: int | None = Field(
        None,
        ge=1,
        le=64,
        description="t: bins per histogram dimension (default ε-aware: 1 when the median ε is "
        "below 3, else 2; spec §6.2, §6.4)",
    )
    depth: int = Field(2, ge=0, le=MAX_DEPTH, description="p: depth of the public tree")
    histogram_dims: int | None = Field(
        None,
        ge=0,
        le=MAX_DIMENSION,
        description="s: histogram dimensions (default: the features every participant keeps "
        "private, s_all; = s* in the aligned case)",
    )

    @model_validator(mode="after")
    def _partition_fits(self) -> HistOfTreeParams:
        """The plan's checks that hold whatever the population: s <= d and, with s and t both
        given, the partition's cell caps (``HistOfTreeBase.plan``)."""
        s, t = self.histogram_dims, self.bins
        if s is None:
            return self
        if s > self.dimension:
            raise ValueError(f"histogram_dims = {s} exceeds the dimension {self.dimension}")
        if t is None:
            return self
        depth = 0 if s == self.dimension else self.depth  # the plan's single leaf
        cells = t**s * 2**depth
        cap = MAX_RR_CELLS if self.index_mechanism == "rr" else MAX_CELLS
        if t**s > MAX_PRIVATE_CELLS or cells > cap:
            raise ValueError(
                f"bins^histogram_dims·2^depth = {t}^{s}·2^{depth} cells (t^s·2^p) is more than "
                "this protocol supports "
                f"({MAX_PRIVATE_CELLS} private cells, {cap} in all with {self.index_mechanism})"
            )
        return self


class TunedParams(HotParams):
    bias_constant: Scale = Field(0.01, description="c of rule (15) (§2.9)")
    bins_offset: int = Field(0, ge=-1, le=1, description="t = t* + offset (at least 1)")


class HistOfTree(HistOfTreeBase[HistOfTreeParams]):
    """HistOfTree (§2.2–§2.8) with fixed (s, t, p): a t-bin histogram on the s most protected
    features times a depth-p tree on the others. Round 0 charges ρε_i, round 1 (1 − ρ)ε_i.

    ``check_members`` (round 1) calls ``check_cells(params, plan, broadcast, slots, payloads)``:
    a report naming a cell outside the sender's potential set V_i is rejected (§1.4).
    """

    name: ClassVar[str] = "histoftree"
    broadcast_fields: ClassVar[Mapping[str, str]] = described(
        "dimension", "label_low", "label_high", "partition", "mechanism", "labels", "label_mean"
    )
    summary: ClassVar[str] = (
        "Semi-feature LDP regression: a histogram on private features times a tree on public "
        "ones, Laplace labels then GRR cell reports restricted to each user's potential cells."
    )
    params_model = HistOfTreeParams

    def structure(
        self, params: HistOfTreeParams, epsilon: FloatArray, mask: BoolArray
    ) -> tuple[int, int, int, JSON, list[str]]:
        s_all = always_private(mask)
        s = s_all if params.histogram_dims is None else params.histogram_dims
        if s > params.dimension:
            raise ValueError(f"histogram_dims = {s} exceeds the dimension {params.dimension}")
        warnings = []
        if s < s_all:
            warnings.append(
                f"{s_all - s} feature(s) private for every participant are tree dimensions: they "
                "cannot guide the tree and multiply every potential set (spec §2.5)"
            )
        bins = default_bins(epsilon) if params.bins is None else params.bins
        return s, params.depth, bins, {}, warnings


class HistOfTreeTuned(HistOfTreeBase[TunedParams]):
    """AdHistOfTree (§2.9): HistOfTree with (s, p) minimising rule (15) over s ∈ {s_all..d−1},
    p ∈ {0..⌈log₂ n⌉} at plan time, t = t* + offset. Uses only n, the ε_i's, d and the masks:
    no data, no validation split, no privacy cost."""

    name: ClassVar[str] = "histoftree-tuned"
    broadcast_fields: ClassVar[Mapping[str, str]] = described(
        "dimension", "label_low", "label_high", "partition", "mechanism", "labels", "label_mean"
    )
    summary: ClassVar[str] = (
        "AdHistOfTree: HistOfTree with the histogram dimensions, depth and bins chosen from the "
        "public masks and budgets by the paper's bound-minimising rule (15)."
    )
    source: ClassVar[str] = HistOfTreeBase.source + "; rule (15), §4.3"
    heterogeneity: ClassVar[str] = (
        HistOfTreeBase.heterogeneity
        + " Rule (15) replaces δ_s(p)/(nε²) by (1/n²)Σ_i 2^{T_i p/(d−s)}/ε_i²."
    )
    params_model = TunedParams

    def structure(
        self, params: TunedParams, epsilon: FloatArray, mask: BoolArray
    ) -> tuple[int, int, int, JSON, list[str]]:
        cap = MAX_RR_CELLS if params.index_mechanism == "rr" else MAX_CELLS
        s, p, t_star, value = tuned_structure(mask, epsilon, params.bias_constant, max_cells=cap)
        t = max(1, t_star + params.bins_offset)
        extra: JSON = {
            "rule15": {
                "s": s,
                "p": p,
                "t_star": t_star,
                "objective": value,
                "bias_constant": params.bias_constant,
            }
        }
        return s, p, t, extra, []


PROTOCOLS: tuple[Protocol[Any], ...] = (HistOfTree(), HistOfTreeTuned())

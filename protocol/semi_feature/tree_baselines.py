"""The tree baselines of semi-feature LDP (spec public-features-ldp.md §3, §3.1), compared with
HistOfTree (``fedldp.protocol.semi_feature.histoftree``) and ``hist-ldp``
(``fedldp.protocol.semi_feature.hist_ldp``) side by side.

``pardt`` (a tree on the public features with Laplace labels), ``labeldt`` (label LDP only: a tree
on all features, sent in clear), ``krr-tree`` (k-ary GRR on each private coordinate, a tree on the
result). Their trees are ``trees.regression_tree``, the numpy stand-in for scikit-learn's
DecisionTreeRegressor. The non-private DT reference of §3 is not a catalogue protocol (it is not
private): ``fedldp.client.population.features`` computes it. Data layout and label reports:
``fedldp.protocol.semi_feature.common``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import Field

from fedldp.protocol.api import (
    JSON,
    BoolArray,
    DataKind,
    FloatArray,
    IntArray,
    PayloadKind,
    Plan,
    Predictor,
    Protocol,
    RandomSource,
    ReportChunk,
    Result,
    RoundPlan,
    RoundTask,
    UserData,
    check_epsilons,
    valid_payloads,
)
from fedldp.protocol.core.broadcast import described
from fedldp.protocol.core.wire.common import MAX_ID
from fedldp.protocol.semi_feature.common import (
    POPULATION_PROBE,
    SEMI_POPULATION_RULE,
    SemiParams,
    enrollment,
    features_of,
    label_bounds,
    label_report,
    plan_epsilons,
    probe_metadata,
    semi_feature_block,
)
from fedldp.protocol.semi_feature.partition import grr_report, histogram_bins
from fedldp.protocol.semi_feature.trees import MAX_DEPTH, Tree, regression_tree

__all__ = [
    "PROTOCOLS",
    "KrrParams",
    "KrrTree",
    "LabelDt",
    "ParDt",
    "ParDtParams",
    "TreeParams",
    "krr_budgets",
]


# --------------------------------------------------------------------------- tree baselines


class TreeParams(SemiParams):
    max_depth: int = Field(4, ge=0, le=MAX_DEPTH, description="DT max_depth (grid 1,2,4,6,8)")
    min_samples_leaf: int = Field(
        10,
        ge=1,
        le=MAX_ID,  # no leaf holds more participants than a study enrolls
        description="DT min_samples_leaf (grid 1,10,100)",
    )
    clip_leaves: bool = Field(
        True,
        description="clip leaf values to [y_lo, y_hi] (post-processing, not in the paper: "
        "scikit-learn's leaves are unclipped; False reproduces them)",
    )


class ParDtParams(TreeParams):
    missing: Literal["nan", "common"] = Field(
        "nan",
        description="personalized masks: private entries are missing values (default), or only "
        "the features public for every participant are used (spec #23)",
    )


class KrrParams(TreeParams):
    krr_bins: int = Field(3, ge=2, le=64, description="k: bins of each private coordinate")


T = TypeVar("T", bound=TreeParams)


class _TreeBaseline(Protocol[T], Predictor[T]):
    """One round; the server fits ``regression_tree`` on what it learned (features with NaN for
    unknown entries, noisy labels on the raw scale) and, by default, clips leaf values to
    [y_lo, y_hi]."""

    population_rule: ClassVar[str] = SEMI_POPULATION_RULE
    population_probe: ClassVar[Mapping[str, Any]] = POPULATION_PROBE

    def population_metadata(self, params: T, n: int) -> Mapping[str, NDArray[Any]]:
        return probe_metadata(n, params.dimension)

    data_kind: ClassVar[DataKind] = "labeled"
    needs_metadata: ClassVar[bool] = True
    source: ClassVar[str] = (
        "Ma, Jia, Yang (baselines of §5, App. C.1); spec public-features-ldp.md §3, §3.1"
    )

    @abstractmethod
    def payload_shape(self, params: T) -> tuple[int, ...]: ...

    @abstractmethod
    def report(
        self,
        params: T,
        x: FloatArray,
        mask: BoolArray,
        y: FloatArray,
        eps: FloatArray,
        rng: RandomSource,
    ) -> FloatArray:
        """The users' payloads."""

    @abstractmethod
    def learned(
        self, params: T, plan: Plan, slots: IntArray, payloads: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """What the server knows of each reporter: features (NaN = unknown) and centred label."""

    def plan_warnings(self, params: T) -> list[str]:
        return []

    def plan(
        self, params: T, epsilon: FloatArray, metadata: Mapping[str, NDArray[Any]], seed: int
    ) -> Plan:
        eps = plan_epsilons(epsilon)
        n = eps.size
        warnings = self.plan_warnings(params)
        kept: dict[str, NDArray[Any]] = {}
        if self.needs_metadata:
            mask, values, more = enrollment(metadata, n, params.dimension)
            kept, warnings = {"mask": mask, "public": values}, warnings + more
        shape = self.payload_shape(params)
        kind: PayloadKind = "scalar" if shape == () else "vector"
        messages = self.messages(params, kept, n)
        rp = RoundPlan(
            0, "report", np.arange(n, dtype=np.int64), eps, kind, shape, messages=messages
        )
        public: JSON = {"dimension": params.dimension}
        return Plan(n, (rp,), public, tuple(warnings), metadata=kept)

    def messages(self, params: T, kept: Mapping[str, NDArray[Any]], n: int) -> IntArray | None:
        return None

    def broadcast(self, params: T, plan: Plan, round_index: int, outputs: Sequence[JSON]) -> JSON:
        if round_index != 0:
            raise ValueError(f"{self.name} has a single round 0, not {round_index}")
        return {
            "dimension": params.dimension,
            "label_low": params.label_low,
            "label_high": params.label_high,
        }

    def privatize(
        self,
        params: T,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        x, mask, y = semi_feature_block(data, params.dimension)
        return self.report(params, x, mask, y, check_epsilons(epsilon), rng)

    def aggregate(
        self,
        params: T,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        if round_index != 0:
            raise ValueError(f"{self.name} has a single round 0, not {round_index}")
        xs, ys = [], []
        for chunk in chunks:
            x, y = self.learned(params, plan, chunk.slots, np.asarray(chunk.payloads, np.float64))
            xs.append(x)
            ys.append(y)
        if not ys or sum(y.size for y in ys) == 0:
            raise ValueError("no reports to aggregate")
        x, y = np.concatenate(xs), np.concatenate(ys) + params.centre
        tree, leaf_values = regression_tree(x, y, params.max_depth, params.min_samples_leaf)
        values = leaf_values
        if params.clip_leaves:
            values = np.clip(leaf_values, params.label_low, params.label_high)
        return {"tree": tree.as_json(), "leaf_values": values.tolist(), "n_reports": int(y.size)}

    def finalize(self, params: T, plan: Plan, outputs: Sequence[JSON]) -> Result:
        if len(outputs) != 1:
            raise ValueError(f"{self.name} finalizes after its single round")
        out = outputs[0]
        diagnostics: JSON = {
            "tree": out["tree"],
            "leaves": len(out["leaf_values"]),
            "n_reports": out["n_reports"],
        }
        return Result(list(out["leaf_values"]), None, diagnostics, plan.warnings)

    def feature_dimension(self, params: T) -> int:
        return params.dimension

    def predict(
        self, params: T, plan: Plan, outputs: Sequence[JSON], features: ArrayLike
    ) -> FloatArray:
        x = features_of(params, features)
        tree = Tree.from_json(outputs[0]["tree"])
        values = np.asarray(outputs[0]["leaf_values"], dtype=np.float64)
        return np.asarray(values[tree.apply(x)], dtype=np.float64)


class ParDt(_TreeBaseline[ParDtParams]):
    """ParDT (§3): a regression tree on the public features (from enrollment metadata; private
    entries are missing values) and labels with Laplace noise (y_hi − y_lo)/ε_i (all of ε_i)."""

    name: ClassVar[str] = "pardt"
    broadcast_fields: ClassVar[Mapping[str, str]] = described(
        "dimension", "label_low", "label_high"
    )
    summary: ClassVar[str] = (
        "Semi-feature LDP baseline: a decision tree on the public features and Laplace labels."
    )
    heterogeneity: ClassVar[str] = (
        "Non-paper extension: each label gets Laplace scale (y_hi − y_lo)/ε_i; the tree is fitted "
        "on the noisy labels unweighted."
    )
    params_model = ParDtParams

    def payload_shape(self, params: ParDtParams) -> tuple[int, ...]:
        return ()

    def report(
        self,
        params: ParDtParams,
        x: FloatArray,
        mask: BoolArray,
        y: FloatArray,
        eps: FloatArray,
        rng: RandomSource,
    ) -> FloatArray:
        return label_report(y, params, eps, rng)

    def report_bounds(
        self, params: ParDtParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        return label_bounds(params, epsilon)

    def learned(
        self, params: ParDtParams, plan: Plan, slots: IntArray, payloads: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        mask = plan.metadata["mask"]
        hidden = mask[slots]
        if params.missing == "common":
            hidden = hidden | np.any(mask, axis=0)[None, :]
        x = np.where(hidden, np.nan, plan.metadata["public"][slots])
        return np.asarray(x, dtype=np.float64), payloads.reshape(-1)


class LabelDt(_TreeBaseline[TreeParams]):
    """LabelDT (§3): label LDP only, a benchmark. Every feature is sent in clear, whatever the
    participants' masks (payload: the d features, then the Laplace label (y_hi − y_lo)/ε_i)."""

    name: ClassVar[str] = "labeldt"
    broadcast_fields: ClassVar[Mapping[str, str]] = described(
        "dimension", "label_low", "label_high"
    )
    summary: ClassVar[str] = (
        "Label-LDP benchmark: features sent in clear, Laplace labels, a decision tree."
    )
    heterogeneity: ClassVar[str] = ParDt.heterogeneity
    params_model = TreeParams
    needs_metadata: ClassVar[bool] = False

    def plan_warnings(self, params: TreeParams) -> list[str]:
        return [
            "labeldt protects only the label: every feature is sent in clear, whatever the "
            "participants' privacy masks (a benchmark, spec §3)"
        ]

    def payload_shape(self, params: TreeParams) -> tuple[int, ...]:
        return (params.dimension + 1,)

    def report(
        self,
        params: TreeParams,
        x: FloatArray,
        mask: BoolArray,
        y: FloatArray,
        eps: FloatArray,
        rng: RandomSource,
    ) -> FloatArray:
        return np.concatenate([x, label_report(y, params, eps, rng)[:, None]], axis=1)

    def report_bounds(
        self, params: TreeParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        """Features in [0, 1], then the Laplace label (``label_bounds``)."""
        return _feature_label_bounds(params, epsilon, epsilon)

    def check(
        self, params: TreeParams, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        p = np.asarray(payloads, dtype=np.float64)
        inside = np.all((p[:, :-1] >= 0.0) & (p[:, :-1] <= 1.0), axis=1)
        return np.asarray(valid_payloads(task, payloads) & inside, dtype=np.bool_)

    def learned(
        self, params: TreeParams, plan: Plan, slots: IntArray, payloads: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        return payloads[:, :-1], payloads[:, -1]


def _feature_label_bounds(
    params: TreeParams, epsilon: FloatArray, label_epsilon: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Bounds of a (d features in [0, 1], Laplace label at ``label_epsilon``) payload."""
    n, d = np.asarray(epsilon).shape[0], params.dimension
    y_lo, y_hi = label_bounds(params, label_epsilon, 1)
    lo = np.concatenate([np.zeros((n, d)), np.broadcast_to(y_lo, (n, 1))], axis=1)
    hi = np.concatenate([np.ones((n, d)), np.broadcast_to(y_hi, (n, 1))], axis=1)
    return lo, hi


def krr_budgets(mask: ArrayLike, epsilon: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """KRR's split of ε_i (§3 [PROPOSAL]): the label gets ε_i/2 and each of the s_i* private
    coordinates ε_i/(2 s_i*); with no private coordinate the label gets all of ε_i. Returns the
    label budget (n,) and the per-coordinate budget (n,) (0 where s_i* = 0)."""
    w = np.asarray(mask, dtype=np.bool_)
    eps = check_epsilons(epsilon)
    private = w.sum(axis=1)
    label = np.where(private > 0, eps / 2.0, eps)
    coord = np.where(private > 0, eps / (2.0 * np.maximum(private, 1)), 0.0)
    return np.asarray(label, dtype=np.float64), np.asarray(coord, dtype=np.float64)


class KrrTree(_TreeBaseline[KrrParams]):
    """KRR (§3): each private coordinate is binned into k bins and reported by k-ary GRR at
    ε_i/(2 s_i*) as its bin centre (b + ½)/k; the label by Laplace at ε_i/2 (``krr_budgets``);
    then a regression tree on (public coordinates from the metadata, reported centres). Payload:
    d coordinates (0.0 where public), then the label."""

    name: ClassVar[str] = "krr-tree"
    broadcast_fields: ClassVar[Mapping[str, str]] = described(
        "dimension", "label_low", "label_high"
    )
    summary: ClassVar[str] = (
        "Semi-feature LDP baseline: k-ary randomized response on private coordinates, Laplace "
        "labels, a decision tree."
    )
    heterogeneity: ClassVar[str] = (
        "Non-paper extension: the split of ``krr_budgets`` uses each participant's own ε_i; "
        "the tree is fitted unweighted."
    )
    params_model = KrrParams

    def payload_shape(self, params: KrrParams) -> tuple[int, ...]:
        return (params.dimension + 1,)

    def messages(
        self, params: KrrParams, kept: Mapping[str, NDArray[Any]], n: int
    ) -> IntArray | None:
        # the label at ε_i/2 and the private coordinates together at ε_i/2
        return np.where(np.any(kept["mask"], axis=1), 2, 1).astype(np.int64)

    def report(
        self,
        params: KrrParams,
        x: FloatArray,
        mask: BoolArray,
        y: FloatArray,
        eps: FloatArray,
        rng: RandomSource,
    ) -> FloatArray:
        k = params.krr_bins
        label_eps, coord_eps = krr_budgets(mask, eps)
        bins = histogram_bins(x, k)
        sent = grr_report(bins, k, np.where(coord_eps > 0, coord_eps, 1.0), rng)
        coords = np.where(mask, (sent + 0.5) / k, 0.0)
        return np.concatenate([coords, label_report(y, params, label_eps, rng)[:, None]], axis=1)

    def report_bounds(
        self, params: KrrParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        """Coordinates in [0, 1], then the label at the smaller of its two budgets, ε_i/2 (the
        sender's mask is not needed: the looser bound never refuses an honest label)."""
        return _feature_label_bounds(params, epsilon, check_epsilons(epsilon) / 2.0)

    def check_members(
        self, params: KrrParams, plan: Plan, task: RoundTask, slots: IntArray, payloads: FloatArray
    ) -> BoolArray:
        """A private coordinate must be a bin centre, a public one the 0.0 placeholder."""
        k = params.krr_bins
        mask = plan.metadata["mask"][np.asarray(slots, dtype=np.int64)]
        coords = np.asarray(payloads, dtype=np.float64)[:, :-1]
        b = coords * k - 0.5
        centre = np.isclose(b, np.round(b), rtol=0.0, atol=1e-9) & (b > -0.5) & (b < k - 0.5)
        ok = np.where(mask, centre, coords == 0.0)
        return np.asarray(np.all(ok, axis=1), dtype=np.bool_)

    def learned(
        self, params: KrrParams, plan: Plan, slots: IntArray, payloads: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        mask = plan.metadata["mask"][slots]
        x = np.where(mask, payloads[:, :-1], plan.metadata["public"][slots])
        return np.asarray(x, dtype=np.float64), payloads[:, -1]


PROTOCOLS: tuple[Protocol[Any], ...] = (ParDt(), LabelDt(), KrrTree())

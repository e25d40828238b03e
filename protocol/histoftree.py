"""Semi-feature LDP regression: HistOfTree, AdHistOfTree and the baselines of Ma, Jia and Yang,
"Locally Private Estimation with Public Features" (spec public-features-ldp.md).

* ``histoftree`` (§2.2–§2.8, eq. (6)/(9), App. A.1 GRR): round 0 ("label") every participant
  sends its Laplace-privatized centred label (budget ρε_i); the server sorts the features by how
  often they are private (§2.5), puts the first s on a t-bin histogram and grows a depth-p
  max-edge (Algorithm 1) or CART tree on the others from the public coordinates and the noisy
  labels (§2.4). Round 1 ("cell"): after the broadcast of that partition every participant sends
  its cell through GRR (or unary RR) restricted to its potential set V_i (§2.6, §2.7; budget
  (1−ρ)ε_i). The server debiases and forms N_j/D_j per cell (§2.8: fallback ȳ when D_j < τ, clip
  to [−M, M]).
* ``histoftree-tuned``: AdHistOfTree, the same with (s, p, t) from rule (15) (§2.9) at plan time.
* Baselines (§3, §3.1): ``hist-ldp`` (Hist: every feature and the label private, Laplace on two
  per-cell vectors), ``pardt`` (a tree on the public features with Laplace labels),
  ``labeldt`` (label LDP only: a tree on all features, sent in clear), ``krr-tree`` (k-ary GRR on
  each private coordinate, a tree on the result). Their trees are ``partition.regression_tree``,
  the numpy stand-in for scikit-learn's DecisionTreeRegressor. The non-private DT reference of
  §3 is not a catalogue protocol (it is not private): ``client.features`` computes it.

Data layout ("semi-feature" labeled data): one sample per user (§1.1); ``UserData.values`` is
``(n, 2d)``: the d features in [0, 1] then the user's privacy mask W_i (1 = private), see
``split_features``; ``labels`` (n,). Public information travels as enrollment metadata:
``mask`` (d values 0/1) and ``public`` (the public feature values, 0.0 placeholders where the mask
is 1: private values are never sent), kept by slot in ``Plan.metadata``.

Deviation from §1.4: the spec sends ``mask`` and ``x_pub`` with the round-1 label report; here they
are enrollment metadata. Same information, same privacy (they are public by assumption, §1.2),
known earlier, so plans can depend on W (rule (15)) and ``check_members`` can recompute V_i.

Pairing of the two reports (§1.4): the estimator multiplies each user's round-1 cell report by its
round-0 label Ỹ_i, and ``aggregate`` sees only the round's broadcast, so the round-1 broadcast
carries every Ỹ_i by slot (``labels``, None for a participant who did not report). They are
public outputs of round 0 already; ``client_broadcast`` keeps them out of the participants' tasks,
so only the server and the public round view hold the n numbers.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import ConfigDict, Field, model_validator

from protocol.base import (
    JSON,
    BoolArray,
    DataKind,
    FloatArray,
    IntArray,
    Params,
    PayloadKind,
    Plan,
    Predictor,
    Protocol,
    ReportChunk,
    Result,
    RoundPlan,
    RoundTask,
    UserData,
    check_epsilons,
    valid_payloads,
)
from protocol.partition import (
    MAX_CELLS,
    MAX_DEPTH,
    MAX_PRIVATE_CELLS,
    Partition,
    Tree,
    always_private,
    cart_tree,
    feature_order,
    grr_debias,
    grr_offset,
    grr_report,
    histogram_bins,
    max_edge_tree,
    nth_member,
    regression_tree,
    tuned_structure,
    unary_rr_report,
)
from protocol.randomizers import laplace, laplace_scale, rr_debias, rr_keep_probability
from protocol.streams import RandomSource

__all__ = [
    "MAX_DIMENSION",
    "MAX_HIST_CELLS",
    "MAX_RR_CELLS",
    "PROTOCOLS",
    "HistLdp",
    "HistOfTree",
    "HistOfTreeParams",
    "HistOfTreeTuned",
    "HistParams",
    "HotParams",
    "KrrParams",
    "KrrTree",
    "LabelDt",
    "ParDt",
    "ParDtParams",
    "SemiParams",
    "TreeParams",
    "TunedParams",
    "enrollment",
    "grid_cells",
    "krr_budgets",
    "label_report",
    "semi_feature_block",
    "split_features",
]

MAX_DIMENSION = 64
MAX_HIST_CELLS = 1 << 12
"""Largest Hist grid t^d: each user sends 2·t^d numbers."""
MAX_RR_CELLS = 1 << 12
"""Largest partition for unary RR: each user sends one bit per cell."""


# --------------------------------------------------------------------------- data and metadata


def split_features(values: ArrayLike, d: int) -> tuple[FloatArray, BoolArray]:
    """The semi-feature layout: rows ``(n, 2d)`` = d features, then the mask (1 = private).
    Features are clipped into [0, 1] (§1.1: min–max scaled); ValueError on anything else."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.shape[1] != 2 * d:
        raise ValueError(
            f"semi-feature data has rows of 2d = {2 * d} values (features, then the privacy "
            f"mask), got shape {v.shape}"
        )
    x, w = v[:, :d], v[:, d:]
    if not np.all(np.isfinite(x)):
        raise ValueError("features must be finite")
    if not np.all((w == 0.0) | (w == 1.0)):
        raise ValueError("the privacy mask must be 0 (public) or 1 (private)")
    return np.clip(x, 0.0, 1.0), w == 1.0


def semi_feature_block(data: UserData, d: int) -> tuple[FloatArray, BoolArray, FloatArray]:
    """Features (n, d), mask (n, d) and labels (n,) of a block of one-sample users."""
    if data.labels is None:
        raise ValueError("semi-feature protocols take labeled samples")
    if np.any(data.counts != 1):
        raise ValueError("semi-feature protocols take one sample per user (spec §1.1)")
    x, w = split_features(data.values, d)
    y = np.asarray(data.labels, dtype=np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError("labels must be finite")
    return x, w, y


def enrollment(
    metadata: Mapping[str, NDArray[Any]], n: int, d: int
) -> tuple[BoolArray, FloatArray, list[str]]:
    """The participants' masks (n, d) and public features (n, d) from enrollment metadata.

    ValueError when missing or malformed; public values must lie in [0, 1]. A value sent where
    the mask is 1 is dropped (set to 0.0) with a warning: it was never needed.
    """
    if "mask" not in metadata or "public" not in metadata:
        raise ValueError(
            "semi-feature protocols need every participant's enrollment metadata 'mask' and "
            f"'public' ({d} values each)"
        )
    mask = np.asarray(metadata["mask"], dtype=np.float64)
    public = np.asarray(metadata["public"], dtype=np.float64)
    if mask.shape != (n, d) or public.shape != (n, d):
        raise ValueError(
            f"metadata 'mask' and 'public' must hold {d} values per participant, got shapes "
            f"{mask.shape} and {public.shape}"
        )
    if not np.all((mask == 0.0) | (mask == 1.0)):
        raise ValueError("metadata 'mask' values must be 0 (public) or 1 (private)")
    w = mask == 1.0
    shown = ~w & ~((public >= 0.0) & (public <= 1.0))
    if np.any(shown):
        raise ValueError("public feature values must be finite and min–max scaled into [0, 1]")
    warnings = []
    leaked = w & (public != 0.0)
    if np.any(leaked):
        warnings.append(
            f"{int(np.count_nonzero(leaked.any(axis=1)))} participant(s) enrolled a value for a "
            "feature they marked private; it is ignored (the placeholder is 0.0)"
        )
    return w, np.where(w, 0.0, np.nan_to_num(public)), warnings


def _plan_epsilons(epsilon: FloatArray) -> FloatArray:
    eps = check_epsilons(epsilon)
    if eps.ndim != 1 or eps.size < 2:
        raise ValueError(f"this protocol needs at least 2 participants, got {eps.size}")
    return eps


def _features(params: SemiParams, features: ArrayLike) -> FloatArray:
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != params.dimension or not np.all(np.isfinite(x)):
        raise ValueError(f"features must be finite rows of dimension {params.dimension}")
    return np.clip(x, 0.0, 1.0)


class SemiParams(Params):
    """Shared by every semi-feature protocol: d and the public label bounds (§2.2)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    dimension: int = Field(ge=1, le=MAX_DIMENSION, description="d: features lie in [0, 1]^d")
    label_low: float = Field(description="y_lo: public lower label bound (labels are clipped)")
    label_high: float = Field(description="y_hi: public upper label bound")

    @model_validator(mode="after")
    def _bounds(self) -> SemiParams:
        if not self.label_high > self.label_low:
            raise ValueError("label_high must exceed label_low")
        return self

    @property
    def centre(self) -> float:
        """m = (y_lo + y_hi)/2."""
        return (self.label_low + self.label_high) / 2.0

    @property
    def half_range(self) -> float:
        """M = (y_hi − y_lo)/2."""
        return (self.label_high - self.label_low) / 2.0


def label_report(
    y: FloatArray, params: SemiParams, epsilon: FloatArray, rng: RandomSource
) -> FloatArray:
    """§2.2 [PROPOSAL]: clip(y − m, −M, M) + Lap((y_hi − y_lo)/ε_i), an ε_i-LDP label on the
    centred scale (sensitivity 2M). One Laplace draw per user."""
    centred = np.clip(y - params.centre, -params.half_range, params.half_range)
    return laplace(centred, laplace_scale(2.0 * params.half_range, epsilon), rng)


# --------------------------------------------------------------------------- HistOfTree


class HotParams(SemiParams):
    rho: float = Field(0.7, gt=0, lt=1, description="ρ: label share of ε (§1.4, App. C.1)")
    tree_rule: Literal["max-edge", "cart"] = Field(
        "max-edge", description="public partition: Algorithm 1 or the CART variant (§2.4)"
    )
    split_criterion: Literal["reduction", "variance"] = Field(
        "reduction",
        description="max-edge split choice: size-normalised SSE reduction, or the literal sum "
        "of sample variances (eq. (7))",
    )
    index_mechanism: Literal["grr", "rr"] = Field(
        "grr", description="cell randomizer on V_i: GRR (experiments) or unary RR (theory)"
    )
    density_floor: float = Field(
        1.0, ge=0, description="τ: a cell with D_j < τ predicts the mean noisy label (§2.8)"
    )


class HistOfTreeParams(HotParams):
    bins: int = Field(2, ge=1, le=64, description="t: bins per histogram dimension")
    depth: int = Field(2, ge=0, le=MAX_DEPTH, description="p: depth of the public tree")
    histogram_dims: int | None = Field(
        None,
        ge=0,
        le=MAX_DIMENSION,
        description="s: histogram dimensions (default: the features every participant keeps "
        "private, s_all; = s* in the aligned case)",
    )


class TunedParams(HotParams):
    bias_constant: float = Field(0.01, gt=0, description="c of rule (15) (§2.9)")
    bins_offset: int = Field(0, ge=-1, le=1, description="t = t* + offset (at least 1)")


H = TypeVar("H", bound=HotParams)


class _HistOfTree(Protocol[H], Predictor[H]):
    """Rounds, randomizers, checks and estimator shared by HistOfTree and AdHistOfTree."""

    data_kind: ClassVar[DataKind] = "labeled"
    source: ClassVar[str] = (
        "Ma, Jia, Yang, Locally Private Estimation with Public Features: eq. (4)-(9), "
        "Algorithm 1, App. A.1 (GRR) and C.1 (ρ split); spec public-features-ldp.md §1.4, §2"
    )
    heterogeneity: ClassVar[str] = (
        "Non-paper extension (the paper has one ε): participant i uses its own ε_i, Laplace "
        "scale (y_hi − y_lo)/(ρε_i) on the label (round 0, charged ρε_i) and GRR or unary RR "
        "with e^{(1−ρ)ε_i} on the cell (round 1, charged (1−ρ)ε_i). The server debiases every "
        "report with that user's own C_i = (e^{(1−ρ)ε_i} + K_i − 1)/(e^{(1−ρ)ε_i} − 1) and "
        "offset 1/(e^{(1−ρ)ε_i} − 1), so each Ṽ_i^j stays unbiased, and sums them with equal "
        "weights (eq. (9)); with one ε this is the paper's estimator."
    )

    @abstractmethod
    def structure(
        self, params: H, epsilon: FloatArray, mask: BoolArray
    ) -> tuple[int, int, int, JSON, list[str]]:
        """(s, p, t), extra public constants and warnings from the public ε's and masks."""

    def plan(
        self,
        params: H,
        epsilon: FloatArray,
        metadata: Mapping[str, NDArray[Any]],
        seed: int,
    ) -> Plan:
        eps = _plan_epsilons(epsilon)
        n, d = eps.size, params.dimension
        mask, public, warnings = enrollment(metadata, n, d)
        s, p, t, extra, more = self.structure(params, eps, mask)
        warnings += more
        if s == d and p > 0:
            warnings.append("every feature is a histogram dimension: the tree is a single leaf")
            p = 0
        cells = t**s * 2**p
        if t**s > MAX_PRIVATE_CELLS or cells > MAX_CELLS:
            raise ValueError(
                f"t^s·2^p = {t}^{s}·2^{p} cells is more than this protocol supports "
                f"({MAX_PRIVATE_CELLS} private cells, {MAX_CELLS} in all)"
            )
        if params.index_mechanism == "rr" and cells > MAX_RR_CELLS:
            raise ValueError(f"unary RR sends one bit per cell: at most {MAX_RR_CELLS} cells")
        slots = np.arange(n, dtype=np.int64)
        label_eps = params.rho * eps
        grr = params.index_mechanism == "grr"
        rounds = (
            RoundPlan(0, "label", slots, label_eps, "scalar", ()),
            RoundPlan(
                1,
                "cell",
                slots,
                eps - label_eps,
                "scalar" if grr else "vector",
                () if grr else (cells,),
            ),
        )
        public_json: JSON = {
            "dimension": d,
            "feature_order": feature_order(mask).tolist(),
            "protection_counts": mask.sum(axis=0).tolist(),
            "always_private": always_private(mask),
            "histogram_dims": s,
            "bins": t,
            "depth": p,
            "max_cells": cells,
            "rho": params.rho,
            "label_low": params.label_low,
            "label_high": params.label_high,
            **extra,
        }
        kept = {"mask": mask, "public": public}
        return Plan(n, rounds, public_json, tuple(warnings), metadata=kept)

    def broadcast(self, params: H, plan: Plan, round_index: int, outputs: Sequence[JSON]) -> JSON:
        if round_index == 0:
            return {
                "dimension": params.dimension,
                "label_low": params.label_low,
                "label_high": params.label_high,
            }
        if round_index != 1 or len(outputs) < 1:
            raise ValueError(f"round {round_index} needs the output of round 0 (the partition)")
        first = outputs[0]
        return {
            "partition": first["partition"],
            "mechanism": params.index_mechanism,
            "labels": first["labels"],
            "label_mean": first["label_mean"],
        }

    def client_broadcast(self, broadcast: JSON) -> JSON:
        """The cell round's task carries the partition, not the n noisy labels that only the
        server's pairing needs (§1.4: a client sends its own cell)."""
        return {k: v for k, v in broadcast.items() if k not in ("labels", "label_mean")}

    def privatize(
        self,
        params: H,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        x, mask, y = semi_feature_block(data, params.dimension)
        eps = check_epsilons(epsilon)
        if task.round == 0:
            return label_report(y, params, eps, rng)
        if task.round != 1:
            raise ValueError(f"{self.name} has rounds 0 and 1, not {task.round}")
        part = Partition.from_json(task.broadcast["partition"])
        a_set, b_set = part.potential(x, ~mask)
        leaves = part.n_leaves
        cell = part.cell(x)
        rows = np.arange(cell.size)
        if task.broadcast.get("mechanism", "grr") == "rr":
            members = (a_set[:, :, None] & b_set[:, None, :]).reshape(cell.size, -1)
            bits = unary_rr_report(members, cell, eps, rng)
            out = np.zeros((cell.size, *task.payload_shape), dtype=np.float64)
            out[:, : bits.shape[1]] = bits
            return out
        n_b = b_set.sum(axis=1)
        rank_a = np.cumsum(a_set, axis=1)[rows, cell // leaves] - 1
        rank_b = np.cumsum(b_set, axis=1)[rows, cell % leaves] - 1
        sent = grr_report(rank_a * n_b + rank_b, a_set.sum(axis=1) * n_b, eps, rng)
        reported = nth_member(a_set, sent // n_b) * leaves + nth_member(b_set, sent % n_b)
        return reported.astype(np.float64)

    def check(
        self, params: H, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        valid = valid_payloads(task, payloads)
        if task.round == 0:
            return valid
        cells = int(task.broadcast["partition"]["n_cells"])
        p = np.nan_to_num(np.asarray(payloads, dtype=np.float64).reshape(valid.size, -1), nan=-1.0)
        if task.payload_shape == ():
            ok = (p[:, 0] == np.floor(p[:, 0])) & (p[:, 0] >= 0) & (p[:, 0] < cells)
        else:
            ok = np.all((p == 0.0) | (p == 1.0), axis=1) & np.all(p[:, cells:] == 0.0, axis=1)
        return np.asarray(valid & ok, dtype=np.bool_)

    def check_members(
        self, params: H, plan: Plan, task: RoundTask, slots: IntArray, payloads: FloatArray
    ) -> BoolArray:
        if task.round != 1:
            return np.ones(np.asarray(slots).shape[0], dtype=np.bool_)
        return self.check_cells(params, plan, task.broadcast, slots, payloads)

    def check_cells(
        self, params: H, plan: Plan, broadcast: JSON, slots: IntArray, payloads: FloatArray
    ) -> BoolArray:
        """Round 1, per sender: False for a report naming a cell outside the sender's potential
        set V_i (recomputed from its enrollment metadata and the broadcast partition, §1.4), or
        a unary-RR report with a bit set outside V_i; also False for a malformed report."""
        part = Partition.from_json(broadcast["partition"])
        s = np.asarray(slots, dtype=np.int64)
        a_set, b_set = part.potential(plan.metadata["public"][s], ~plan.metadata["mask"][s])
        p = np.nan_to_num(np.asarray(payloads, dtype=np.float64).reshape(s.size, -1), nan=-1.0)
        if broadcast.get("mechanism", "grr") == "rr":
            members = (a_set[:, :, None] & b_set[:, None, :]).reshape(s.size, -1)
            bits = p[:, : members.shape[1]]
            binary = np.all((p == 0.0) | (p == 1.0), axis=1)
            inside = ~np.any((bits != 0.0) & ~members, axis=1)
            return np.asarray(binary & inside & np.all(p[:, members.shape[1] :] == 0, 1), np.bool_)
        j = p[:, 0]
        ok = (j == np.floor(j)) & (j >= 0) & (j < part.n_cells)
        a, b = np.divmod(np.where(ok, j, 0).astype(np.int64), part.n_leaves)
        rows = np.arange(s.size)
        return np.asarray(ok & a_set[rows, a] & b_set[rows, b], dtype=np.bool_)

    def aggregate(
        self,
        params: H,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        if round_index == 0:
            return self._grow(params, plan, chunks)
        if round_index != 1:
            raise ValueError(f"{self.name} has rounds 0 and 1, not {round_index}")
        return self._estimate(params, plan, broadcast, chunks)

    def _grow(self, params: H, plan: Plan, chunks: Iterable[ReportChunk]) -> JSON:
        """Round 0: the partition from the public coordinates and the noisy labels (§2.3–2.5)."""
        labels = np.full(plan.n_participants, np.nan)
        for chunk in chunks:
            labels[chunk.slots] = np.asarray(chunk.payloads, dtype=np.float64).reshape(-1)
        have = np.isfinite(labels)
        if not np.any(have):
            raise ValueError("no label reports to aggregate")
        order = np.asarray(plan.public["feature_order"], dtype=np.int64)
        s, t, p = (int(plan.public[k]) for k in ("histogram_dims", "bins", "depth"))
        x, known = plan.metadata["public"][have], ~plan.metadata["mask"][have]
        dims = order[s:].tolist()
        tree: Tree
        if params.tree_rule == "cart":
            tree = cart_tree(x, known, labels[have], dims, p)
        else:
            tree = max_edge_tree(x, known, labels[have], dims, p, params.split_criterion)
        partition = Partition(order, s, t, tree)
        return {
            "partition": partition.as_json(),
            "labels": labels.tolist(),  # NaN (None on the wire) for the silent
            "label_mean": float(labels[have].mean()),
            "n_reports": int(np.count_nonzero(have)),
        }

    def _estimate(
        self, params: H, plan: Plan, broadcast: JSON, chunks: Iterable[ReportChunk]
    ) -> JSON:
        """Round 1: N_j = Σ Ỹ_i Ṽ_i^j, D_j = Σ Ṽ_i^j over users with both reports (§2.8)."""
        part = Partition.from_json(broadcast["partition"])
        labels = np.asarray(broadcast["labels"], dtype=np.float64)
        cells, leaves = part.n_cells, part.n_leaves
        num, den = np.zeros(cells), np.zeros(cells)
        reports = paired = 0
        k_sum, k_max = 0.0, 0
        for chunk in chunks:
            reports += int(chunk.slots.size)
            y = labels[chunk.slots]
            keep = np.isfinite(y)
            if not np.any(keep):
                continue
            s, y, eps = chunk.slots[keep], y[keep], check_epsilons(chunk.epsilon[keep])
            z = np.asarray(chunk.payloads, dtype=np.float64).reshape(chunk.slots.size, -1)[keep]
            a_set, b_set = part.potential(plan.metadata["public"][s], ~plan.metadata["mask"][s])
            k = a_set.sum(axis=1) * b_set.sum(axis=1)
            paired += int(s.size)
            k_sum, k_max = k_sum + float(k.sum()), max(k_max, int(k.max()))
            if params.index_mechanism == "grr":
                j = z[:, 0].astype(np.int64)
                scale, offset = grr_debias(eps, k), grr_offset(eps)
                num += np.bincount(j, scale * y, minlength=cells)
                den += np.bincount(j, scale, minlength=cells)
            else:
                scale = rr_debias(eps / 2.0)
                offset = scale * (1.0 - rr_keep_probability(eps / 2.0))
                bits = z[:, :cells]
                num += (scale * y) @ bits
                den += scale @ bits
            # the −1{j ∈ V_i}·offset_i part, through the product form of V_i
            num -= (a_set.T @ ((offset * y)[:, None] * b_set)).reshape(-1)
            den -= (a_set.T @ (offset[:, None] * b_set)).reshape(-1)
        if paired == 0:
            raise ValueError("no participant sent both its label and its cell")
        m, big_m = params.centre, params.half_range
        fallback = den < params.density_floor
        ratio = np.divide(num, den, out=np.zeros(cells), where=~fallback)
        values = np.clip(np.where(fallback, float(broadcast["label_mean"]), ratio), -big_m, big_m)
        return {
            "values": (values + m).tolist(),
            "numerator": num.tolist(),
            "denominator": den.tolist(),
            "fallback_cells": int(np.count_nonzero(fallback)),
            "n_reports": reports,
            "n_paired": paired,
            "mean_potential_cells": k_sum / paired,
            "max_potential_cells": k_max,
            "leaves": leaves,
        }

    def finalize(self, params: H, plan: Plan, outputs: Sequence[JSON]) -> Result:
        if len(outputs) != 2:
            raise ValueError(f"{self.name} finalizes after its two rounds")
        first, second = outputs
        part = first["partition"]
        diagnostics: JSON = {
            "feature_order": part["feature_order"],
            "histogram_dims": part["s"],
            "bins": part["t"],
            "depth": plan.public["depth"],
            "leaves": second["leaves"],
            "n_cells": part["n_cells"],
            "label_reports": first["n_reports"],
            "cell_reports": second["n_reports"],
            "paired": second["n_paired"],
            "fallback_cells": second["fallback_cells"],
            "mean_potential_cells": second["mean_potential_cells"],
            "max_potential_cells": second["max_potential_cells"],
            "denominator": second["denominator"],
        }
        if "rule15" in plan.public:
            diagnostics["rule15"] = plan.public["rule15"]
        return Result(list(second["values"]), None, diagnostics, plan.warnings)

    def feature_dimension(self, params: H) -> int:
        return params.dimension

    def predict(
        self, params: H, plan: Plan, outputs: Sequence[JSON], features: ArrayLike
    ) -> FloatArray:
        """The value of the cell of each full feature row (k, d) (§2.8; post-processing)."""
        x = _features(params, features)
        if len(outputs) < 2:
            raise ValueError(f"{self.name} predicts after its two rounds")
        part = Partition.from_json(outputs[0]["partition"])
        values = np.asarray(outputs[1]["values"], dtype=np.float64)
        return np.asarray(values[part.cell(x)], dtype=np.float64)


class HistOfTree(_HistOfTree[HistOfTreeParams]):
    """HistOfTree (§2.2–§2.8) with fixed (s, t, p): a t-bin histogram on the s most protected
    features times a depth-p tree on the others. Round 0 charges ρε_i, round 1 (1 − ρ)ε_i.

    ``check_members`` (round 1) calls ``check_cells(params, plan, broadcast, slots, payloads)``:
    a report naming a cell outside the sender's potential set V_i is rejected (§1.4).
    """

    name: ClassVar[str] = "histoftree"
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
        return s, params.depth, params.bins, {}, warnings


class HistOfTreeTuned(_HistOfTree[TunedParams]):
    """AdHistOfTree (§2.9): HistOfTree with (s, p) minimising rule (15) over s ∈ {s_all..d−1},
    p ∈ {0..⌈log₂ n⌉} at plan time, t = t* + offset. Uses only n, the ε_i's, d and the masks:
    no data, no validation split, no privacy cost."""

    name: ClassVar[str] = "histoftree-tuned"
    summary: ClassVar[str] = (
        "AdHistOfTree: HistOfTree with the histogram dimensions, depth and bins chosen from the "
        "public masks and budgets by the paper's bound-minimising rule (15)."
    )
    source: ClassVar[str] = _HistOfTree.source + "; rule (15), §4.3"
    heterogeneity: ClassVar[str] = (
        _HistOfTree.heterogeneity
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


# --------------------------------------------------------------------------- Hist


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

    name: ClassVar[str] = "hist-ldp"
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
        eps = _plan_epsilons(epsilon)
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
        x = _features(params, features)
        values = np.asarray(outputs[0]["values"], dtype=np.float64)
        return np.asarray(values[grid_cells(x, params.bins)], dtype=np.float64)


# --------------------------------------------------------------------------- tree baselines


class TreeParams(SemiParams):
    max_depth: int = Field(4, ge=0, le=MAX_DEPTH, description="DT max_depth (grid 1,2,4,6,8)")
    min_samples_leaf: int = Field(10, ge=1, description="DT min_samples_leaf (grid 1,10,100)")
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
        eps = _plan_epsilons(epsilon)
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
        x = _features(params, features)
        tree = Tree.from_json(outputs[0]["tree"])
        values = np.asarray(outputs[0]["leaf_values"], dtype=np.float64)
        return np.asarray(values[tree.apply(x)], dtype=np.float64)


class ParDt(_TreeBaseline[ParDtParams]):
    """ParDT (§3): a regression tree on the public features (from enrollment metadata; private
    entries are missing values) and labels with Laplace noise (y_hi − y_lo)/ε_i (all of ε_i)."""

    name: ClassVar[str] = "pardt"
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


PROTOCOLS: tuple[Protocol[Any], ...] = (
    HistOfTree(),
    HistOfTreeTuned(),
    HistLdp(),
    ParDt(),
    LabelDt(),
    KrrTree(),
)

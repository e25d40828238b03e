"""The two rounds HistOfTree and AdHistOfTree share (Ma, Jia and Yang, "Locally Private Estimation
with Public Features"; spec public-features-ldp.md §1.4, §2.2–§2.8): their common parameters, the
plan (a label round at ρε_i, then a cell round at (1 − ρ)ε_i), the randomizers, the checks against
each sender's potential cells, the tree grown from the noisy labels, the cell estimator and the
predictor. The catalogue protocols, which differ only in how they choose the structure (s, p, t),
are in ``fedldp.protocol.semi_feature.histoftree``.

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
from pydantic import Field

from fedldp.protocol.api import (
    JSON,
    BoolArray,
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
    check_epsilons,
    rr_debias,
    rr_keep_probability,
    valid_payloads,
)
from fedldp.protocol.core.base.bounds import SCALE_MAX, SHARE_MIN
from fedldp.protocol.semi_feature.common import (
    MAX_RR_CELLS,
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
from fedldp.protocol.semi_feature.partition import (
    MAX_CELLS,
    MAX_PRIVATE_CELLS,
    Partition,
    always_private,
    feature_order,
    grr_debias,
    grr_offset,
    grr_report,
    nth_member,
    unary_rr_report,
)
from fedldp.protocol.semi_feature.trees import Tree, cart_tree, max_edge_tree

__all__ = ["HistOfTreeBase", "HotParams"]


class HotParams(SemiParams):
    rho: float = Field(
        0.7,
        ge=SHARE_MIN,
        le=1 - SHARE_MIN,
        description="ρ: label share of ε (§1.4, App. C.1); the cells get 1 − ρ",
    )
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
        1.0,
        gt=0,  # at τ = 0 a cell no pair reached (D_j = 0) would divide 0 by 0
        le=SCALE_MAX,
        description="τ: a cell with D_j < τ predicts the mean noisy label (§2.8)",
    )


H = TypeVar("H", bound=HotParams)


class HistOfTreeBase(Protocol[H], Predictor[H]):
    """Rounds, randomizers, checks and estimator shared by HistOfTree and AdHistOfTree."""

    dropout: ClassVar[str] = (
        "The same users send a label (round 0) and a cell (round 1). The tree grows from the "
        "round-0 responders' labels; the cell estimates pair labels and cells and use only the "
        "users who sent both (a user who leaves after its label helped the tree but not the "
        "cell values; diagnostics: label_reports, cell_reports, paired). No pair fails the study."
    )
    population_rule: ClassVar[str] = SEMI_POPULATION_RULE
    population_probe: ClassVar[Mapping[str, Any]] = POPULATION_PROBE

    def population_metadata(self, params: H, n: int) -> Mapping[str, NDArray[Any]]:
        return probe_metadata(n, params.dimension)

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
        eps = plan_epsilons(epsilon)
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

    def report_bounds(
        self, params: H, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray] | None:
        """Round 0's Laplace label (``label_bounds``); round 1's cells are bounded already."""
        return label_bounds(params, epsilon) if task.round == 0 else None

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
        x = features_of(params, features)
        if len(outputs) < 2:
            raise ValueError(f"{self.name} predicts after its two rounds")
        part = Partition.from_json(outputs[0]["partition"])
        values = np.asarray(outputs[1]["values"], dtype=np.float64)
        return np.asarray(values[part.cell(x)], dtype=np.float64)

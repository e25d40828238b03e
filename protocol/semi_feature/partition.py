"""Partitions, potential cells and cell-index mechanisms of semi-feature LDP.

Ma, Jia and Yang, "Locally Private Estimation with Public Features" (spec public-features-ldp.md):

* ``histogram_bins`` and the private grid π^priv (§2.3: equal-width bins, x = 1 in the last bin,
  C-order flat index a = Σ σ_k t^{s−1−k});
* ``feature_order`` (§2.5: features sorted by how many users protect them, stable);
* ``Partition``: π^priv ⊗ π^pub with the public tree of ``fedldp.protocol.semi_feature.trees``;
``potential``: the
  potential cells V_i = (private bins) × (leaves) consistent with a user's public coordinates
  (§2.6);
* ``grr_report`` and its theory: generalized randomized response restricted to V_i (§2.7(b),
  App. A.1 eq. (16)/(17)); ``unary_rr_report``: unary RR (§2.7(a), eq. (5)/(8));
* ``tuned_structure``: the AdHistOfTree rule (15) (§2.9) with the s ≥ s_all constraint
  (resolution #10), generalised to per-user ε_i (``rule15_objective``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from fedldp.protocol.api import (
    JSON,
    BoolArray,
    FloatArray,
    IntArray,
    RandomSource,
    check_epsilons,
    rr_keep_probability,
)
from fedldp.protocol.semi_feature.trees import MAX_DEPTH, Tree

__all__ = [
    "MAX_CELLS",
    "MAX_PRIVATE_CELLS",
    "Partition",
    "always_private",
    "feature_order",
    "grr_debias",
    "grr_keep_probability",
    "grr_offset",
    "grr_other_probability",
    "grr_report",
    "histogram_bins",
    "nth_member",
    "rule15_objective",
    "tuned_structure",
    "unary_rr_report",
]

MAX_PRIVATE_CELLS = 1 << 12
"""Largest private grid t^s."""
MAX_CELLS = 1 << 16
"""Largest partition t^s · (number of leaves)."""


def histogram_bins(x: ArrayLike, t: int) -> IntArray:
    """Bin min(⌊t·x⌋, t − 1) of each value (x clipped to [0, 1]; §2.3, x = 1 in the last bin)."""
    v = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
    return np.minimum(np.floor(v * t), t - 1).astype(np.int64)


def feature_order(mask: ArrayLike) -> IntArray:
    """Features by protection count c_ℓ = Σ_i W_i^ℓ, descending, ties by index (§2.5)."""
    counts = np.asarray(mask, dtype=np.int64).sum(axis=0)
    return np.argsort(-counts, kind="stable").astype(np.int64)


def always_private(mask: ArrayLike) -> int:
    """s_all: the number of features every user protects (§2.5)."""
    w = np.asarray(mask, dtype=np.bool_)
    return int(np.count_nonzero(w.all(axis=0))) if w.shape[0] else 0


# --------------------------------------------------------------------------- partition


@dataclass(frozen=True)
class Partition:
    """π^priv ⊗ π^pub (§2.3–§2.6): ``order[:s]`` are the histogram dims (t equal bins each),
    the tree splits ``order[s:]``; cell j = a·L + b with a the C-order flat private index and b
    the leaf id (L leaves)."""

    order: IntArray
    s: int
    t: int
    tree: Tree

    def __post_init__(self) -> None:
        d = self.order.size
        if not np.array_equal(np.sort(self.order), np.arange(d)):
            raise ValueError("feature_order must be a permutation of the features")
        if not 0 <= self.s <= d or self.t < 1 or self.t**self.s > MAX_PRIVATE_CELLS:
            raise ValueError(f"need 0 <= s <= d and 1 <= t^s <= {MAX_PRIVATE_CELLS}")
        inner = self.tree.feature[self.tree.feature >= 0]
        if not np.all(np.isin(inner, self.order[self.s :])):
            raise ValueError("the tree may split only the tree dimensions")
        if self.n_cells > MAX_CELLS:
            raise ValueError(f"the partition has more than {MAX_CELLS} cells")

    @property
    def hist_dims(self) -> IntArray:
        return self.order[: self.s]

    @property
    def tree_dims(self) -> IntArray:
        return self.order[self.s :]

    @property
    def n_private(self) -> int:
        return int(self.t**self.s)

    @property
    def n_leaves(self) -> int:
        return self.tree.n_leaves

    @property
    def n_cells(self) -> int:
        return self.n_private * self.n_leaves

    def private_index(self, x: ArrayLike) -> IntArray:
        """a = Σ_k σ_k t^{s−1−k} over the histogram dims of full rows (n, d)."""
        bins = histogram_bins(np.asarray(x, dtype=np.float64)[:, self.hist_dims], self.t)
        weights = self.t ** np.arange(self.s - 1, -1, -1, dtype=np.int64)
        return np.asarray(bins @ weights, dtype=np.int64)

    def cell(self, x: ArrayLike) -> IntArray:
        """The cell j = a·L + b of full rows (n, d) in [0, 1]^d."""
        v = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
        return self.private_index(v) * self.n_leaves + self.tree.apply(v)

    def potential(self, x: ArrayLike, known: ArrayLike) -> tuple[BoolArray, BoolArray]:
        """V_i (§2.6) as a product: (n, t^s) private indices × (n, L) leaves consistent with each
        row's ``known`` (public) coordinates; unknown ones are free. K_i = Σ A_i · Σ B_i."""
        v = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
        k = np.asarray(known, dtype=np.bool_)
        digits = (
            np.arange(self.n_private)[:, None] // self.t ** np.arange(self.s - 1, -1, -1)
        ) % self.t  # (t^s, s)
        bins = histogram_bins(v[:, self.hist_dims], self.t)  # (n, s)
        free = ~k[:, self.hist_dims]
        a = np.all(free[:, None, :] | (digits[None, :, :] == bins[:, None, :]), axis=2)
        return np.asarray(a, dtype=np.bool_), self.tree.consistent(v, k)

    def box(self, cell: int) -> tuple[FloatArray, FloatArray]:
        """The cell as a box [lo, hi] in [0, 1]^d (in the original feature coordinates)."""
        a, b = divmod(int(cell), self.n_leaves)
        d = self.order.size
        lo, hi = np.zeros(d), np.ones(d)
        digits = (a // self.t ** np.arange(self.s - 1, -1, -1)) % self.t
        lo[self.hist_dims], hi[self.hist_dims] = digits / self.t, (digits + 1.0) / self.t
        leaf_lo, leaf_hi = self.tree.boxes(self.tree_dims.tolist())
        lo[self.tree_dims], hi[self.tree_dims] = leaf_lo[b], leaf_hi[b]
        return lo, hi

    def as_json(self) -> JSON:
        """The PartitionBroadcast of §1.4 (with the tree's nodes, which define it)."""
        lo, hi = self.tree.boxes(self.tree_dims.tolist())
        return {
            "feature_order": self.order.tolist(),
            "s": self.s,
            "t": self.t,
            "tree": {
                "dims": self.tree_dims.tolist(),
                "nodes": self.tree.as_json(),
                "leaves": [
                    {"lo": a.tolist(), "hi": b.tolist()} for a, b in zip(lo, hi, strict=True)
                ],
            },
            "cell_id_rule": "j = a*L + b",
            "n_cells": self.n_cells,
        }

    @classmethod
    def from_json(cls, raw: JSON) -> Partition:
        try:
            order = np.asarray(raw["feature_order"], dtype=np.int64)
            s, t, nodes = int(raw["s"]), int(raw["t"]), raw["tree"]["nodes"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed partition: {exc}") from None
        return cls(order, s, t, Tree.from_json(nodes))


def nth_member(members: BoolArray, rank: IntArray) -> IntArray:
    """Column of the ``rank``-th (0-based) True of each row of ``members``."""
    return np.asarray(np.argmax(np.cumsum(members, axis=1) > rank[:, None], axis=1), np.int64)


# --------------------------------------------------------------------------- GRR on V_i


def grr_keep_probability(epsilon: ArrayLike, k: ArrayLike) -> FloatArray:
    """P(report = true cell) = e^ε/(e^ε + K − 1) (eq. (16)); 1 when K = 1. Overflow-free."""
    eps = check_epsilons(epsilon)
    kk = np.asarray(k, dtype=np.float64)
    return np.asarray(1.0 / (1.0 + (kk - 1.0) * np.exp(-eps)), dtype=np.float64)


def grr_other_probability(epsilon: ArrayLike, k: ArrayLike) -> FloatArray:
    """P(report = a given other member of V_i) = 1/(e^ε + K − 1)."""
    eps = check_epsilons(epsilon)
    kk = np.asarray(k, dtype=np.float64)
    return np.asarray(np.exp(-eps) / (1.0 + (kk - 1.0) * np.exp(-eps)), dtype=np.float64)


def grr_debias(epsilon: ArrayLike, k: ArrayLike) -> FloatArray:
    """C_i = (e^ε + K − 1)/(e^ε − 1) = 1 + K/(e^ε − 1) (eq. (17))."""
    eps = check_epsilons(epsilon)
    return np.asarray(1.0 + np.asarray(k, dtype=np.float64) / np.expm1(eps), dtype=np.float64)


def grr_offset(epsilon: ArrayLike) -> FloatArray:
    """1/(e^ε − 1): Ṽ_i^j = C_i·1{v_i = j} − 1{j ∈ V_i}/(e^ε − 1), unbiased for 1{X_i ∈ j}."""
    return np.asarray(1.0 / np.expm1(check_epsilons(epsilon)), dtype=np.float64)


def grr_report(rank: ArrayLike, k: ArrayLike, epsilon: ArrayLike, rng: RandomSource) -> IntArray:
    """GRR over {0..K−1} (the members of V_i in a fixed order): keep ``rank`` (the true member's
    position) w.p. ``grr_keep_probability``, else a uniform other member. ``rank`` is (n,) or
    (n, m) (m independent reports per user), ``k`` and ``epsilon`` broadcast to it. Exactly
    two uniforms per report, whatever the data (STYLE rule 9)."""
    r = np.asarray(rank, dtype=np.int64)
    kk = np.broadcast_to(np.asarray(k, dtype=np.int64), r.shape)
    if r.ndim == 0 or np.any(kk < 1) or np.any((r < 0) | (r >= kk)):
        raise ValueError("need 0 <= rank < K, K >= 1, with a leading user axis")
    eps = check_epsilons(epsilon)
    if eps.ndim == 1 and r.ndim > 1 and eps.shape[0] == r.shape[0]:
        eps = eps.reshape(-1, *([1] * (r.ndim - 1)))  # one ε per user, shared by its reports
    eps = np.broadcast_to(eps, r.shape)
    u = np.asarray(rng.random(size=(*r.shape, 2)), dtype=np.float64)
    keep = u[..., 0] < grr_keep_probability(eps, kk)
    other = np.minimum(np.floor(u[..., 1] * (kk - 1)).astype(np.int64), np.maximum(kk - 2, 0))
    other = other + (other >= r)
    return np.asarray(np.where(keep | (kk == 1), r, other), dtype=np.int64)


def unary_rr_report(
    members: ArrayLike, true_cell: ArrayLike, epsilon: ArrayLike, rng: RandomSource
) -> FloatArray:
    """Unary RR restricted to V_i (§2.7(a)): for every cell j of V_i the bit 1{j = true cell},
    kept w.p. e^{ε/2}/(1 + e^{ε/2}) (``epsilon`` is the index budget ε_I, per-bit ε_I/2: two bits
    change when X changes cell); 0 for every cell outside V_i. One uniform per cell per user."""
    v = np.asarray(members, dtype=np.bool_)
    cell = np.asarray(true_cell, dtype=np.int64)
    eps = check_epsilons(epsilon)
    if v.ndim != 2 or cell.shape != (v.shape[0],) or eps.shape != cell.shape:
        raise ValueError("need members (n, K), a true cell and an ε per user")
    if not np.all(v[np.arange(cell.size), cell]):
        raise ValueError("the true cell must lie in V_i")
    truth = np.arange(v.shape[1])[None, :] == cell[:, None]
    u = np.asarray(rng.random(size=v.shape), dtype=np.float64)
    keep = u < rr_keep_probability(eps / 2.0)[:, None]
    return np.asarray(v & (truth == keep), dtype=np.float64)


# --------------------------------------------------------------------------- rule (15)


def rule15_objective(
    s: int, p: int, d: int, epsilon: ArrayLike, tail: ArrayLike, c: float
) -> float:
    """Rule (15) (§2.9, natural log): 2^{p(d+s)/(d−s)}·log n·(1/n²)·Σ_i 2^{T_i p/(d−s)}/ε_i² +
    c·2^{−2p/(d−s)}, T_i = Σ_{ℓ∈T_s} W_i^ℓ (the user's private tree dims). With one ε this is the
    paper's 2^{p(d+s)/(d−s)}·log n/(nε²)·δ_s(p) + c·2^{−2p/(d−s)} (eq. 12): the per-user form is
    the non-paper extension to unequal ε's (each user's privatized error scales as 1/ε_i²)."""
    eps = check_epsilons(epsilon)
    tails = np.asarray(tail, dtype=np.float64)
    n = eps.size
    if not 0 <= s < d or p < 0 or tails.shape != eps.shape or n < 2:
        raise ValueError("need 0 <= s < d, p >= 0, one tail count per user and n >= 2")
    r = p / (d - s)
    privatized = (
        2.0 ** (p * (d + s) / (d - s))
        * math.log(n)
        * float(np.sum(2.0 ** (tails * r) / eps**2))
        / n**2
    )
    return float(privatized + c * 2.0 ** (-2.0 * r))


def tuned_structure(
    mask: ArrayLike,
    epsilon: ArrayLike,
    c: float,
    max_depth: int = MAX_DEPTH,
    max_cells: int = MAX_CELLS,
) -> tuple[int, int, int, float]:
    """AdHistOfTree (§2.9): brute-force argmin of rule (15) over s ∈ {s_all..d−1} (the s ≥ s_all
    constraint, spec #10; s = d − 1 if every feature is always private) and
    p ∈ {0..min(⌈log₂ n⌉, max_depth)}; ties to smaller s then smaller p. Returns (s, p, t*, value)
    with t* = max(1, round(2^{p/(d−s)})) (round half up). Pairs whose partition t*^s·2^p would
    exceed ``max_cells`` are skipped (they are never near the optimum for c <= 1)."""
    w = np.asarray(mask, dtype=np.bool_)
    eps = check_epsilons(epsilon)
    n, d = w.shape
    order = feature_order(w)
    ordered = w[:, order].astype(np.int64)
    suffix = np.concatenate([np.cumsum(ordered[:, ::-1], axis=1)[:, ::-1], np.zeros((n, 1))], 1)
    best: tuple[float, int, int] | None = None
    p_max = min(math.ceil(math.log2(n)), max_depth)
    for s in range(min(always_private(w), d - 1), d):
        for p in range(p_max + 1):
            if _t_star(p, d - s) ** s * 2**p > max_cells:
                continue
            value = rule15_objective(s, p, d, eps, suffix[:, s], c)
            if best is None or value < best[0]:
                best = (value, s, p)
    assert best is not None  # (s, 0) always fits: t* = 1
    value, s, p = best
    return s, p, _t_star(p, d - s), value


def _t_star(p: int, tree_dims: int) -> int:
    return max(1, math.floor(float(2.0 ** (p / tree_dims)) + 0.5))

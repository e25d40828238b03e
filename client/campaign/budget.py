"""Device budgets across a campaign's occurrences, and each device's ledger.

A device declares a budget ``epsilon`` per ``period`` days (``1d``: ε per simulated day, windows
[k·period, (k+1)·period)) or, with no period, for its lifetime. Composition is basic (sequential)
composition of pure ε: an occurrence charges each enrolled device the ε it declares, which bounds
what the occurrence's plan charges it (``fedldp.protocol.core.ledger.check_plan_budget``), and a
device's spend over a window is the sum of its charges there. Central (ε, δ) releases are not
composed here: campaigns refuse central-trust protocols (docs/campaigns.md).

The device refuses an occurrence that would take its spend in the occurrence's window past the
budget (``DeviceLedger.admits``), and the server's ledger keyed by device refuses the same one
(``fedldp.server.services.campaigns``), so both sides agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from fedldp.protocol.core.base.records import BoolArray, FloatArray, IntArray
from fedldp.protocol.core.wire import BUDGET_SLACK, budget_window, within_budget

__all__ = ["SLACK", "DeviceBudget", "DeviceLedger", "Spend", "parse_every"]

SLACK = BUDGET_SLACK


_UNITS = {"d": 1.0, "h": 1.0 / 24.0, "m": 1.0 / 1440.0, "s": 1.0 / 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([dhms])\s*$")


def parse_every(text: str | float) -> float:
    """A duration in days: ``1d`` → 1, ``12h`` → 0.5, a number is days (ValueError otherwise)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        days = float(text)
    else:
        match = _DURATION.match(str(text))
        if match is None:
            raise ValueError(f"a duration is written like 1d, 12h, 90m or 30s, got {text!r}")
        days = float(match.group(1)) * _UNITS[match.group(2)]
    if not days > 0:
        raise ValueError(f"a schedule's period must be > 0, got {text!r}")
    return days


class DeviceBudget(BaseModel):
    """ε per period (``period`` days) or, without a period, for the device's lifetime."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    epsilon: float = Field(gt=0, description="the ε a device may spend per period (or in all)")
    period: float | None = Field(
        None, description="days per budget window (1d, 12h); none: lifetime"
    )

    @field_validator("period", mode="before")
    @classmethod
    def _period(cls, v: Any) -> float | None:
        return None if v is None else parse_every(v)

    def window(self, day: float) -> int:
        """The index of the budget window holding ``day`` (0 for a lifetime budget)."""
        return budget_window(day, self.period)

    def fits(self, spent: FloatArray, charge: FloatArray) -> BoolArray:
        """Whether ``spent + charge`` stays within the budget (with ``SLACK``)."""
        fits = np.vectorize(within_budget, otypes=[np.bool_])
        return np.asarray(fits(spent, charge, self.epsilon), dtype=np.bool_)


@dataclass(frozen=True)
class Spend:
    """What one occurrence charged: its index, day and the ε of each charged device slot."""

    occurrence: int
    day: float
    slots: IntArray
    epsilon: FloatArray


@dataclass
class DeviceLedger:
    """The charges of ``n`` devices over a campaign's occurrences (in memory; the swarm driver
    keeps them in its device store, ``fedldp.client.campaign.store``)."""

    n: int
    budget: DeviceBudget | None
    spends: list[Spend] = field(default_factory=list)

    def spent_in_window(self, day: float) -> FloatArray:
        """Each device's spend in the budget window holding ``day`` (its lifetime spend for a
        lifetime budget or no budget)."""
        out = np.zeros(self.n, dtype=np.float64)
        window = None if self.budget is None else self.budget.window(day)
        for s in self.spends:
            if window is None or self.budget is None or self.budget.window(s.day) == window:
                np.add.at(out, s.slots, s.epsilon)
        return out

    def total(self) -> FloatArray:
        """Each device's cumulative spend over every occurrence."""
        out = np.zeros(self.n, dtype=np.float64)
        for s in self.spends:
            np.add.at(out, s.slots, s.epsilon)
        return out

    def admits(self, day: float, charge: FloatArray) -> BoolArray:
        """Which devices accept an occurrence on ``day`` charging them ``charge``."""
        if self.budget is None:
            return np.ones(self.n, dtype=np.bool_)
        return self.budget.fits(self.spent_in_window(day), charge)

    def record(self, occurrence: int, day: float, slots: IntArray, epsilon: FloatArray) -> None:
        """Charge ``slots`` the ``epsilon`` of ``occurrence`` (once: a second record of the same
        occurrence is refused with ValueError)."""
        if any(s.occurrence == occurrence for s in self.spends):
            raise ValueError(f"occurrence {occurrence} is already in the ledger")
        self.spends.append(
            Spend(occurrence, day, np.asarray(slots, np.int64), np.asarray(epsilon, np.float64))
        )

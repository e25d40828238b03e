"""Device budgets across a campaign's occurrences, and each device's ledger.

A device declares a budget ``epsilon`` per ``period`` days (``1d``: ε per simulated day, windows
[k·period, (k+1)·period)) or, with no period, for its lifetime. Composition is basic (sequential)
composition of pure ε: an occurrence charges each enrolled device the ε it declares, which bounds
what the occurrence's plan charges it (``fedldp.protocol.core.ledger.check_plan_budget``), and a
device's spend over a window is the sum of its charges there.

A central protocol's (ε, δ) releases (``Protocol.release_event``) are composed instead with
dp-accounting's PLD accountant (``fedldp.protocol.core.accounting``), at the budget's ``delta``:
a device's spend in a window is the composed ε at δ of its releases there, and an occurrence's
charge the increase it brings (so the charges of a window still add up to its spend); its
lifetime spend is the composition of all its releases (docs/campaigns.md, *Central releases*).

The device refuses an occurrence that would take its spend in the occurrence's window past the
budget (``DeviceLedger.admits``), and the server's ledger keyed by device refuses the same one
(``fedldp.server.services.campaigns``), so both sides agree.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from fedldp.protocol.core.base.protocol import Params, Protocol
from fedldp.protocol.core.base.records import BoolArray, FloatArray, IntArray
from fedldp.protocol.core.wire import BUDGET_SLACK, budget_window, within_budget

__all__ = [
    "NO_STATE",
    "SLACK",
    "ChargeRule",
    "DeviceBudget",
    "DeviceLedger",
    "Spend",
    "basic_rule",
    "parse_every",
]

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
    """ε per period (``period`` days) or, without a period, for the device's lifetime; for a
    central protocol, ε at ``delta`` (its releases composed by the PLD accountant)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    epsilon: float = Field(gt=0, description="the ε a device may spend per period (or in all)")
    period: float | None = Field(
        None, description="days per budget window (1d, 12h); none: lifetime"
    )
    delta: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="the δ at which a central protocol's (ε, δ) releases are composed and the "
        "budget ε is stated (required for a central protocol, refused for a local one)",
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
class ChargeRule:
    """How a campaign's protocol charges a device for a collection, given its earlier ones
    (``Protocol.repeated_epsilon``, docs/longitudinal.md §5): ``device`` is the device's own
    charge, which knows its memoized states; ``server`` the server's, from the declared ε's
    alone (a bound over every state sequence, public: the device computes it too)."""

    protocol: Protocol[Any] | None
    params: Params | None
    delta: float | None = None
    """The budget's δ: a protocol with a ``release_event`` is composed at it."""
    _memo: dict[tuple[float, ...], float] = field(default_factory=dict, repr=False, compare=False)

    @property
    def central(self) -> bool:
        """Whether the protocol's releases are composed by the accountant (module docstring)."""
        return (
            self.protocol is not None
            and self.params is not None
            and self.protocol.release_event(self.params, 1.0) is not None
        )

    def composed(self, declared: list[float]) -> float:
        """The ε at the budget's δ of releases at the ``declared`` ε's (central protocols:
        ``Protocol.release_event`` composed by ``fedldp.protocol.core.accounting``)."""
        if self.protocol is None or self.params is None or self.delta is None:
            raise ValueError("composing central releases needs the protocol and a budget δ")
        # dp-accounting takes half a second to import: only central campaigns pay it
        from fedldp.protocol.core.accounting import composed_epsilon

        key = tuple(sorted(declared))  # composition commutes; devices share histories
        found = self._memo.get(key)
        if found is None:
            protocol, params = self.protocol, self.params
            events = [protocol.release_event(params, e) for e in key]
            found = self._memo[key] = composed_epsilon(events, self.delta)
        return found

    def device(
        self, before: list[float], states_before: list[int], epsilon: float, state: int
    ) -> float:
        """The cumulative ε after the new collection by the device's rule."""
        if self.protocol is None or self.params is None:
            return math.fsum([*before, epsilon])
        return self.protocol.repeated_epsilon(
            self.params, [*before, epsilon], [*states_before, state]
        )

    def server(self, before: list[float], epsilon: float) -> float:
        """The cumulative ε after the new collection by the server's rule."""
        if self.protocol is None or self.params is None:
            return math.fsum([*before, epsilon])
        return self.protocol.repeated_epsilon(self.params, [*before, epsilon])


def basic_rule() -> ChargeRule:
    """Basic composition (Σ ε, whatever the states): the rule of a ledger without protocol."""
    return ChargeRule(None, None)


NO_STATE = -1
"""The state recorded for a collection of a protocol that memoizes nothing (or fresh mode)."""


@dataclass(frozen=True)
class Spend:
    """What one occurrence charged each device slot it admitted: ``epsilon`` by the device's own
    rule, ``bound`` by the server's, for reports at the ``declared`` ε in memoized ``states``."""

    occurrence: int
    day: float
    slots: IntArray
    epsilon: FloatArray
    declared: FloatArray
    states: IntArray
    bound: FloatArray


@dataclass
class DeviceLedger:
    """The charges of ``n`` devices over a campaign's occurrences (in memory; the swarm driver
    keeps them in its device store, ``fedldp.client.campaign.store``), by ``rule`` (basic
    composition by default)."""

    n: int
    budget: DeviceBudget | None
    rule: ChargeRule = field(default_factory=basic_rule)
    spends: list[Spend] = field(default_factory=list)
    _declared: list[list[float]] = field(init=False, repr=False)
    _windows: list[list[int]] = field(init=False, repr=False)
    _states: list[list[int]] = field(init=False, repr=False)
    _central: bool = field(init=False, repr=False)
    _own: FloatArray = field(init=False, repr=False)
    _server: FloatArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._declared = [[] for _ in range(self.n)]
        self._windows = [[] for _ in range(self.n)]
        self._central = self.rule.central
        self._states = [[] for _ in range(self.n)]
        self._own = np.zeros(self.n, dtype=np.float64)
        self._server = np.zeros(self.n, dtype=np.float64)
        spends, self.spends = sorted(self.spends, key=lambda s: s.occurrence), []
        for s in spends:
            self._append(s)

    def _append(self, spend: Spend) -> None:
        window = self._window(spend.day)
        for i, slot in enumerate(spend.slots.tolist()):
            self._declared[slot].append(float(spend.declared[i]))
            self._windows[slot].append(window)
            self._states[slot].append(int(spend.states[i]))
        np.add.at(self._own, spend.slots, spend.epsilon)
        np.add.at(self._server, spend.slots, spend.bound)
        self.spends.append(spend)

    def _in_window(self, day: float, which: str) -> FloatArray:
        out = np.zeros(self.n, dtype=np.float64)
        window = None if self.budget is None else self.budget.window(day)
        for s in self.spends:
            if window is None or self.budget is None or self.budget.window(s.day) == window:
                np.add.at(out, s.slots, getattr(s, which))
        return out

    def spent_in_window(self, day: float) -> FloatArray:
        """Each device's own spend in the budget window holding ``day`` (its lifetime spend for
        a lifetime budget or no budget)."""
        return self._in_window(day, "epsilon")

    def total(self) -> FloatArray:
        """Each device's cumulative spend over every occurrence, by its own rule (for a central
        protocol: the composed ε at δ of all its releases)."""
        if self._central:
            return np.array([self.rule.composed(d) for d in self._declared], dtype=np.float64)
        return self._own.copy()

    def server_total(self) -> FloatArray:
        """Each device's cumulative spend by the server's rule (its ledger keyed by device)."""
        if self._central:
            return self.total()  # the server composes the same releases
        return self._server.copy()

    def _window(self, day: float) -> int:
        return 0 if self.budget is None else self.budget.window(day)

    def _window_declared(self, slot: int, window: int) -> list[float]:
        """The ε's a device declared in budget window ``window``."""
        return [
            e for e, w in zip(self._declared[slot], self._windows[slot], strict=True) if w == window
        ]

    def _central_window(self, day: float) -> FloatArray:
        """Each device's composed ε at δ in the window holding ``day`` (central protocols)."""
        window = self._window(day)
        return np.array(
            [self.rule.composed(self._window_declared(s, window)) for s in range(self.n)],
            dtype=np.float64,
        )

    def charges(
        self,
        epsilon: FloatArray,
        states: IntArray,
        slots: IntArray | None = None,
        day: float = 0.0,
    ) -> tuple[FloatArray, FloatArray]:
        """What a new collection at ``epsilon`` in ``states`` (one per device of ``slots``, all
        by default) on ``day`` would charge each: (by the device's rule, by the server's).
        ValueError for a collection the rule does not cover. A central protocol's charge is the
        increase of the composed ε at δ of the device's releases in the window of ``day``."""
        chosen = np.arange(self.n) if slots is None else np.asarray(slots, dtype=np.int64)
        own = np.zeros(chosen.size, dtype=np.float64)
        server = np.zeros(chosen.size, dtype=np.float64)
        if self._central:
            window = self._window(day)
            for i, slot in enumerate(chosen.tolist()):
                here = self._window_declared(slot, window)
                prior = self.rule.composed(here)
                own[i] = max(self.rule.composed([*here, float(epsilon[i])]) - prior, 0.0)
            return own, own.copy()
        for i, slot in enumerate(chosen.tolist()):
            e, state = float(epsilon[i]), int(states[i])
            before, seen = self._declared[slot], self._states[slot]
            own[i] = max(self.rule.device(before, seen, e, state) - self._own[slot], 0.0)
            server[i] = max(self.rule.server(before, e) - self._server[slot], 0.0)
        return own, server

    def admits(self, day: float, epsilon: FloatArray, states: IntArray | None = None) -> BoolArray:
        """Which devices accept an occurrence on ``day`` at ``epsilon`` in ``states`` (NO_STATE
        when omitted): those whose charge fits their budget by their own rule and by the
        server's (which would refuse it otherwise)."""
        if self.budget is None:
            return np.ones(self.n, dtype=np.bool_)
        st = np.full(self.n, NO_STATE, np.int64) if states is None else np.asarray(states)
        own, server = self.charges(np.asarray(epsilon, dtype=np.float64), st, day=day)
        if self._central:  # the server composes the same releases: one check for both
            return self.budget.fits(self._central_window(day), own)
        return self.budget.fits(self.spent_in_window(day), own) & self.budget.fits(
            self._in_window(day, "bound"), server
        )

    def record(
        self,
        occurrence: int,
        day: float,
        slots: IntArray,
        declared: FloatArray,
        states: IntArray | None = None,
    ) -> Spend:
        """Charge ``slots`` for ``occurrence``, at the ``declared`` ε in ``states`` (once: a
        second record of the same occurrence is refused with ValueError); the spend recorded."""
        if any(s.occurrence == occurrence for s in self.spends):
            raise ValueError(f"occurrence {occurrence} is already in the ledger")
        if self.spends and occurrence < self.spends[-1].occurrence:
            raise ValueError(f"occurrence {occurrence} comes after those in the ledger")
        slot = np.asarray(slots, dtype=np.int64)
        eps = np.asarray(declared, dtype=np.float64)
        st = np.full(slot.size, NO_STATE, np.int64) if states is None else np.asarray(states)
        own, server = self.charges(eps, st, slot, day)
        spend = Spend(occurrence, day, slot, own, eps, st.astype(np.int64), server)
        self._append(spend)
        return spend

"""Composition of central (ε, δ) releases across a campaign's collections, with dp-accounting's
privacy-loss-distribution (PLD) accountant (docs/campaigns.md, *Central releases*).

A central protocol describes one release by ``Protocol.release_event``: a ``DpEvent`` of
``dp_accounting`` (Gaussian with its noise multiplier σ/Δ, Laplace with b/Δ, their composition,
or ``EpsilonDeltaDpEvent`` for a release known only by its (ε, δ) guarantee). This module
composes a device's releases and states their privacy loss as ε at a δ (``composed_epsilon``),
the number both the device's ledger (``fedldp.client.campaign.budget``) and the server's
(``fedldp.server.services.campaigns``) compare with the budget, so the two agree to the last
digit.

**The neighbouring relation.** Every event is stated for the release's own sensitivity Δ under
its neighbouring relation (the central protocols': one user's data replaced), so a noise
multiplier is the noise scale over Δ and the pair of output laws is N(0, σ²) against N(1, σ²)
(or the Laplace pair). That is the pair dp-accounting composes under ``ADD_OR_REMOVE_ONE``
(``GaussianDpEvent``: "standard deviation of the noise over the sensitivity"), whichever the
release's own relation: the accountant is run with it, never with ``REPLACE_ONE``, which would
double the sensitivity a second time.

**Exactness.** The PLD is *pessimistic*: each mechanism's privacy loss is rounded up to a grid
of step ``DISCRETIZATION``, so the composed ε of T releases is at least the exact one and at
most T·``DISCRETIZATION`` above it (tests/protocol/test_accounting.py checks it against Balle and
Wang's analytic Gaussian formula). An (ε₀, δ₀) event uses the worst pair of an (ε₀, δ₀)-DP
mechanism (Kairouz, Oh, Viswanath 2015: loss ±ε₀, and ∞ with probability δ₀), so their
composition is the optimal composition theorem for (ε, δ) pairs.

Importing ``dp_accounting`` takes about half a second, so only the callers that compose import
this module (lazily: a pure-ε campaign never pays it).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import attr
import dp_accounting
from dp_accounting.pld import pld_privacy_accountant, privacy_loss_distribution
from dp_accounting.pld.common import DifferentialPrivacyParameters

__all__ = [
    "DISCRETIZATION",
    "EpsilonDeltaDpEvent",
    "composed_epsilon",
    "history_event",
    "is_private",
]

DISCRETIZATION = 1e-4
"""Grid step of the privacy-loss values (dp-accounting's default): each composed release may
add at most this much to the ε reported."""


@attr.s(frozen=True, slots=True, auto_attribs=True)
class EpsilonDeltaDpEvent(dp_accounting.DpEvent):  # type: ignore[misc]
    """A release known only by its (ε, δ)-DP guarantee (the smooth-sensitivity Gaussian release
    of ``central-huber``, whose noise scale depends on the data): composed as the worst
    (ε, δ)-DP mechanism (module docstring)."""

    epsilon: float
    delta: float


class _Accountant(pld_privacy_accountant.PLDAccountant):  # type: ignore[misc]
    """dp-accounting's PLD accountant, which also composes ``EpsilonDeltaDpEvent``."""

    def _maybe_compose(
        self, event: dp_accounting.DpEvent, count: int, do_compose: bool
    ) -> object | None:
        if not isinstance(event, EpsilonDeltaDpEvent):
            error: object | None = super()._maybe_compose(event, count, do_compose)
            return error
        if do_compose:
            pld = privacy_loss_distribution.from_privacy_parameters(
                DifferentialPrivacyParameters(event.epsilon, event.delta),
                value_discretization_interval=self._value_discretization_interval,
            )
            composed: Any = getattr(self, "_pld")  # noqa: B009  # the base class sets it (untyped)
            self._pld = composed.compose(pld.self_compose(count) if count > 1 else pld)
        return None


def history_event(events: Sequence[dp_accounting.DpEvent]) -> dp_accounting.DpEvent:
    """One event for a device's releases in order: equal consecutive ones grouped as
    ``SelfComposedDpEvent`` (composition commutes; the PLD of k equal releases is then one FFT
    power, not k convolutions)."""
    groups: list[tuple[dp_accounting.DpEvent, int]] = []
    for event in sorted(events, key=repr):
        if groups and groups[-1][0] == event:
            groups[-1] = (event, groups[-1][1] + 1)
        else:
            groups.append((event, 1))
    parts = [e if k == 1 else dp_accounting.SelfComposedDpEvent(e, k) for e, k in groups]
    return parts[0] if len(parts) == 1 else dp_accounting.ComposedDpEvent(parts)


def composed_epsilon(events: Sequence[dp_accounting.DpEvent], delta: float) -> float:
    """The ε at ``delta`` of the composition of ``events`` (any order: composition commutes):
    0 for none, ∞ when one is not private or when their δ's alone exceed ``delta``. ValueError
    for a δ outside (0, 1) or an event the accountant does not know (the message names it)."""
    d = float(delta)
    if not (math.isfinite(d) and 0.0 < d < 1.0):
        raise ValueError(f"a budget's delta must lie in (0, 1), got {delta!r}")
    if not events:
        return 0.0
    event = history_event(events)
    key = (repr(event), d)  # events hold lists (unhashable); their repr is exact (float repr)
    with _LOCK:  # the server's request threads share it
        found = _CACHE.get(key)
    if found is None:
        found = _epsilon(event, d)
        with _LOCK:
            _CACHE[key] = found
            while len(_CACHE) > _CACHE_SIZE:
                del _CACHE[next(iter(_CACHE))]
    return found


_CACHE: dict[tuple[str, float], float] = {}
_LOCK = threading.Lock()
_CACHE_SIZE = 4096
"""A campaign's devices mostly share a history: each is composed once per process."""


def _epsilon(event: dp_accounting.DpEvent, delta: float) -> float:
    accountant = _Accountant(value_discretization_interval=DISCRETIZATION)
    if not accountant.supports(event):
        raise ValueError(f"dp-accounting's PLD accountant cannot compose {event!r}")
    accountant.compose(event)
    epsilon = float(accountant.get_epsilon(delta))
    return max(epsilon, 0.0) if math.isfinite(epsilon) else math.inf


def is_private(event: dp_accounting.DpEvent, delta: float) -> bool:
    """Whether one release of ``event`` has a finite ε at ``delta`` (a campaign refuses a
    protocol, or a budget δ, for which even its first release would not)."""
    return math.isfinite(composed_epsilon([event], delta))

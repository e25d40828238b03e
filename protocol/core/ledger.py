"""Per-participant ε ledgers: pure composition math (user-level-ldp.md §2.6, DESIGN "Ledger").

Composition is basic sequential composition (user-level-ldp.md §1.2 (i)): a participant that
releases messages at ε_1, ..., ε_r is (Σ ε_j)-LDP. Participants used in disjoint groups are
charged only for their own messages. The same ledger is enforced on both sides: the client
refuses to privatize past its budget, the server refuses a report that would overspend.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedldp.protocol.core.base.records import FloatArray, Plan, check_epsilons

__all__ = ["TOLERANCE", "BudgetExceededError", "Ledger", "check_plan_budget", "check_plan_fits"]

TOLERANCE = 1e-12
"""Slack for floating-point sums of charges (e.g. d charges of ε/d adding up to ε)."""


class BudgetExceededError(ValueError):
    """A charge would take a participant past its declared ε."""


@dataclass
class Ledger:
    """One participant's budget and the charges made against it, in order."""

    budget: float
    entries: list[tuple[str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.budget = float(check_epsilons(self.budget, name="budget"))

    @property
    def spent(self) -> float:
        return float(sum(e for _, e in self.entries))

    @property
    def remaining(self) -> float:
        return max(0.0, self.budget - self.spent)

    def can_spend(self, epsilon: float) -> bool:
        return self.spent + float(epsilon) <= self.budget + TOLERANCE

    def charge(self, label: str, epsilon: float) -> None:
        """Record a release at ``epsilon``; raise BudgetExceededError if it would overspend."""
        eps = float(check_epsilons(epsilon))
        if any(lbl == label for lbl, _ in self.entries):
            raise ValueError(f"{label!r} was already charged")
        if not self.can_spend(eps):
            raise BudgetExceededError(
                f"charging {eps:g} for {label!r} would exceed the budget "
                f"{self.budget:g} (spent {self.spent:g})"
            )
        self.entries.append((label, eps))


def check_plan_budget(plan: Plan, epsilon: FloatArray) -> FloatArray:
    """Total charge per participant under ``plan``; ValueError if any exceeds its declared ε."""
    eps = _declared(plan, epsilon)
    charges = plan.charges()
    for start in range(0, charges.size, _CHECKED_AT_ONCE):  # no temporaries of everyone's
        stop = min(start + _CHECKED_AT_ONCE, charges.size)
        _refuse_over(charges[start:stop], eps, start)
    return charges


def check_plan_fits(plan: Plan, epsilon: FloatArray) -> None:
    """``check_plan_budget`` without the array of every participant's charges (80 MB at 10^7
    participants, at a server's start: issue 27 item 4): the same refusals, each participant's
    charges summed in the same order (round after round), ``_CHECKED_AT_ONCE`` at a time."""
    eps = _declared(plan, epsilon)
    n = plan.n_participants
    for r in plan.rounds:  # the slots Plan.charges would index
        if r.cohort.size and (int(r.cohort[0]) < 0 or int(r.cohort[-1]) >= n):
            raise IndexError(f"round {r.index}'s cohort holds slots outside 0..{n - 1}")
    for start in range(0, n, _CHECKED_AT_ONCE):
        stop = min(start + _CHECKED_AT_ONCE, n)
        charges = np.zeros(stop - start, dtype=np.float64)
        for r in plan.rounds:  # a cohort is strictly increasing: its members in [start, stop)
            lo, hi = np.searchsorted(r.cohort, (start, stop))
            charges[r.cohort[lo:hi] - start] += r.epsilon[lo:hi]
        _refuse_over(charges, eps, start)


def _declared(plan: Plan, epsilon: FloatArray) -> FloatArray:
    """The declared ε's, one per participant, each finite and > 0 (else ValueError)."""
    eps = np.asarray(epsilon, dtype=np.float64)
    if eps.shape != (plan.n_participants,):
        check_epsilons(eps)  # a bad value is named first, as before the shape
        raise ValueError("one declared ε per participant is needed")
    for start in range(0, eps.size, _CHECKED_AT_ONCE):
        check_epsilons(eps[start : start + _CHECKED_AT_ONCE])
    return eps


def _refuse_over(charges: FloatArray, eps: FloatArray, start: int) -> None:
    """ValueError naming the first of participants ``start``.. charged beyond its ε."""
    over = charges > eps[start : start + charges.size] + TOLERANCE
    if np.any(over):
        j = int(np.flatnonzero(over)[0])
        raise ValueError(
            f"plan charges participant {start + j} ε={charges[j]:g} beyond its declared "
            f"ε={eps[start + j]:g}"
        )


_CHECKED_AT_ONCE = 1 << 20
"""Participants whose charges ``check_plan_budget`` and ``check_plan_fits`` compare at once (8 MB
of temporaries, where everyone's at once were 90 MB at 10^7 participants, at a server's start)."""

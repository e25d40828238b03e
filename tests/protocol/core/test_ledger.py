"""ε ledgers and plan budgets (protocol/core/ledger.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedldp.protocol.core.base.records import Plan, RoundPlan
from fedldp.protocol.core.ledger import BudgetExceededError, Ledger, check_plan_budget


def test_ledger_composes_by_sum_and_refuses_overspend() -> None:
    ledger = Ledger(1.0)
    for k in range(4):
        ledger.charge(f"round-{k}", 0.25)
    assert ledger.spent == pytest.approx(1.0)
    assert ledger.remaining == pytest.approx(0.0)
    with pytest.raises(BudgetExceededError):
        ledger.charge("round-4", 1e-6)
    with pytest.raises(ValueError, match="already charged"):
        ledger.charge("round-0", 0.0 + 1e-9)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_invalid_epsilon(bad: float) -> None:
    with pytest.raises(ValueError, match="finite and > 0"):
        Ledger(bad)
    with pytest.raises(ValueError, match="finite and > 0"):
        Ledger(1.0).charge("x", bad)


@given(
    st.integers(1, 30).flatmap(
        lambda d: st.tuples(st.just(d), st.floats(0.01, 100, allow_nan=False))
    )
)
def test_d_charges_of_eps_over_d_fit_the_budget(case: tuple[int, float]) -> None:
    d, eps = case
    ledger = Ledger(eps)
    for k in range(d):
        ledger.charge(f"coord-{k}", eps / d)
    assert ledger.remaining <= 1e-9


def _plan(charges: list[float]) -> Plan:
    n = len(charges)
    return Plan(
        n_participants=n,
        rounds=(
            RoundPlan(0, "a", np.arange(n), np.asarray(charges) / 2, "scalar", ()),
            RoundPlan(1, "b", np.arange(n), np.asarray(charges) / 2, "scalar", ()),
        ),
    )


def test_plan_budget() -> None:
    eps = np.array([1.0, 0.5, 2.0])
    assert np.allclose(check_plan_budget(_plan([1.0, 0.5, 2.0]), eps), eps)
    with pytest.raises(ValueError, match="participant 1"):
        check_plan_budget(_plan([1.0, 0.6, 2.0]), eps)
    with pytest.raises(ValueError, match="one declared"):
        check_plan_budget(_plan([1.0]), eps)

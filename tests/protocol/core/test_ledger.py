"""ε ledgers and plan budgets (protocol/core/ledger.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedldp.protocol.core import ledger as ledger_module
from fedldp.protocol.core.base.records import Plan, RoundPlan
from fedldp.protocol.core.ledger import (
    BudgetExceededError,
    Ledger,
    check_plan_budget,
    check_plan_fits,
)


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


def _cohorts_plan(n: int, seed: int) -> tuple[Plan, np.ndarray]:
    """Three rounds over random overlapping cohorts of n participants, at random ε's, and the
    declared ε's: each participant's charges, with one of every 7 raised past its ε."""
    rng = np.random.default_rng(seed)
    rounds = []
    for k in range(3):
        cohort = np.flatnonzero(rng.random(n) < 0.6)
        rounds.append(
            RoundPlan(k, f"r{k}", cohort, rng.uniform(0.1, 1.0, cohort.size), "scalar", ())
        )
    plan = Plan(n, tuple(rounds))
    return plan, plan.charges()


@pytest.mark.parametrize("at_once", [1, 7, 64, 1 << 20])
def test_the_check_without_everyones_charges_refuses_as_the_check_with_them(
    monkeypatch: pytest.MonkeyPatch, at_once: int
) -> None:
    monkeypatch.setattr(ledger_module, "_CHECKED_AT_ONCE", at_once)
    plan, charges = _cohorts_plan(50, 3)
    fits = np.maximum(charges, 0.05)
    assert np.array_equal(check_plan_budget(plan, fits), charges)
    check_plan_fits(plan, fits)  # each charge is summed as Plan.charges sums it: exactly fits
    for over in (0, 17, 49):  # the first overspender named, in any chunk
        declared = fits.copy()
        declared[over:] = np.nextafter(declared[over:], 0) - 2 * ledger_module.TOLERANCE
        declared = np.maximum(declared, 1e-3)
        with pytest.raises(ValueError, match="beyond its declared") as want:
            check_plan_budget(plan, declared)
        with pytest.raises(ValueError, match="beyond its declared") as got:
            check_plan_fits(plan, declared)
        assert str(got.value) == str(want.value)
    with pytest.raises(ValueError, match="one declared"):
        check_plan_fits(plan, fits[:-1])
    bad = fits.copy()
    bad[30] = np.nan
    with pytest.raises(ValueError, match="finite and > 0"):
        check_plan_fits(plan, bad)


def test_a_cohort_outside_the_participants_is_refused_by_both_checks() -> None:
    plan = Plan(3, (RoundPlan(0, "a", np.array([0, 3]), np.array([0.5, 0.5]), "scalar", ()),))
    with pytest.raises(IndexError):
        check_plan_budget(plan, np.ones(3))
    with pytest.raises(IndexError, match=r"outside 0\.\.2"):
        check_plan_fits(plan, np.ones(3))

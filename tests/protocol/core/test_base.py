"""The protocol abstraction's shared pieces (protocol/core/base.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedldp.protocol.core.base.protocol import cohort_permutation, cohort_plan, split_sizes
from fedldp.protocol.core.base.records import (
    IntArray,
    RoundPlan,
    RoundTask,
    UserData,
    check_epsilons,
    valid_payloads,
    z_quantile,
)


@pytest.mark.parametrize("bad", [0.0, -0.5, float("nan"), float("inf"), float("-inf")])
def test_check_epsilons_rejects(bad: float) -> None:
    with pytest.raises(ValueError, match="finite and > 0"):
        check_epsilons([1.0, bad, 2.0])


def test_check_epsilons_accepts() -> None:
    assert np.array_equal(check_epsilons([0.1, 5.0]), [0.1, 5.0])


def test_user_data_means_and_truncation() -> None:
    data = UserData(np.array([1.0, 3.0, 10.0, 0.0, 2.0, 4.0]), np.array([2, 1, 3]))
    assert np.allclose(data.user_means(), [2.0, 10.0, 2.0])
    short = data.truncated(2)
    assert np.array_equal(short.counts, [2, 1, 2])
    assert np.allclose(short.user_means(), [2.0, 10.0, 1.0])
    vec = UserData(np.arange(8.0).reshape(4, 2), np.array([1, 3]))
    assert np.allclose(vec.user_means(), [[0.0, 1.0], [4.0, 5.0]])


def test_user_data_validation() -> None:
    with pytest.raises(ValueError, match="at least one sample"):
        UserData(np.zeros(2), np.array([2, 0]))
    with pytest.raises(ValueError, match="add up"):
        UserData(np.zeros(3), np.array([2, 2]))


def test_round_plan_needs_sorted_cohort() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        RoundPlan(0, "r", np.array([2, 1]), np.ones(2), "scalar", ())
    with pytest.raises(ValueError, match="differ in shape"):
        RoundPlan(0, "r", np.array([1, 2]), np.ones(3), "scalar", ())


@given(st.integers(0, 10_000), st.integers(1, 50))
def test_split_sizes_are_balanced(n: int, parts: int) -> None:
    sizes = split_sizes(n, parts)
    assert sizes.sum() == n
    assert sizes.max() - sizes.min() <= 1


def test_cohort_permutation_is_public_and_seeded() -> None:
    a = cohort_permutation(1000, 5)
    assert np.array_equal(np.sort(a), np.arange(1000))
    assert np.array_equal(a, cohort_permutation(1000, 5))
    assert not np.array_equal(a, cohort_permutation(1000, 6))
    assert not np.array_equal(a, cohort_permutation(1000, 5, 1))


def test_valid_payloads_flags_non_finite_and_shape() -> None:
    task = RoundTask(0, "r", {}, "vector", (2,))
    ok = valid_payloads(task, np.array([[1.0, 2.0], [np.nan, 0.0], [np.inf, 1.0]]))
    assert ok.tolist() == [True, False, False]
    with pytest.raises(ValueError, match="shape"):
        valid_payloads(task, np.zeros((2, 3)))


def test_z_quantile() -> None:
    assert z_quantile(0.95) == pytest.approx(1.959964, abs=1e-6)
    with pytest.raises(ValueError, match="level"):
        z_quantile(1.0)


def test_cohort_plan_of_one_round_has_everyone_at_their_own_epsilon() -> None:
    eps = np.array([0.5, 1.0, 2.0])
    plan = cohort_plan(eps, 7, payload_kind="vector", payload_shape=(4,), public={"k": 4})
    (only,) = plan.rounds
    assert (only.index, only.name, only.payload_kind, only.payload_shape) == (
        0,
        "report",
        "vector",
        (4,),
    )
    assert only.cohort.tolist() == [0, 1, 2]
    assert only.epsilon.tolist() == eps.tolist()
    assert plan.public == {"k": 4}
    assert plan.charges().tolist() == eps.tolist()


@given(n=st.integers(1, 200), rounds=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_cohort_plan_splits_everyone_once_into_public_cohorts(
    n: int, rounds: int, seed: int
) -> None:
    if n < rounds:
        with pytest.raises(ValueError, match=f"at least {rounds} participants, got {n}"):
            cohort_plan(np.ones(n), seed, rounds=rounds)
        return
    eps = np.linspace(0.5, 2.0, n)
    plan = cohort_plan(eps, seed, rounds=rounds, name="r")
    again = cohort_plan(eps, seed, rounds=rounds, name="r")  # deterministic given the seed
    assert all(
        np.array_equal(a.cohort, b.cohort) for a, b in zip(plan.rounds, again.rounds, strict=True)
    )
    slots = np.concatenate([r.cohort for r in plan.rounds])
    assert sorted(slots.tolist()) == list(range(n))  # everyone exactly once
    sizes = [r.cohort.size for r in plan.rounds]
    assert max(sizes) - min(sizes) <= 1
    assert np.array_equal(plan.charges(), eps)  # each charged its own ε, once
    names = [r.name for r in plan.rounds]
    assert names == (["r"] if rounds == 1 else [f"r-{j}" for j in range(rounds)])
    if rounds > 1:  # the cohorts are the study seed's public permutation, cut in order
        perm = cohort_permutation(n, seed)
        assert plan.rounds[0].cohort.tolist() == sorted(perm[: sizes[0]].tolist())


def test_cohort_plan_refuses_bad_epsilons() -> None:
    with pytest.raises(ValueError, match="finite and > 0"):
        cohort_plan(np.array([1.0, 0.0]), 0)


@pytest.mark.parametrize("group", [None, np.array([3, 0, 1, 2, 1])])
def test_groups_at_is_groups_indexed(group: IntArray | None) -> None:
    rp = RoundPlan(0, "r", np.array([1, 4, 5, 9, 12]), np.ones(5), "scalar", (), group=group)
    for positions in (np.array([], dtype=np.int64), np.array([0, 4, 2]), np.arange(5)):
        got = rp.groups_at(positions)
        assert got.dtype == np.int64
        assert got.tolist() == rp.groups()[positions].tolist()

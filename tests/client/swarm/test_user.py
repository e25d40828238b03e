"""Simulated users (client/swarm/user.py): own streams, own ledgers, and blocks equal to lone
users."""

from __future__ import annotations

import numpy as np
import pytest

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.swarm.user import Privatizer, SimulatedUser, UserBlock
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.base.records import JSON, RoundPlan
from fedldp.protocol.core.ledger import BudgetExceededError
from fedldp.protocol.core.wire import HistogramPayload, ScalarPayload, TaskReport, payload_row

SEED = 11
N = 40
PROTOCOL = get_protocol("user-mean")
PARAMS = PROTOCOL.parse_params({"samples_per_user": 16})
STAGE_ONE_OUTPUT: JSON = {"L": -0.5, "R": 0.5, "lo": -0.7, "hi": 0.7}


def make_privatizer(epsilon: float = 1.0) -> Privatizer:
    spec = PopulationSpec(users=N, samples=16, distribution="two-point", mean=0.3, epsilon=epsilon)
    population = build_population(spec, SEED)
    return Privatizer(PROTOCOL, PARAMS, population, population.population_seed)


def report_tasks(privatizer: Privatizer, index: int) -> tuple[RoundPlan, list[TaskReport]]:
    """The tasks the server would hand out for round ``index`` of a user-mean plan."""
    population = privatizer.population
    assert hasattr(population, "epsilon")
    plan = PROTOCOL.plan(PARAMS, population.epsilon, {}, SEED)
    outputs = [STAGE_ONE_OUTPUT] if index == 1 else []
    broadcast = PROTOCOL.broadcast(PARAMS, plan, index, outputs)
    rp = plan.rounds[index]
    tasks = [
        TaskReport(
            round=rp.index,
            name=rp.name,
            broadcast=broadcast,
            payload_kind=rp.payload_kind,
            payload_shape=list(rp.payload_shape),
            group=int(g),
            epsilon=float(e),
            deadline=None,
        )
        for e, g in zip(rp.epsilon, rp.groups(), strict=True)
    ]
    return rp, tasks


@pytest.mark.parametrize("index", [0, 1])
def test_a_block_answers_bit_for_bit_like_its_users_one_by_one(index: int) -> None:
    privatizer = make_privatizer()
    rp, tasks = report_tasks(privatizer, index)
    lone = np.stack(
        [
            payload_row(SimulatedUser(int(slot), 1.0, privatizer).respond(task))
            for slot, task in zip(rp.cohort, tasks, strict=True)
        ]
    )
    block = UserBlock(np.arange(N), np.ones(N), privatizer)
    eps = np.array([t.epsilon for t in tasks])
    groups = np.array([t.group for t in tasks], dtype=np.int64)
    rows = block.respond(tasks[0], rp.cohort, eps, groups)
    assert np.array_equal(rows, lone)
    # ... and a different block split gives the same rows again
    half = UserBlock(np.arange(N // 2, N), np.ones(N - N // 2), privatizer)
    upper = rp.cohort >= N // 2
    tail = half.respond(tasks[0], rp.cohort[upper] - N // 2, eps[upper], groups[upper])
    assert np.array_equal(tail, lone[upper])
    assert rows.shape == (rp.cohort.size, max(1, int(np.prod(rp.payload_shape))))


def test_payload_kinds_follow_the_task() -> None:
    privatizer = make_privatizer()
    (rp0, tasks0), (rp1, tasks1) = report_tasks(privatizer, 0), report_tasks(privatizer, 1)
    first = SimulatedUser(int(rp0.cohort[0]), 1.0, privatizer).respond(tasks0[0])
    second = SimulatedUser(int(rp1.cohort[0]), 1.0, privatizer).respond(tasks1[0])
    assert isinstance(first, HistogramPayload)
    assert len(first.values) == rp0.payload_shape[0]
    assert isinstance(second, ScalarPayload)


def test_users_draw_from_their_own_streams() -> None:
    privatizer = make_privatizer()
    rp, tasks = report_tasks(privatizer, 1)
    a = SimulatedUser(int(rp.cohort[0]), 1.0, privatizer).respond(tasks[0])
    b = SimulatedUser(int(rp.cohort[1]), 1.0, privatizer).respond(tasks[0])
    assert payload_row(a) != payload_row(b)


def test_a_user_answers_a_round_once_and_is_charged_once() -> None:
    privatizer = make_privatizer()
    rp, tasks = report_tasks(privatizer, 1)
    user = SimulatedUser(int(rp.cohort[0]), 1.0, privatizer)
    first = user.respond(tasks[0])
    assert user.respond(tasks[0]) is first
    assert user.ledger.spent == pytest.approx(1.0)
    assert len(user.ledger.entries) == 1


def test_a_user_refuses_to_privatize_past_its_budget() -> None:
    privatizer = make_privatizer()
    rp, tasks = report_tasks(privatizer, 0)
    user = SimulatedUser(int(rp.cohort[0]), 0.5, privatizer)  # declared 0.5, asked for 1.0
    with pytest.raises(BudgetExceededError, match="charges ε=1"):
        user.respond(tasks[0])
    assert user.ledger.spent == 0.0
    # two rounds at 0.3 each fit a budget of 0.6 but not of 0.5
    cheap = [t.model_copy(update={"epsilon": 0.3}) for t in tasks[:1]]
    user.respond(cheap[0])
    later = cheap[0].model_copy(update={"round": 1})
    with pytest.raises(BudgetExceededError):
        user.respond(later)
    assert user.ledger.spent == pytest.approx(0.3)


def test_a_block_refuses_as_a_whole_and_charges_nothing() -> None:
    privatizer = make_privatizer()
    rp, tasks = report_tasks(privatizer, 0)
    budget = np.ones(N)
    budget[rp.cohort[3]] = 0.9  # one member declared less than the round charges
    block = UserBlock(np.arange(N), budget, privatizer)
    eps = np.array([t.epsilon for t in tasks])
    groups = np.array([t.group for t in tasks], dtype=np.int64)
    with pytest.raises(BudgetExceededError, match=f"participant {rp.cohort[3]}"):
        block.respond(tasks[0], rp.cohort, eps, groups)
    assert not block.spent.any()
    ok = rp.cohort != rp.cohort[3]
    block.respond(tasks[0], rp.cohort[ok], eps[ok], groups[ok])
    # a second answer to the same round (a retry) is not a second charge
    block.respond(tasks[0], rp.cohort[ok], eps[ok], groups[ok])
    assert np.array_equal(block.spent[rp.cohort[ok]], np.ones(int(ok.sum())))


def test_a_block_needs_one_charge_and_group_per_user() -> None:
    privatizer = make_privatizer()
    _, tasks = report_tasks(privatizer, 0)
    block = UserBlock(np.arange(N), np.ones(N), privatizer)
    with pytest.raises(ValueError, match="one ε charge"):
        block.respond(tasks[0], np.array([0, 1]), np.ones(3), np.zeros(2, dtype=np.int64))

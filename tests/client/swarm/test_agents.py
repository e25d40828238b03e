"""The swarm's work loops (client/swarm/agents.py): pieces that need no server.

The loops themselves run against the real app in tests/client/swarm/test_swarm.py and against a real
server process in tests/e2e/test_e2e.py.
"""

from __future__ import annotations

import pickle
import random

import httpx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedldp.client.api.client import ApiClient, PhaseError
from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population
from fedldp.client.swarm.agents import Roster, SwarmError, WaitPolicy, drive, first_error
from fedldp.client.swarm.user import Privatizer
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import BlockToken, Credentials, RoundTasks, TaskBatch


@given(
    hint=st.floats(0.0, 30.0),
    waits=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_waits_follow_the_hint_grow_and_stay_bounded(hint: float, waits: int, seed: int) -> None:
    policy = WaitPolicy(min_delay=0.05, max_delay=2.0)
    delay = policy.delay(hint, waits, random.Random(seed))
    step = min(2.0, max(0.05, hint) * 1.5 ** (waits - 1))
    assert step / 2 <= delay <= step
    assert delay <= policy.max_delay


def test_roster_parts_are_contiguous_slices() -> None:
    roster = Roster(np.arange(10), list(range(10)), [f"t{i}" for i in range(10)], np.ones(10))
    part = roster.part(3, 7)
    assert part.slots.tolist() == [3, 4, 5, 6]
    assert part.participant_ids.tolist() == [3, 4, 5, 6]
    assert part.tokens == ["t3", "t4", "t5", "t6"]
    assert len(part) == 4
    assert part.positions([6, 3, 5]).tolist() == [3, 0, 2]
    assert part.positions([]).tolist() == []
    shuffled = Roster(np.arange(3), [10, 2, 7], ["a", "b", "c"], np.ones(3))
    assert shuffled.positions([7, 10, 2]).tolist() == [2, 0, 1]
    with pytest.raises(SwarmError, match="did not ask"):
        part.positions([3, 7])
    with pytest.raises(ValueError, match="one id, token"):
        Roster(np.arange(3), [0, 1], ["a", "b", "c"], np.ones(3))


def test_block_tokens_stand_in_for_tokens_where_they_cover_the_roster() -> None:
    low, high = BlockToken(start=0, stop=5, token="b0"), BlockToken(start=5, stop=10, token="b1")
    tokens = [f"t{i}" for i in range(10)]
    roster = Roster(np.arange(10), list(range(10)), tokens, np.ones(10), (low, high))
    assert roster.credentials(np.array([0, 1])) == Credentials(blocks=[low])
    assert roster.credentials(np.array([4, 5])) == Credentials(blocks=[low, high])
    part = roster.part(6, 9)
    assert part.blocks == (high,)
    assert part.credentials(np.array([0, 2])) == Credentials(blocks=[high])
    uncovered = Roster(np.arange(10), list(range(10)), tokens, np.ones(10), (low,))
    assert uncovered.credentials(np.array([0, 1])) == Credentials(tokens=["t0", "t1"])
    assert uncovered.part(0, 5).credentials(np.array([1])) == Credentials(blocks=[low])
    assert pickle.loads(pickle.dumps(roster.part(0, 10))).blocks == (low, high)
    blocks_only = Roster(np.arange(10), list(range(10)), [], np.ones(10), (low, high))
    assert blocks_only.part(2, 4).credentials(np.array([1])) == Credentials(blocks=[low])
    with pytest.raises(ValueError, match="one id, token"):
        Roster(np.arange(10), list(range(10)), [], np.ones(10), (low,))


async def test_single_participant_agents_need_each_token() -> None:
    block = BlockToken(start=0, stop=4, token="b")
    roster = Roster(np.arange(4), list(range(4)), [], np.ones(4), (block,))
    population = build_population(PopulationSpec(users=4, samples=2), seed=3)
    protocol = get_protocol("hetero-mean-laplace")
    params = protocol.parse_params(fill_from_population(protocol, {}, population))
    privatizer = Privatizer(protocol, params, population, population.population_seed)
    async with ApiClient("http://fedldp.test") as api:
        with pytest.raises(ValueError, match="each participant's token"):
            await drive(api, "s", roster, privatizer, batch=None, concurrency=1)


def test_the_first_failure_is_unwrapped_from_task_groups() -> None:
    inner = SwarmError("study_failed", "why")
    nested = BaseExceptionGroup("outer", [ExceptionGroup("inner", [inner]), ValueError("x")])
    assert first_error(nested) is inner


@pytest.mark.parametrize(
    "error", [SwarmError("study_cancelled", "by admin", True), PhaseError("round_closed", "x", 409)]
)
def test_errors_cross_process_boundaries(error: Exception) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert vars(back) == vars(error)
    assert str(back) == str(error)


@pytest.mark.parametrize(("code", "late"), [("round_closed", True), ("study_not_running", False)])
async def test_a_block_whose_round_closed_first_is_late_not_failed(code: str, late: bool) -> None:
    """A batch refused whole because its round closed (at the deadline, or completed by this
    very batch's first send when a lost answer made the block resend it) is late, like a single
    report; any other refusal still stops the swarm."""
    population = build_population(PopulationSpec(users=4, samples=2), seed=3)
    protocol = get_protocol("hetero-mean-laplace")
    params = protocol.parse_params(fill_from_population(protocol, {}, population))
    tasks = RoundTasks(
        round=0,
        name="mean",
        broadcast={"lo": -1.0, "hi": 1.0},
        payload_kind="scalar",
        payload_shape=[],
        deadline=None,
        participant_ids=[0, 1, 2, 3],
        groups=[0] * 4,
        epsilons=[1.0] * 4,
    )
    asked: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path.rsplit("/", 1)[-1])
        if request.url.path.endswith("/tasks"):
            first = asked.count("tasks") == 1
            answer = (
                TaskBatch(phase="running", reports=[tasks])
                if first
                else TaskBatch(phase="running", done=[0, 1, 2, 3])
            )
            return httpx.Response(200, content=answer.model_dump_json())
        return httpx.Response(409, json={"code": code, "detail": "too late"})

    roster = Roster(np.arange(4), list(range(4)), [f"t{i}" for i in range(4)], np.ones(4))
    privatizer = Privatizer(protocol, params, population, population.population_seed)
    async with ApiClient("http://fedldp.test", transport=httpx.MockTransport(server)) as api:
        if not late:
            with pytest.raises(PhaseError) as refused:
                await drive(api, "s", roster, privatizer, batch=4, concurrency=1)
            assert refused.value.code == code
            return
        stats = await drive(api, "s", roster, privatizer, batch=4, concurrency=1)
    assert asked == ["tasks", "batch", "tasks"]
    assert (stats.reports, stats.late, stats.report_requests) == (0, 4, 1)

"""The swarm's work loops (client/swarm/agents.py): pieces that need no server.

The loops themselves run against the real app in tests/client/swarm/test_swarm.py and against a real
server process in tests/e2e/test_e2e.py.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import random
import threading
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedldp.client.api.client import ApiClient, PhaseError
from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population
from fedldp.client.swarm.agents import (
    DriveStats,
    Roster,
    SwarmError,
    WaitPolicy,
    drive,
    first_error,
)
from fedldp.client.swarm.driving import MAX_THREADS, checked_threads
from fedldp.client.swarm.user import Privatizer, UserBlock
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import (
    BatchReceipt,
    BlockToken,
    Credentials,
    RoundTasks,
    TaskBatch,
)
from fedldp.server.web.binary import decode_batch


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


def mean_tasks(ids: list[int], charge: float = 1.0) -> RoundTasks:
    """Round 0 of a hetero-mean study for ``ids``, each charged ``charge``."""
    return RoundTasks(
        round=0,
        name="mean",
        broadcast={"lo": -1.0, "hi": 1.0},
        payload_kind="scalar",
        payload_shape=[],
        deadline=None,
        participant_ids=ids,
        groups=[0] * len(ids),
        epsilons=[charge] * len(ids),
    )


@pytest.mark.parametrize(("code", "late"), [("round_closed", True), ("study_not_running", False)])
async def test_a_block_whose_round_closed_first_is_late_not_failed(code: str, late: bool) -> None:
    """A batch refused whole because its round closed (at the deadline, or completed by this
    very batch's first send when a lost answer made the block resend it) is late, like a single
    report; any other refusal still stops the swarm."""
    population = build_population(PopulationSpec(users=4, samples=2), seed=3)
    protocol = get_protocol("hetero-mean-laplace")
    params = protocol.parse_params(fill_from_population(protocol, {}, population))
    tasks = mean_tasks([0, 1, 2, 3])
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


class FakeServer:
    """A study of one round over ``users`` users, answered by hand (``httpx.MockTransport``):
    every user's report task at ε ``charge`` on its first ask, "done" after; each batch's
    payload rows are kept by participant id. Counts the requests in flight that go through the
    swarm's gate (first asks and reports), the most at once, and each ask's ``hold``."""

    def __init__(self, users: int, charge: float = 1.0, quiet_s: float = 0.0) -> None:
        self.users, self.charge = users, charge
        self.quiet_s = quiet_s  # held asks are told to wait this long after the first one
        self.quiet_until: float | None = None
        self.told_to_wait = 0
        self.asked: set[int] = set()
        self.holds: list[tuple[bool, str | None]] = []  # (a block's first ask, its hold)
        self.rows: dict[int, float] = {}
        self.gated = self.most = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body, _ = decode_batch(request.content, values=10**6)
        ids = [int(i) for i in body["participant_ids"]]
        first = request.url.path.endswith("/tasks") and ids[0] not in self.asked
        gated = first or request.url.path.endswith("/batch")
        self.gated += gated
        self.most = max(self.most, self.gated)
        await asyncio.sleep(0.01)  # the others get to send theirs meanwhile
        self.gated -= gated
        if request.url.path.endswith("/batch"):
            self.rows.update(zip(ids, np.ravel(body["payloads"]).tolist(), strict=True))
            receipt = BatchReceipt(round=0, accepted=len(ids), duplicates=0, rejected=0, items=[])
            return httpx.Response(200, content=receipt.model_dump_json())
        self.holds.append((first, request.url.params.get("hold")))
        if not first:
            now = asyncio.get_running_loop().time()
            if self.quiet_until is None:
                self.quiet_until = now + self.quiet_s
            if now < self.quiet_until:  # a held poll that found the study had not moved on
                await asyncio.sleep(0.05)
                self.told_to_wait += 1
                wait = TaskBatch(phase="running", waiting=ids, wait_reason="round 0 is in progress")
                return httpx.Response(200, content=wait.model_dump_json())
            done = TaskBatch(phase="finished", done=ids)
            return httpx.Response(200, content=done.model_dump_json())
        self.asked.update(ids)
        tasks = mean_tasks(ids, self.charge)
        return httpx.Response(
            200, content=TaskBatch(phase="running", reports=[tasks]).model_dump_json()
        )


async def drive_fake(server: FakeServer, **options: Any) -> DriveStats:
    n = server.users
    population = build_population(PopulationSpec(users=n, samples=4), seed=3)
    protocol = get_protocol("hetero-mean-laplace")
    params = protocol.parse_params(fill_from_population(protocol, {}, population))
    roster = Roster(np.arange(n), list(range(n)), [f"t{i}" for i in range(n)], np.ones(n))
    privatizer = Privatizer(protocol, params, population, population.population_seed)
    async with ApiClient("http://fedldp.test", transport=httpx.MockTransport(server)) as api:
        return await drive(api, "s", roster, privatizer, **options)


async def test_a_block_s_first_ask_waits_for_the_gate_and_is_answered_at_once() -> None:
    """At the start every block asks for its tasks: those first asks go through the gate (after
    the reports waiting for it) and are not held, so that the server works out a few answers at
    a time and the blocks it answered get their reports in; a block's later asks are held
    polls, outside the gate."""
    server = FakeServer(users=12)
    stats = await drive_fake(server, batch=2, concurrency=2)
    assert stats.reports == 12
    assert server.most == 2  # never more first asks and reports in flight than the gate's 2
    assert sorted(server.holds) == [(False, "10")] * 6 + [(True, None)] * 6


@pytest.mark.parametrize("threads", [1, 3])
async def test_blocks_are_privatized_on_threads_of_their_own(
    threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``threads`` > 1: each block's privatization runs on one of the swarm's threads (the event
    loop goes on meanwhile); the payloads are the same, bit for bit, on whichever thread."""
    where: list[str] = []
    respond = UserBlock.respond

    def spy(self: UserBlock, *args: Any) -> Any:
        where.append(threading.current_thread().name)
        return respond(self, *args)

    monkeypatch.setattr(UserBlock, "respond", spy)
    server = FakeServer(users=12)
    await drive_fake(server, batch=3, concurrency=4, threads=threads)
    alone = FakeServer(users=12)
    monkeypatch.setattr(UserBlock, "respond", respond)
    await drive_fake(alone, batch=12, concurrency=1, threads=1)
    assert server.rows == alone.rows  # the same payload for every user
    assert len(where) == 4
    if threads == 1:
        assert set(where) == {threading.current_thread().name}
    else:
        assert all(name.startswith("fedldp-privatize") for name in where)


async def test_an_overspend_found_on_a_thread_stops_the_swarm() -> None:
    server = FakeServer(users=4, charge=2.0)  # each user declared ε = 1
    with pytest.raises(SwarmError) as refused:
        await drive_fake(server, batch=2, concurrency=2, threads=2)
    assert refused.value.code == "budget_exceeded"
    assert server.rows == {}  # nothing privatized was sent


def test_threads_apply_to_batch_mode_and_number_at_least_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert checked_threads(None, 100) == MAX_THREADS
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert checked_threads(None, 100) == 1
    assert checked_threads(None, None) == 1  # one agent per user
    assert checked_threads(6, 100) == 6
    with pytest.raises(ValueError, match="threads must be >= 1"):
        checked_threads(0, 100)
    with pytest.raises(ValueError, match="batch mode"):
        checked_threads(2, None)


async def test_blocks_told_to_wait_let_one_held_poll_watch_for_them() -> None:
    """Held polls that come back "wait" (the study has not moved on) are asked again by one
    block at a time, not by every block (``Quiet``): at 10^7 users a thousand blocks asking
    again every ten seconds were most of the server's work in stage one."""
    server = FakeServer(users=40, quiet_s=0.6)
    waits = WaitPolicy(min_delay=0.01, max_delay=0.01)
    # a block left waiting with nobody polling for it would wait forever
    stats = await asyncio.wait_for(drive_fake(server, batch=4, concurrency=4, waits=waits), 30)
    blocks = 10
    assert stats.reports == 40
    # every block polls once it has reported, then one at a time, ~0.06 s each, through the
    # rest of the 0.6 s: every block asking again after each answer would be ten times as many
    assert 0 < server.told_to_wait <= blocks + 2 * 0.6 / 0.05
    assert stats.task_requests == blocks * 2 + server.told_to_wait  # first, watched, last asks

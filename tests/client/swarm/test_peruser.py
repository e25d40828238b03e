"""The per-user swarm's scheduling (client/swarm/peruser.py and the gate of
client/swarm/driving.py): reports go before task requests, one vectorised privatization per round
equals the users' own, and a user asks no more than its rounds need.

The per-user swarm's estimates against the simulator's are in tests/client/swarm/test_swarm.py
(in process) and tests/e2e/test_e2e.py (a real server).
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.client.swarm.driving import TASK_HOLD_S, Gate
from fedldp.client.swarm.peruser import HOLDERS, _Cohorts
from fedldp.client.swarm.roster import Roster
from fedldp.client.swarm.run import run_swarm
from fedldp.client.swarm.user import SimulatedUser
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import payload_row
from fedldp.server.runtime.context import Context
from fedldp.server.settings import Settings
from fedldp.server.web.app import create_app
from tests.client.swarm.test_user import make_privatizer, report_tasks


async def test_the_gate_bounds_requests_and_lets_reports_in_first() -> None:
    gate = Gate(2)
    await gate.enter()
    await gate.enter()
    order: list[str] = []

    async def enter(name: str, urgent: bool) -> None:
        await gate.enter(urgent=urgent)
        order.append(name)

    waiting = [
        asyncio.create_task(enter("task 1", False)),
        asyncio.create_task(enter("task 2", False)),
        asyncio.create_task(enter("report", True)),
    ]
    await asyncio.sleep(0)
    assert order == []  # both slots are taken
    gate.leave()
    await asyncio.sleep(0)
    assert order == ["report"]  # queued last, let in first
    gate.leave()
    gate.leave()
    await asyncio.gather(*waiting)
    assert order == ["report", "task 1", "task 2"]
    assert gate.free == 0
    gate.leave()
    gate.leave()
    assert gate.free == 2


async def test_a_cancelled_waiter_passes_its_slot_on() -> None:
    gate = Gate(1)
    await gate.enter()
    cancelled = asyncio.create_task(gate.enter())
    after = asyncio.create_task(gate.enter())
    await asyncio.sleep(0)
    gate.leave()  # hands the slot to the first waiter ...
    cancelled.cancel()  # ... which is cancelled before it runs: the slot goes on
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    await asyncio.wait_for(after, 1.0)
    gate.leave()
    assert gate.free == 1


@pytest.mark.parametrize("index", [0, 1])
async def test_one_privatization_per_round_equals_each_users_own(index: int) -> None:
    privatizer = make_privatizer()
    rp, tasks = report_tasks(privatizer, index)
    n = len(privatizer.population.epsilon)  # type: ignore[attr-defined]
    roster = Roster(
        np.arange(n), list(range(n)), [f"t{i}" for i in range(n)], np.ones(n, dtype=np.float64)
    )
    cohorts = _Cohorts(roster, privatizer)
    calls = 0
    respond = cohorts.block.respond

    def counted(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        return respond(*args)

    cohorts.block.respond = counted  # type: ignore[method-assign,assignment]
    rows = await asyncio.gather(
        *(cohorts.payload(int(slot), task) for slot, task in zip(rp.cohort, tasks, strict=True))
    )
    lone = [
        payload_row(SimulatedUser(int(slot), 1.0, privatizer).respond(task))
        for slot, task in zip(rp.cohort, tasks, strict=True)
    ]
    np.testing.assert_array_equal(np.stack(rows), np.stack(lone))  # bit for bit
    assert calls == 1


async def test_a_round_with_another_broadcast_is_privatized_apart() -> None:
    privatizer = make_privatizer()
    rp, tasks = report_tasks(privatizer, 1)
    n = len(privatizer.population.epsilon)  # type: ignore[attr-defined]
    roster = Roster(np.arange(n), list(range(n)), [f"t{i}" for i in range(n)], np.ones(n))
    cohorts = _Cohorts(roster, privatizer)
    other = tasks[1].model_copy(update={"broadcast": {**tasks[1].broadcast, "L": -0.25}})
    first, second = await asyncio.gather(
        cohorts.payload(int(rp.cohort[0]), tasks[0]), cohorts.payload(int(rp.cohort[1]), other)
    )
    for row, slot, task in ((first, rp.cohort[0], tasks[0]), (second, rp.cohort[1], other)):
        alone = SimulatedUser(int(slot), 1.0, privatizer).respond(task)
        assert np.array_equal(row, payload_row(alone))


@pytest.mark.parametrize(
    ("protocol", "users"), [("baseline-clipped-laplace", 300), ("user-mean", 700)]
)
async def test_each_user_asks_once_per_round_and_stops_after_its_last_report(
    tmp_path: Path, protocol: str, users: int
) -> None:
    """One task request and one report per user and round (the last report task says it is the
    last: no request to learn "done"); a user told to wait asks once more when the study has
    moved on, not once per poll. The estimate is the simulator's."""
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'peruser.db'}"))
    spec = PopulationSpec(users=users, samples=16, distribution="two-point", mean=0.3)
    population = build_population(spec, 5)
    p = get_protocol(protocol)
    params = fill_from_population(p, {}, population)
    try:
        run = await run_swarm(
            "http://fedldp.test",
            population=population,
            create=(protocol, params),
            progress=False,
            transport=httpx.ASGITransport(app=app),
        )
    finally:
        ctx: Context = app.state.ctx
        ctx.db.dispose()
    local = simulate(p, p.parse_params(params), population, 5).result.estimate
    remote = np.asarray(run.result.estimate, dtype=np.float64)
    np.testing.assert_allclose(remote, np.asarray(local, dtype=np.float64), rtol=1e-9)
    stats = run.stats
    assert stats.report_requests == stats.reports == users
    assert stats.task_requests == users + stats.waits
    later = sum(r.expected for r in run.study.rounds[1:])  # users whose round is not the first
    # at most once each (held or parked, never polling), plus each holder's wait when its hold
    # ran out before the study moved on (once per TASK_HOLD_S)
    expired = HOLDERS * math.ceil(run.elapsed_s / TASK_HOLD_S)
    assert stats.waits <= later + expired
    if protocol == "baseline-clipped-laplace":
        assert stats.waits == 0
    assert later > HOLDERS or protocol == "baseline-clipped-laplace"

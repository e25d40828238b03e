"""Lease sizes of swarms sharing a study (``enroll_leases`` in client/swarm/enrolling.py), against
the real app in process: a swarm leases 1/``LEASE_SHARES`` of the population at a time, so that
swarms started together each get a share (issue 23: with blocks of ``ENROLL_CHUNK`` ids, one of
three compose swarms leased a population of 20,000 in two requests and ran it alone).
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.client.swarm.enrolling import ENROLL_CHUNK, LEASE_SHARES
from fedldp.client.swarm.run import run_swarm
from fedldp.protocol.catalogue import get_protocol
from fedldp.server.settings import Settings
from fedldp.server.web.app import create_app

URL = "http://fedldp.test"
REL = 1e-9  # the swarm's estimate equals the simulator's up to the grouping of sums


class LeaseRecording(httpx.ASGITransport):
    """The app in process, remembering the size each lease request asked for and the blocks
    of participant ids granted."""

    def __init__(self, app: FastAPI) -> None:
        super().__init__(app=app)
        self.asked: list[int] = []
        self.granted: list[tuple[int, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if request.url.path.endswith("/leases"):
            self.asked.append(json.loads(await request.aread())["size"])
            if response.status_code == 201:
                lease = json.loads(await response.aread())
                self.granted.append((lease["start"], lease["stop"]))
        return response


async def test_swarms_started_together_lease_a_share_of_the_population_at_a_time(
    tmp_path: Path,
) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'leases.db'}"))
    users = 5000
    spec = PopulationSpec(users=users, samples=4, distribution="two-point", mean=0.3)
    protocol = get_protocol("user-mean")
    population = build_population(spec, 9)
    params = fill_from_population(protocol, {}, population)
    transport = LeaseRecording(app)

    async def one_swarm() -> Any:
        return await run_swarm(
            URL,
            population=spec,
            seed=9,
            create=("user-mean", params),
            progress=False,
            transport=transport,
            batch=1000,
            name="shared",
            lease=True,
        )

    try:
        runs = await asyncio.gather(one_swarm(), one_swarm())
    finally:
        app.state.ctx.db.dispose()

    size = math.ceil(users / LEASE_SHARES)
    assert size < ENROLL_CHUNK  # the population is one ENROLL_CHUNK: it used to be one lease
    assert set(transport.asked) == {size}
    # the blocks tile the population, LEASE_SHARES of them, each leased once
    assert sorted(transport.granted) == [
        (start, min(start + size, users)) for start in range(0, users, size)
    ]
    assert len(transport.granted) == LEASE_SHARES
    served = [run.to_dict()["users_served"] for run in runs]
    assert sum(served) == users
    assert min(served) > 0, f"one swarm ran every user: {served}"
    expected = simulate(protocol, protocol.parse_params(params), population, 9).result.estimate
    for run in runs:
        assert run.result.estimate == pytest.approx(expected, rel=REL)

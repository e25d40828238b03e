"""Live event streams (issue 12) on two real server processes sharing one SQLite file, while a
real swarm runs: a watcher that disconnects from one replica and resumes on the other with
``Last-Event-ID`` sees every stored event exactly once, in order, and both replicas serve the
same sequence afterwards."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedldp.client.api.client import ApiClient
from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population
from fedldp.client.swarm.run import SwarmResult, run_swarm_sync
from fedldp.client.swarm.server_process import ServerProcess, sqlite_url
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import StudyCreate, StudyEvent

pytestmark = pytest.mark.e2e

SPEC = PopulationSpec(users=1200, samples=8, distribution="two-point", mean=0.3)
SEED = 5


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    url = sqlite_url(tmp_path / "fedldp.db")
    a = ServerProcess(database_url=url, log=tmp_path / "a.log")
    b = ServerProcess(database_url=url, log=tmp_path / "b.log")
    try:
        for process in (a, b):
            process.start()
        for process in (a, b):
            process.wait_healthy()
        yield a, b
    finally:
        for process in (a, b):
            process.stop()


async def stored(url: str, study_id: str, after: int = 0) -> list[StudyEvent]:
    async with ApiClient(url) as api:
        return [e async for e in api.events(study_id, after=after) if e.id is not None]


async def test_a_watcher_resumes_on_another_replica_without_loss_or_repeats(
    replicas: tuple[ServerProcess, ServerProcess],
) -> None:
    a, b = replicas
    protocol = get_protocol("user-mean")
    params = fill_from_population(protocol, {}, build_population(SPEC, SEED))
    async with ApiClient(a.url) as api:
        study = await api.create_study(StudyCreate(protocol="user-mean", params=params, seed=SEED))
    outcome: list[SwarmResult | BaseException] = []

    def swarm() -> None:
        try:
            outcome.append(
                run_swarm_sync(
                    b.url, population=SPEC, seed=SEED, study_id=study.id, batch=100, progress=False
                )
            )
        except BaseException as exc:
            outcome.append(exc)

    seen: list[StudyEvent] = []
    async with ApiClient(a.url) as api:
        async for event in api.events(study.id):
            seen.append(event)
            if event.id == 1:
                break  # disconnect from replica a before anything ran
    thread = threading.Thread(target=swarm, daemon=True)
    thread.start()
    try:
        async with ApiClient(b.url) as api:
            async for event in api.events(study.id, after=1):
                seen.append(event)
                if event.kind == "round_opened":
                    break  # disconnect from replica b in the middle of the study
        last = max(e.id for e in seen if e.id is not None)
        seen += await stored(a.url, study.id, after=last)  # and resume on replica a
    finally:
        await asyncio.to_thread(thread.join, 120)
    assert outcome
    assert isinstance(outcome[0], SwarmResult), outcome[0]

    ids = [e.id for e in seen if e.id is not None]
    assert ids == list(range(1, len(ids) + 1))  # each exactly once, in order
    whole_a, whole_b = await stored(a.url, study.id), await stored(b.url, study.id)
    assert whole_a == whole_b == [e for e in seen if e.id is not None]
    assert [e.kind for e in whole_a][-2:] == ["result", "phase"]

"""Reports kept in memory by the process that stored them (server/runtime/received.py): a round's
close and a study's ledger use them only when they are all of the round's, and give then exactly
what the database gives."""

from __future__ import annotations

import httpx
import numpy as np
from fastapi import FastAPI

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population
from fedldp.client.swarm.run import run_swarm
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.base.records import FloatArray, IntArray
from fedldp.protocol.core.wire import EpsilonLedgerView, ResultView, RoundsView
from fedldp.server.runtime.received import ReceivedCache, in_chunks
from tests.server.helpers import app_context

URL = "http://fedldp.test"
SPEC = PopulationSpec(users=600, samples=8, distribution="two-point", mean=0.3)


def part(ids: list[int], width: int = 2) -> tuple[IntArray, FloatArray, FloatArray]:
    pids = np.asarray(ids, dtype=np.int64)
    rows = np.repeat(pids[:, None] / 10, width, axis=1)
    return pids, rows, np.full(pids.shape, 0.5)


def test_a_round_is_given_in_participant_order_only_when_complete() -> None:
    cache = ReceivedCache()
    cache.add("s", 0, *part([5, 6]))
    cache.add("s", 0, *part([1, 2]))
    assert cache.round_reports("s", 0, 5) is None  # another process stored the fifth
    got = cache.round_reports("s", 0, 4)
    assert got is not None
    chunks = list(in_chunks(got, 3))  # as the database's pages of 3
    assert [ids.tolist() for ids, _ in chunks] == [[1, 2, 5], [6]]
    assert [rows[:, 0].tolist() for _, rows in chunks] == [[0.1, 0.2, 0.5], [0.6]]
    cache.add("s", 2, *part([3, 8]))
    cache.add("s", 2, *part([4, 5]))
    assert cache.round_reports("s", 2, 4) is None  # interleaved parts: the database orders them
    cache.aggregated("s", 0)
    assert cache.round_reports("s", 0, 4) is None  # its rows were freed
    cache.add("s", 1, *part([1]))
    spent = cache.spent("s", 8, [4, 1])
    assert spent is not None
    assert spent.tolist() == [0.0, 1.0, 0.5, 0.0, 0.0, 0.5, 0.5, 0.0]
    assert cache.spent("s", 8, [4, 2]) is None  # round 1 holds a report stored elsewhere
    cache.add("s", 3, *part([2, 7]))
    cache.add("s", 3, *part([7]))
    assert cache.spent("s", 8, [4, 1, 0, 3]) is None  # an id twice: not what was stored


def test_a_study_past_the_memory_budget_is_given_up() -> None:
    ids, rows, charges = part([0, 1, 2])
    cache = ReceivedCache(max_bytes=ids.nbytes + rows.nbytes + charges.nbytes)
    cache.add("s", 0, ids, rows, charges)
    assert cache.round_reports("s", 0, 3) is not None
    cache.add("s", 0, *part([3]))
    assert cache.round_reports("s", 0, 3) is None
    cache.add("s", 0, *part([4]))  # nothing more is kept of it
    assert cache.round_reports("s", 0, 1) is None
    assert cache.spent("s", 5, [5]) is None


async def _run(app: FastAPI) -> tuple[ResultView, RoundsView, EpsilonLedgerView]:
    protocol = get_protocol("user-mean")
    params = fill_from_population(protocol, {}, build_population(SPEC, 3))
    run = await run_swarm(
        URL,
        population=SPEC,
        seed=3,
        create=("user-mean", params),
        batch=100,
        progress=False,
        transport=httpx.ASGITransport(app=app),
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=URL) as c:
        base = f"/v1/studies/{run.study_id}"
        rounds = RoundsView.model_validate_json((await c.get(f"{base}/rounds")).content)
        ledger = EpsilonLedgerView.model_validate_json((await c.get(f"{base}/epsilon")).content)
    return run.result, rounds, ledger


class Counting(ReceivedCache):
    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self.used = 0

    def round_reports(
        self, study_id: str, index: int, received: int
    ) -> list[tuple[IntArray, FloatArray]] | None:
        found = super().round_reports(study_id, index, received)
        self.used += found is not None
        return found


async def test_a_study_closes_the_same_from_memory_as_from_the_database(app: FastAPI) -> None:
    ctx = app_context(app)
    ctx.received = remembered = Counting(max_bytes=2**24)
    kept = await _run(app)
    ctx.received = forgotten = Counting(max_bytes=0)  # keeps nothing: every close reads
    read = await _run(app)
    assert (remembered.used, forgotten.used) == (2, 0)
    assert kept[0].model_dump(exclude={"study_id"}) == read[0].model_dump(exclude={"study_id"})
    outputs = [(r.output, r.received) for r in kept[1].rounds]
    assert outputs == [(r.output, r.received) for r in read[1].rounds]
    assert kept[2].model_dump(exclude={"study_id"}) == read[2].model_dump(exclude={"study_id"})

"""The swarm's data drawn ahead (fedldp.client.swarm.prefetch): the same data as drawn on demand,
whatever users are asked for, within the budget, dropped on release."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from fedldp.client.population.build import Population, PopulationSpec, build_population
from fedldp.client.swarm import prefetch as prefetch_module
from fedldp.client.swarm.prefetch import Prefetch
from fedldp.protocol.core.base.records import IntArray, UserData

UNIFORM = PopulationSpec(users=500, samples=16, distribution="two-point", mean=0.3)
RAGGED = PopulationSpec(users=500, imbalance=1.5, total_samples=4000, distribution="uniform")
LABELED = PopulationSpec(users=300, samples=8, distribution="sparse-linear")


def built(spec: PopulationSpec, seed: int) -> Population:
    population = build_population(spec, seed)
    assert isinstance(population, Population)
    return population


class Counting:
    """A population that counts the users whose data are drawn."""

    def __init__(self, population: Population) -> None:
        self.population = population
        self.metadata = population.metadata
        self.drawn = 0

    def data(self, slots: IntArray) -> UserData:
        self.drawn += int(np.asarray(slots).size)
        return self.population.data(slots)


def same(a: UserData, b: UserData) -> None:
    np.testing.assert_array_equal(a.counts, b.counts)
    np.testing.assert_array_equal(a.values, b.values)
    if b.labels is None:
        assert a.labels is None
    else:
        assert a.labels is not None
        np.testing.assert_array_equal(a.labels, b.labels)


def ahead(population: Any, slots: IntArray, block: int, budget: int | None = 2**30) -> Prefetch:
    prefetch = Prefetch(population, slots, block, budget)
    asyncio.run(prefetch.draw_ahead())
    return prefetch


@pytest.mark.parametrize("spec", [UNIFORM, RAGGED, LABELED], ids=["uniform", "ragged", "labeled"])
def test_take_gives_the_users_asked_in_their_order(spec: PopulationSpec) -> None:
    population = built(spec, 3)
    block = np.arange(40, 140, dtype=np.int64)
    drawn = population.data(block)
    for users in ([5, 0, 99, 42, 43], [7], [], list(range(100))):
        u: IntArray = np.asarray(users, dtype=np.int64)
        same(drawn.take(u), population.data(block[u]))


@pytest.mark.parametrize("step", [2**17, 50], ids=["one step a block", "steps of 50 samples"])
@pytest.mark.parametrize("spec", [UNIFORM, RAGGED, LABELED], ids=["uniform", "ragged", "labeled"])
def test_drawn_ahead_equals_drawn_on_demand(
    spec: PopulationSpec, step: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a block was drawn in one step or many (gathered from them), in any order."""
    monkeypatch.setattr(prefetch_module, "STEP_SAMPLES", step)
    population = built(spec, 5)
    counting = Counting(population)
    slots = np.arange(0, population.n, 2, dtype=np.int64)  # every other user, as members
    prefetch = ahead(counting, slots, block=40)
    drawn = counting.drawn
    assert drawn == 1 + slots.size  # a probe of one user, then each user once
    rng = np.random.default_rng(0)
    for i in range(0, slots.size, 40):
        users = slots[i : i + 40]
        asked = rng.permutation(users)[: max(1, users.size // 2)]
        same(prefetch.data(asked), population.data(asked))
    assert counting.drawn == drawn  # all of it from what was drawn ahead
    # not within one block, or not among the slots: drawn on demand, the same
    for listed in ([slots[39], slots[40]], [1], [slots[0], 1]):
        a: IntArray = np.array(listed, dtype=np.int64)
        same(prefetch.data(a), population.data(a))
    assert counting.drawn == drawn + 5


def test_the_budget_bounds_what_is_drawn_ahead_and_release_drops_a_block() -> None:
    population = built(UNIFORM, 7)
    counting = Counting(population)
    slots = np.arange(population.n, dtype=np.int64)
    block_bytes = 100 * int(population.metadata["samples"][0]) * 8
    prefetch = ahead(counting, slots, block=100, budget=2 * block_bytes)
    assert counting.drawn == 1 + 200  # the probe, then two blocks of 100
    asked = slots[250:260]  # block 2, over the budget: drawn when asked
    same(prefetch.data(asked), population.data(asked))
    assert counting.drawn == 211
    prefetch.release(slots[0:100])
    same(prefetch.data(slots[:3]), population.data(slots[:3]))
    assert counting.drawn == 214  # released: drawn again when asked
    same(prefetch.data(slots[100:103]), population.data(slots[100:103]))
    assert counting.drawn == 214  # block 1 is still held


def test_the_default_budget_is_what_keeps_the_process_under_its_memory_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a budget, the draw-ahead takes what SWARM_MEMORY leaves beside the process's
    resident memory and the agents' HEADROOM, read when the drawing starts."""
    mib = 2**20
    assert prefetch_module.prefetch_budget(100 * mib) == prefetch_module.SWARM_MEMORY - (
        prefetch_module.HEADROOM + 100 * mib
    )
    assert prefetch_module.prefetch_budget(2**30) == prefetch_module.PREFETCH_MIN
    assert 0 < prefetch_module._resident_bytes() < 2**40  # this process, read for real
    population = built(UNIFORM, 7)
    block_bytes = 100 * int(population.metadata["samples"][0]) * 8
    # a process holding all but two blocks of the budget draws two blocks ahead
    holds = prefetch_module.SWARM_MEMORY - prefetch_module.HEADROOM - 2 * block_bytes
    monkeypatch.setattr(prefetch_module, "PREFETCH_MIN", 0)
    monkeypatch.setattr(prefetch_module, "_resident_bytes", lambda: holds)
    counting = Counting(population)
    ahead(counting, np.arange(population.n, dtype=np.int64), block=100, budget=None)
    assert counting.drawn == 1 + 200


async def test_drawing_ahead_yields_to_the_event_loop() -> None:
    """Other tasks run between the steps of a block (the enrollment requests meanwhile)."""
    population = built(
        PopulationSpec(users=2000, samples=512, distribution="two-point", mean=0.3), 1
    )
    prefetch = Prefetch(population, np.arange(2000, dtype=np.int64), block=2000)
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await prefetch.draw_ahead()
    task.cancel()
    assert turns >= 2000 * 512 // (2**17) - 1


def test_slots_must_increase_and_blocks_hold_someone() -> None:
    population = built(UNIFORM, 2)
    with pytest.raises(ValueError, match="increasing"):
        Prefetch(population, np.array([3, 2, 5], dtype=np.int64), block=2)
    with pytest.raises(ValueError, match="block"):
        Prefetch(population, np.arange(5, dtype=np.int64), block=0)

"""Plans and what they are built from (server/runtime/plans.py): a start takes the participants this
process enrolled (``EnrolledCache``) only when they are all of the study's, and the plan is then
the one the database's rows give."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from fedldp.protocol.core.base.records import Plan, RoundPlan
from fedldp.server.runtime.plans import (
    Enrolled,
    EnrolledCache,
    MetadataRuns,
    _compact_rounds,
    build_plan,
    metadata_arrays,
)
from fedldp.server.store import participant_rows
from fedldp.server.store import repository as repo
from tests.server.helpers import app_context, create_study, start


def part(ids: list[int], meta: list[dict[str, Any]] | None = None) -> Enrolled:
    epsilon = np.asarray([0.5 + i / 10 for i in ids], dtype=np.float64)
    return Enrolled(np.asarray(ids, dtype=np.int64), epsilon, meta or [{"k": i} for i in ids])


def test_a_complete_record_comes_back_in_id_order_and_once() -> None:
    cache = EnrolledCache()
    cache.add("s", part([3, 4]))
    cache.add("s", part([0, 1, 2]))
    got = cache.take("s", 5)
    assert got is not None
    epsilon, metadata = got
    assert epsilon.tolist() == [0.5 + i / 10 for i in range(5)]
    assert metadata == [{"k": i} for i in range(5)]
    assert cache.take("s", 5) is None  # dropped once taken


def test_metadata_given_as_runs_come_back_as_the_rows_they_stand_for() -> None:
    """An enrollment without metadata records one run (``MetadataRuns``), not a row each: the
    record then reads as the rows would have (in id order, mixed with parts given as rows)."""
    cache = EnrolledCache()
    epsilon = np.full(3, 0.5)
    cache.add("s", Enrolled(np.arange(3, 6), epsilon, MetadataRuns([({}, 3)])))
    cache.add("s", part([0, 1, 2]))
    got = cache.take("s", 6)
    assert got is not None
    assert list(got[1]) == [{"k": 0}, {"k": 1}, {"k": 2}, {}, {}, {}]
    cache.add("t", Enrolled(np.array([2, 0, 1]), epsilon, MetadataRuns([({}, 3)])))
    cache.add("t", part([3, 4]))
    got = cache.take("t", 5)  # ids not in order: the rows are put in id order
    assert got is not None
    assert list(got[1]) == [{}, {}, {}, {"k": 3}, {"k": 4}]


def test_an_incomplete_or_foreign_record_is_not_used() -> None:
    cache = EnrolledCache()
    cache.add("s", part([0, 1]))
    assert cache.take("s", 3) is None  # another process enrolled id 2
    cache.add("s", part([0, 2]))
    assert cache.take("s", 2) is None  # ids 0 and 2 are not 0..1
    cache.add("s", part([0, 1]))
    assert cache.take("s", 3, also=part([2])) is not None  # the caller's own batch completes it
    assert cache.take("other", 0) is None


def test_the_cache_holds_a_bounded_number_of_studies() -> None:
    cache = EnrolledCache(capacity=2)
    for name in ("a", "b", "c"):
        cache.add(name, part([0]))
    assert cache.take("a", 1) is None
    assert cache.take("c", 1) is not None


async def test_a_start_plans_from_the_enrolled_record_as_from_the_database(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    study = await create_study(client, "user-mean", {"samples_per_user": 8})
    url = f"/v1/studies/{study.id}/participants/batch"
    for first in (0, 30):  # two batches, columnar, with per-participant sample counts
        epsilons = [0.5 + (first + i) % 7 / 4 for i in range(30)]
        body = {"epsilons": epsilons, "metadata": {"samples": [8 + i % 3 for i in range(30)]}}
        assert (await client.post(url, json=body)).status_code == 201
    ctx = app_context(app)
    taken = ctx.enrolled.take(study.id, 60)  # what the start will use, kept for the check
    assert taken is not None
    with ctx.db.session() as session:
        stored = participant_rows.load_participants(session, study.id)
        row = repo.get_study(session, study.id)
        assert row is not None
    assert taken[0].tolist() == stored[0].tolist()
    assert taken[1] == stored[1]
    ctx.enrolled.add(study.id, Enrolled(np.arange(60), taken[0], taken[1]))
    await start(client, study.id)
    assert ctx.enrolled.take(study.id, 60) is None  # the start took it
    with ctx.db.session() as session:
        started = ctx.plans.get(session, row)
    expected = build_plan(row, *stored).plan
    for got, want in zip(started.plan.rounds, expected.rounds, strict=True):
        assert got.cohort.tolist() == want.cohort.tolist()
        assert got.epsilon.tolist() == want.epsilon.tolist()
    assert started.plan.public == expected.public


def test_metadata_arrays_are_everyones_values_built_when_read() -> None:
    shared = {"samples": 8, "w": [1.0, 2.0]}
    rows = [shared] * 3 + [{"samples": 9, "w": [0.5, 0.0], "only": 1}] + [shared] * 2
    for given in (rows, MetadataRuns([(shared, 3), (rows[3], 1), (shared, 2)])):
        arrays = metadata_arrays(given)
        assert sorted(arrays) == ["samples", "w"]  # "only" is missing for some
        assert len(arrays) == 2
        assert "only" not in arrays
        assert arrays._arrays == {}  # type: ignore[attr-defined]  # nothing built yet
        assert arrays["samples"].tolist() == [8, 8, 8, 9, 8, 8]
        assert arrays["w"].tolist() == [row["w"] for row in rows]
        assert arrays["w"] is arrays["w"]  # built once
        assert list(arrays._arrays) == ["samples", "w"]  # type: ignore[attr-defined]
        with pytest.raises(KeyError):
            arrays["only"]
    assert metadata_arrays([]) == {}


def test_metadata_that_make_no_array_are_refused_before_a_protocol_reads_them() -> None:
    rows = [{"w": [1.0, 2.0]}] * 2 + [{"w": [1.0]}]
    with pytest.raises(ValueError, match="inhomogeneous"):
        metadata_arrays(rows)


def test_a_round_that_charges_everyone_the_same_holds_one_value() -> None:
    n = 1_000_003  # odd: numpy's pairwise sums split it unevenly
    same = RoundPlan(0, "same", np.arange(n), np.full(n, 0.7), "scalar", ())
    varied = RoundPlan(1, "varied", np.arange(3), np.array([0.5, 0.7, 0.7]), "scalar", ())
    plan = Plan(n, (same, varied), {"k": 1})
    compact = _compact_rounds(plan)
    held = compact.rounds[0].epsilon
    assert held.strides == (0,)  # one value
    assert not held.flags.writeable
    assert held.tolist() == same.epsilon.tolist()
    assert compact.rounds[0].cohort is same.cohort
    assert compact.rounds[1] is varied  # not all equal: the array as planned
    assert compact.public == plan.public
    # what the server does with a round's ε's gives the planned array's values, bit for bit
    where = np.array([5, 0, n - 1])
    assert held[where].tolist() == same.epsilon[where].tolist()
    assert float(np.sum(held)) == float(np.sum(same.epsilon))
    assert float(np.sum(1 / held**2)) == float(np.sum(1 / same.epsilon**2))

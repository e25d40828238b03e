"""End to end with misbehaving users (issue 13): a real server, a real swarm, and the simulator
with the same behaviour. Dropouts and late answers make every round close at its deadline on the
quorum; the server's accepted reports are the simulator's, so the estimates agree to 1e-9."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedldp.client.behaviour import Behaviour
from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import SimulationResult, StudyFailed, fill_from_population, simulate
from fedldp.client.swarm.agents import SwarmError
from fedldp.client.swarm.run import SwarmResult, run_swarm_sync
from fedldp.protocol.catalogue import get_protocol
from tests.e2e.test_e2e import assert_same_estimate, rounds_view, start_server, study_view

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp: Path = tmp_path_factory.mktemp("behaviour")
    process = start_server(tmp / "fedldp.db", tmp / "server.log")
    try:
        yield process.url
    finally:
        process.stop()


def both(
    url: str,
    protocol: str,
    spec: PopulationSpec,
    behaviour: Behaviour,
    *,
    deadline: float,
    quorum: float,
    name: str | None = None,
    batch: int | None = 250,
) -> tuple[SwarmResult, SimulationResult]:
    seed = 11
    population = build_population(spec, seed)
    p = get_protocol(protocol)
    params: dict[str, Any] = fill_from_population(p, {}, population)
    local = simulate(
        p,
        p.parse_params(params),
        population,
        seed,
        behaviour=behaviour,
        round_deadline_s=deadline,
        quorum=quorum,
    )
    remote = run_swarm_sync(
        url,
        population=population,
        create=(protocol, params),
        batch=batch,
        progress=False,
        round_deadline_s=deadline,
        quorum=quorum,
        behaviour=behaviour,
        name=name,
    )
    return remote, local


def participation(rounds: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    return [(r["planned"], r["refused"], r["received"]) for r in rounds]


@pytest.mark.parametrize(
    ("protocol", "users", "batch", "deadline"),
    [
        ("user-mean", 1500, 250, 1.0),  # two rounds, blocks of users
        ("hetero-mean-laplace", 60, None, 6.0),  # one agent per user: slower, and under load
    ],
)
def test_dropouts_and_late_users_close_every_round_on_the_quorum(
    url: str, protocol: str, users: int, batch: int | None, deadline: float
) -> None:
    spec = PopulationSpec(users=users, samples=8, distribution="two-point", mean=0.3, epsilon=1.0)
    behaviour = Behaviour(
        dropout=(0.2,), late_fraction=0.05, late_delay_s=deadline + 1.5, join_late=0.1
    )
    remote, local = both(url, protocol, spec, behaviour, deadline=deadline, quorum=0.5, batch=batch)
    assert remote.result.phase == "finished"
    assert_same_estimate(remote.result.estimate, local.result.estimate)
    mine = local.result.diagnostics["participation"]["rounds"]
    theirs = remote.result.diagnostics["participation"]["rounds"]
    assert participation(theirs) == participation(mine)
    for r, count in zip(rounds_view(url, remote.study_id).rounds, mine, strict=True):
        assert r.status == "closed"
        assert r.received == count["received"] < r.expected  # closed on the quorum
    # every late answer came after its round had closed and was refused
    late = sum(c["late"] for c in mine)
    assert late > 0
    assert remote.stats.late == late
    assert remote.stats.reports == sum(c["received"] for c in mine)
    joined = local.result.diagnostics["participation"].get("joined_late", 0)
    assert remote.stats.joined_late == joined
    assert remote.study.n_participants == users - joined
    assert joined > 0


def test_a_missed_quorum_fails_the_study_with_the_reason(url: str) -> None:
    spec = PopulationSpec(users=300, distribution="two-point", mean=0.3, epsilon=1.0)
    behaviour = Behaviour(dropout=(0.5,))
    with pytest.raises(StudyFailed) as local:
        both(url, "hetero-mean-laplace", spec, behaviour, deadline=0.5, quorum=0.9)
    population = build_population(spec, 11)
    p = get_protocol("hetero-mean-laplace")
    with pytest.raises(SwarmError) as remote:
        run_swarm_sync(
            url,
            population=population,
            create=("hetero-mean-laplace", fill_from_population(p, {}, population)),
            batch=100,
            progress=False,
            round_deadline_s=0.5,
            quorum=0.9,
            behaviour=behaviour,
            name="quorum-not-met",
        )
    assert remote.value.code == "study_failed"
    study_id = remote.value.detail.split()[1]
    view = study_view(url, study_id)
    assert view.phase == "failed"
    assert view.failure_reason == str(local.value)
    assert "the quorum 0.9 needs 270" in str(local.value)


@pytest.mark.parametrize(
    ("protocol", "spec", "behaviour", "deadline", "quorum"),
    [
        (  # the largest plausible Laplace value: every such report is accepted
            "baseline-clipped-laplace",
            PopulationSpec(users=600, samples=4, distribution="two-point", mean=0.3),
            Behaviour(attack="output", attackers=0.1),
            600.0,
            1.0,
        ),
        (
            "hetero-frequency",
            PopulationSpec(users=600, distribution="categorical", items=8, epsilon=1.0),
            Behaviour(attack="max-gain", attackers=0.1, targets=(5,)),
            600.0,
            1.0,
        ),
        (  # off Duchi's sphere: refused and counted, the round closes on the quorum
            "hetero-mean-duchi",
            PopulationSpec(users=600, samples=2, distribution="two-point", dimension=3),
            Behaviour(attack="output", attackers=0.1),
            1.0,
            0.5,
        ),
    ],
)
def test_attackers_over_http_give_the_simulators_result(
    url: str,
    protocol: str,
    spec: PopulationSpec,
    behaviour: Behaviour,
    deadline: float,
    quorum: float,
) -> None:
    remote, local = both(url, protocol, spec, behaviour, deadline=deadline, quorum=quorum)
    assert remote.result.phase == "finished"
    assert_same_estimate(remote.result.estimate, local.result.estimate)
    mine = local.result.diagnostics["participation"]["rounds"]
    assert participation(remote.result.diagnostics["participation"]["rounds"]) == participation(
        mine
    )
    assert remote.stats.refused == sum(c["refused"] for c in mine)
    honest = simulate(
        get_protocol(protocol),
        local.params,
        local.population,
        local.seed,
    )
    assert not np.array_equal(np.asarray(honest.result.estimate), np.asarray(local.result.estimate))

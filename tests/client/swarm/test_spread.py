"""``fedldp swarm --cluster``: one population's users spread over a Dask cluster's workers, as
leasing swarms of one study on a real server, give the simulator's estimate; bad combinations and
a failing part are clear errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fedldp.client.cli.main import main
from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.client.swarm.agents import SwarmError
from fedldp.client.swarm.server_process import ServerProcess
from fedldp.client.swarm.spread import run_swarm_cluster
from fedldp.protocol.catalogue import get_protocol
from tests.live import sqlite_server

distributed = pytest.importorskip("distributed")

SPEC = PopulationSpec(users=6000, samples=8, distribution="two-point", mean=0.25)
SEED = 5


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """A two-worker LocalCluster in this process (threads): its address."""
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
    ) as local:
        yield local.scheduler_address


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with sqlite_server(tmp_path_factory.mktemp("spread")) as process:
        yield process


def _params(name: str, spec: PopulationSpec) -> dict[str, Any]:
    return fill_from_population(get_protocol(name), {}, build_population(spec, SEED))


def _simulated(name: str, spec: PopulationSpec) -> Any:
    protocol = get_protocol(name)
    params = protocol.parse_params(_params(name, spec))
    return simulate(protocol, params, build_population(spec, SEED), SEED).result.estimate


def test_parts_on_the_workers_share_one_study_and_give_the_simulators_estimate(
    server: ServerProcess, scheduler: str
) -> None:
    run = run_swarm_cluster(
        server.url,
        scheduler,
        population=SPEC,
        seed=SEED,
        create=("user-mean", _params("user-mean", SPEC)),
        parts=3,
        batch=500,
    )
    assert run.study.phase == "finished"
    assert run.result.estimate == _simulated("user-mean", SPEC)  # to the last digit
    assert run.study.n_participants == SPEC.users
    # every user reported exactly once (user-mean's stages split the users), whichever part ran it
    assert sum(r.received for r in run.study.rounds) == SPEC.users
    assert run.stats.reports == SPEC.users
    assert run.users_served == SPEC.users
    assert run.study.name is not None
    assert run.study.name.startswith("swarm-")


def test_the_command_line_runs_it_per_user_with_one_part_per_worker(
    server: ServerProcess, scheduler: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = PopulationSpec(users=600, distribution="two-point", mean=-0.2, epsilon_mix="0.5:1")
    argv = ["swarm", "--server", server.url, "--cluster", scheduler, "--create", "hetero-mean-rr"]
    argv += ["--users", "600", "--distribution", "two-point", "--mean", "-0.2"]
    argv += ["--epsilon-mix", "0.5:1", "--seed", str(SEED), "--name", "cli-spread", "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["estimate"] == _simulated("hetero-mean-rr", spec)
    assert summary["users_served"] == 600


def test_a_failing_part_stops_the_run_with_its_error(server: ServerProcess, scheduler: str) -> None:
    """A study of the same name with other parameters exists: every part is refused, and the
    driver raises the server's refusal instead of waiting."""
    spec = PopulationSpec(users=500, samples=4, distribution="two-point", mean=0.1)
    params = _params("user-mean", spec)
    kw: dict[str, Any] = {"population": spec, "seed": SEED, "name": "taken", "batch": 250}
    run_swarm_cluster(server.url, scheduler, create=("user-mean", params), parts=1, **kw)
    other = {**params, "samples_per_user": params["samples_per_user"] // 2}
    with pytest.raises(SwarmError) as refused:
        run_swarm_cluster(server.url, scheduler, create=("user-mean", other), parts=2, **kw)
    assert refused.value.code == "study_mismatch"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--study", "abc"], "--cluster needs --create"),
        (["--create", "user-mean", "--processes", "2"], "no --processes or --lease"),
        (["--create", "user-mean", "--threads", "2"], "threads apply to batch mode"),
        (["--create", "user-mean", "--batch", "--threads", "0"], "threads must be >= 1"),
    ],
)
def test_options_that_do_not_fit_are_refused_before_anything_runs(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["swarm", "--server", "http://127.0.0.1:9", "--cluster", "tcp://127.0.0.1:9"]
    argv += ["--users", "100", "--samples", "4", "--seed", "1", *extra]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_built_population_is_refused(tmp_path: Path) -> None:
    population: Any = build_population(SPEC, SEED)
    with pytest.raises(ValueError, match="PopulationSpec"):
        run_swarm_cluster(
            "http://127.0.0.1:9",
            "tcp://127.0.0.1:9",
            population=population,
            seed=SEED,
            create=("user-mean", {}),
        )

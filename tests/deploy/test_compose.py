"""The deployments of ``docker-compose.yml`` (issue #4), run to completion; the result read over
HTTP from the host equals the in-process simulation of the same seed (docs/architecture.md: 1e-9
relative).

* default mode: the server on SQLite and one swarm;
* profile ``postgres``: PostgreSQL, two server replicas behind an nginx balancer, and two swarms
  (``--scale swarm-pg=2``) sharing one study through the balancer;
* profile ``cluster``: a Dask scheduler, two workers and an experiment driver
  (``fedldp experiment run --cluster``): its trials CSV equals a local run's, timing aside.

Needs a Docker engine and compose (``docker compose`` v2 or Debian's ``docker-compose`` v1), run
through ``scripts/compose`` as the README does (``FEDLDP_COMPOSE`` picks one). As root,
``deploy/offline-base-image.sh`` is run first: it installs and starts Docker when needed and
builds the registry-free base image and wheelhouse. Without a usable engine the tests are
skipped with the reason. Run with ``pytest -m docker tests/deploy`` (the default run excludes
the ``docker`` marker).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import httpx
import numpy as np
import pytest
from numpy.typing import NDArray

from fedldp.client.cli.main import build_parser
from fedldp.client.experiments.loading import load_experiment
from fedldp.client.experiments.results import TIMING_COLUMNS
from fedldp.client.experiments.runner import run_experiment
from fedldp.client.population.build import build_population, population_spec_from_args
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.client.swarm.enrolling import ENROLL_CHUNK
from fedldp.client.swarm.server_process import free_port
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import ResultView, StudyList, StudyView
from tests.floats import same_rows

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "python:3.11-slim"
PROTOCOL = "user-mean"
POPULATION = "--users 2000 --samples 16 --distribution two-point --mean 0.3 --epsilon 1"
# More users than one lease block (ENROLL_CHUNK), so that the two swarms can split the work.
SCALED_USERS = 24_000
SCALED_POPULATION = (
    f"--users {SCALED_USERS} --samples 16 --distribution two-point --mean 0.3 --epsilon 1"
)
REPLICAS = ("server-a", "server-b")
SEED = 20_404
RELATIVE_TOLERANCE = 1e-9


def run(command: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``command`` with its output captured as text; never raises on a non-zero status."""
    return subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )


def tail(proc: subprocess.CompletedProcess[str], lines: int = 30) -> str:
    return "\n".join((proc.stdout + proc.stderr).splitlines()[-lines:])


def skip_loudly(reason: str) -> NoReturn:
    pytest.skip(f"DOCKER DEPLOY TEST NOT RUN: {reason}")


def engine_answers() -> bool:
    return shutil.which("docker") is not None and run(["docker", "info"], 60).returncode == 0


def compose_command() -> list[str] | None:
    """``scripts/compose`` (the README's command), when it finds a compose to run: it picks
    ``$FEDLDP_COMPOSE``, else ``docker compose`` (v2) when present, else ``docker-compose``."""
    wrapper = str(ROOT / "scripts" / "compose")
    return [wrapper] if run([wrapper, "which"], 60).returncode == 0 else None


@pytest.fixture(scope="module")
def compose() -> list[str]:
    """The compose command, once an engine answers and the base image is there."""
    if os.geteuid() == 0:
        # Installs and starts Docker if needed; builds the stand-in base image and wheelhouse.
        prepared = run(["bash", "deploy/offline-base-image.sh"], 1800)
        if prepared.returncode != 0:
            if not engine_answers():
                skip_loudly(f"no Docker engine could be set up:\n{tail(prepared)}")
            pytest.fail(f"deploy/offline-base-image.sh failed:\n{tail(prepared)}")
    elif not engine_answers():
        skip_loudly("no Docker engine answers (run as root to have one installed and started)")
    if run(["docker", "image", "inspect", BASE_IMAGE], 60).returncode != 0:
        skip_loudly(f"{BASE_IMAGE} is missing (run deploy/offline-base-image.sh as root)")
    command = compose_command()
    if command is None:
        skip_loudly("neither 'docker compose' nor 'docker-compose' is installed")
    return command


@dataclass(frozen=True)
class Deployment:
    """One compose project: its name, published host port, compose command and environment."""

    name: str
    port: int
    command: list[str]
    env: dict[str, str]

    def compose(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return run([*self.command, *args], timeout, env=self.env)

    def logs(self, service: str) -> str:
        return self.compose("logs", "--no-color", service, timeout=60).stdout

    def containers(self, service: str) -> list[str]:
        """Ids of the service's containers, running or not."""
        labels = [
            f"com.docker.compose.project={self.name}",
            f"com.docker.compose.service={service}",
        ]
        filters = [arg for label in labels for arg in ("--filter", f"label={label}")]
        return run(["docker", "ps", "--all", "--quiet", *filters], 60).stdout.split()

    def build_and_start(self, *up_args: str) -> None:
        built = self.compose("build", timeout=1800)
        assert built.returncode == 0, f"image build failed:\n{tail(built)}"
        up = self.compose("up", "--detach", *up_args)
        assert up.returncode == 0, f"compose up failed:\n{tail(up)}"

    def swarm_summary(self, container: str, *servers: str) -> dict[str, Any]:
        """The JSON summary a swarm container prints, once it exited 0."""
        waited = run(["docker", "wait", container], 900)
        logs = run(["docker", "logs", container], 60)
        server_logs = "\n".join(self.logs(server)[-3000:] for server in servers)
        assert waited.stdout.strip() == "0", (
            f"swarm exited with {waited.stdout.strip()}:\n{tail(logs)}\nservers:\n{server_logs}"
        )
        summary: dict[str, Any] = json.loads(logs.stdout.strip().splitlines()[-1])
        return summary


@contextlib.contextmanager
def deployed(
    compose: list[str], port_variable: str, profiles: tuple[str, ...] = (), **settings: str
) -> Iterator[Deployment]:
    """A compose project with a unique name, its port published on a free host port, torn down
    (volumes too) after. Its settings are the defaults below and ``settings``: none are
    inherited from the caller's environment."""
    name = f"fedldp-deploy-{uuid.uuid4().hex[:10]}"
    port = free_port()
    prefixes = (
        "FEDLDP_",
        "SWARM_",
        "SERVER_",
        "BALANCER_",
        "POSTGRES_",
        "COMPOSE_",
        "SCHEDULER_",
        "EXPERIMENT",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    if "FEDLDP_COMPOSE" in os.environ:  # scripts/compose's choice, not a deployment setting
        env["FEDLDP_COMPOSE"] = os.environ["FEDLDP_COMPOSE"]
    env |= {
        "FEDLDP_IMAGE_TAG": "deploy-test",
        port_variable: str(port),
        "SWARM_PROTOCOL": PROTOCOL,
        "SWARM_PARAMS": "",
        "SWARM_POPULATION": POPULATION,
        "SWARM_SEED": str(SEED),
        "SWARM_BATCH": "500",
        "SWARM_OPTIONS": "",
        **settings,
    }
    profile_args = [arg for profile in profiles for arg in ("--profile", profile)]
    command = [*compose, "--project-name", name, "--file", str(ROOT / "docker-compose.yml")]
    deployment = Deployment(name, port, [*command, *profile_args], env)
    try:
        yield deployment
    finally:
        down = deployment.compose("down", "--volumes", "--remove-orphans", timeout=300)
        assert down.returncode == 0, f"compose down failed:\n{tail(down)}"


@pytest.fixture
def deployment(compose: list[str]) -> Iterator[Deployment]:
    """The default mode (SQLite); its server on the deployment's port."""
    with deployed(compose, "SERVER_PORT") as deployment:
        yield deployment


@pytest.fixture
def scaled_deployment(compose: list[str]) -> Iterator[Deployment]:
    """The ``postgres`` profile, its balancer on the deployment's port; the replicas log every
    request (debug level turns uvicorn's access log on)."""
    with deployed(
        compose,
        "BALANCER_PORT",
        ("postgres",),
        SWARM_POPULATION=SCALED_POPULATION,
        FEDLDP_LOG_LEVEL="debug",
    ) as deployment:
        yield deployment


def in_process_estimate(population: str) -> NDArray[np.float64]:
    """The in-process simulation of the swarm's run, from the same flags and seed."""
    args = build_parser().parse_args(
        ["simulate", "--protocol", PROTOCOL, "--seed", str(SEED), *population.split()]
    )
    spec = build_population(population_spec_from_args(args), SEED)
    protocol = get_protocol(PROTOCOL)
    params = protocol.parse_params(fill_from_population(protocol, {}, spec))
    local = simulate(protocol, params, spec, SEED)
    return np.asarray(local.result.estimate, dtype=np.float64)


def finished_study(port: int, users: int) -> tuple[StudyView, NDArray[np.float64]]:
    """The only study on the server (or balancer) at ``port``, finished with ``users``
    participants, and its estimate, read over HTTP from the host."""
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        assert http.get("/health").status_code == 200
        studies = StudyList.model_validate_json(http.get("/v1/studies").raise_for_status().text)
        assert len(studies.studies) == 1, studies
        study = studies.studies[0]
        assert (study.protocol, study.phase, study.n_participants) == (PROTOCOL, "finished", users)
        response = http.get(f"/v1/studies/{study.id}/result").raise_for_status()
        result = ResultView.model_validate_json(response.text)
    assert result.phase == "finished"
    assert result.estimate is not None
    assert result.epsilon_spent.participants == users
    return study, np.asarray(result.estimate, dtype=np.float64)


def assert_reproduces(remote: NDArray[np.float64], population: str) -> None:
    local = in_process_estimate(population)
    scale = max(float(np.max(np.abs(local))), 1e-300)
    relative = float(np.max(np.abs(remote - local))) / scale
    assert relative <= RELATIVE_TOLERANCE, f"HTTP {remote} vs in process {local}: {relative:.3g}"


def test_compose_swarm_reproduces_the_in_process_estimate(deployment: Deployment) -> None:
    deployment.build_and_start()
    swarms = deployment.containers("swarm")
    assert len(swarms) == 1, f"expected one swarm container, found {swarms}"
    summary = deployment.swarm_summary(swarms[0], "server")

    study, remote = finished_study(deployment.port, 2000)
    assert study.id == summary["study_id"]
    np.testing.assert_array_equal(remote, np.asarray(summary["estimate"], dtype=np.float64))
    assert_reproduces(remote, POPULATION)


def test_two_swarms_on_two_replicas_reproduce_the_in_process_estimate(
    scaled_deployment: Deployment,
) -> None:
    deployment = scaled_deployment
    # The documented command: naming swarm-pg starts it with what it depends on, only.
    deployment.build_and_start("--scale", "swarm-pg=2", "swarm-pg")
    assert deployment.containers("server") == [], "the SQLite server started in postgres mode"
    swarms = deployment.containers("swarm-pg")
    assert len(swarms) == 2, f"expected two swarm containers, found {swarms}"
    summaries = [deployment.swarm_summary(swarm, *REPLICAS) for swarm in swarms]

    study, remote = finished_study(deployment.port, SCALED_USERS)
    assert [s["study_id"] for s in summaries] == [study.id, study.id]
    for summary in summaries:
        np.testing.assert_array_equal(remote, np.asarray(summary["estimate"], dtype=np.float64))
    assert_reproduces(remote, SCALED_POPULATION)

    # Both swarms asked the balancer for leases (which of them got blocks depends on timing).
    askers = re.findall(r'(\S+) "POST /v1/studies/\w+/leases ', deployment.logs("balancer"))
    assert len(set(askers)) == 2, f"lease requests came from {sorted(set(askers))}"
    # Both replicas served the swarms; across them, every participant-id block was leased once
    # and every round closed once, each by one replica.
    logs = {replica: deployment.logs(replica) for replica in REPLICAS}
    reported = re.compile(r"POST /v1/studies/\w+/reports\S* 20[01] ")  # observe's access lines
    for replica, text in logs.items():
        assert reported.search(text), f"{replica} got no reports"
    everything = "\n".join(logs.values())
    leases = re.findall(r"POST /v1/studies/\w+/leases 201 ", everything)
    assert len(leases) == math.ceil(SCALED_USERS / ENROLL_CHUNK)
    closed = re.findall(rf"study {study.id}: round (\d+) \(", everything)
    assert sorted(int(i) for i in closed) == [r.index for r in study.rounds]
    assert all(r.status == "closed" and r.received == r.expected for r in study.rounds)


CLUSTER_EXPERIMENT = "heterogeneous-e3-frequency"


@pytest.fixture
def cluster_deployment(compose: list[str]) -> Iterator[Deployment]:
    """The ``cluster`` profile: a Dask scheduler (published on the deployment's port), workers
    and the experiment driver on the repository's experiments/ folder."""
    with deployed(
        compose, "SCHEDULER_PORT", ("cluster",), EXPERIMENT=f"{CLUSTER_EXPERIMENT}.yaml"
    ) as deployment:
        yield deployment


def test_the_cluster_profile_runs_an_experiment_as_local_processes_do(
    cluster_deployment: Deployment, tmp_path: Path
) -> None:
    deployment = cluster_deployment
    # The documented command: naming experiment starts the scheduler and workers it needs.
    deployment.build_and_start("--scale", "dask-worker=2", "experiment")
    assert len(deployment.containers("dask-worker")) == 2
    (driver,) = deployment.containers("experiment")
    waited = run(["docker", "wait", driver], 900)
    logs = run(["docker", "logs", driver], 60)
    assert waited.stdout.strip() == "0", f"the driver exited {waited.stdout}:\n{tail(logs)}"
    assert "20 trials run, 0 already done, of 20" in logs.stderr + logs.stdout
    remote = tmp_path / "cluster.csv"
    copied = run(
        ["docker", "cp", f"{driver}:/results/{CLUSTER_EXPERIMENT}/trials.csv", str(remote)], 60
    )
    assert copied.returncode == 0, tail(copied)

    experiment = load_experiment(ROOT / "experiments" / f"{CLUSTER_EXPERIMENT}.yaml")
    run_experiment(experiment, tmp_path / "local", progress=False)

    def without_timing(path: Path) -> list[list[str]]:
        rows = list(csv.reader(io.StringIO(path.read_text())))
        keep = [i for i, name in enumerate(rows[0]) if name not in TIMING_COLUMNS]
        return [[r[i] for i in keep] for r in rows]

    # the workers run the image's Python, not this one: floats may differ in the last digits
    local = without_timing(tmp_path / "local" / "trials.csv")
    assert same_rows(without_timing(remote), local), (without_timing(remote), local)

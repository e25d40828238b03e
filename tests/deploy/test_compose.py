"""The deployments of ``docker-compose.yml`` (issue #4), run to completion; the result read over
HTTP from the host equals the in-process simulation of the same seed (docs/architecture.md: 1e-9
relative).

* default mode: the server on SQLite and one swarm; and docs/deployment.md's ``--scale swarm=3``
  sequence on its default population, where each of at least two swarms serves users;
* profile ``postgres``: PostgreSQL, two server replicas behind an nginx balancer, and two swarms
  (``--scale swarm-pg=2``) sharing one study through the balancer;
* profile ``cluster``: a Dask scheduler, two workers and an experiment driver
  (``fedldp experiment run --cluster``), run by docs/experiments.md's command: its trials CSV
  equals a local run's, timing aside, and no container of the profile keeps running after it;
* the build context ``.dockerignore`` lets through: only what deploy/Dockerfile copies.

Each mode is started with ``up --build``, which builds the fedldp image once (one service of the
mode builds it, the others use its tag; with compose v1, whose output names each build, that is
checked).

Needs a Docker engine and compose (``docker compose`` v2 or Debian's ``docker-compose`` v1), run
through ``scripts/compose`` as docs/deployment.md does (``FEDLDP_COMPOSE`` picks one). As root,
``deploy/offline-base-image.sh`` is run first: it installs and starts Docker when needed and
builds the registry-free base image and wheelhouse. Without a usable engine the tests are
skipped with the reason. Run with ``pytest -m docker tests/deploy`` (the default run excludes
the ``docker`` marker).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import math
import os
import re
import shutil
import subprocess
import time
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
from fedldp.client.swarm.enrolling import ENROLL_CHUNK, LEASE_SHARES
from fedldp.client.swarm.server_process import free_port
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import ResultView, StudyList, StudyView
from tests.floats import same_rows

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "python:3.11-slim"
PROTOCOL = "user-mean"
POPULATION = "--users 2000 --samples 16 --distribution two-point --mean 0.3 --epsilon 1"
# More users than one ENROLL_CHUNK (leases are 1/LEASE_SHARES of the population, at most that).
SCALED_USERS = 24_000
SCALED_POPULATION = (
    f"--users {SCALED_USERS} --samples 16 --distribution two-point --mean 0.3 --epsilon 1"
)
# The compose file's default population (docs/deployment.md's `--scale swarm=3` runs it), two
# ENROLL_CHUNKs of users.
DEFAULT_POPULATION = "--users 20000 --samples 256 --distribution two-point --mean 0.3 --epsilon 1"
REPLICAS = ("server-a", "server-b")
SEED = 20_404
RELATIVE_TOLERANCE = 1e-9
# The services that build their own images (all others run the fedldp image).
OTHER_IMAGES = ("postgres", "balancer")


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
    """``scripts/compose`` (docs/deployment.md's command), when it finds a compose to run: it picks
    ``$FEDLDP_COMPOSE``, else ``docker compose`` (v2) when present, else ``docker-compose``."""
    wrapper = str(ROOT / "scripts" / "compose")
    return [wrapper] if run([wrapper, "which"], 60).returncode == 0 else None


@pytest.fixture(scope="module")
def compose() -> list[str]:
    """The compose command, once an engine answers and the base image is there."""
    return prepared_compose()


@functools.cache
def prepared_compose() -> list[str]:
    """What ``compose`` returns, prepared once per run (the modules of tests/deploy share it:
    deploy/offline-base-image.sh need not run again); a skip or failure is not remembered."""
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

    def compose(
        self, *args: str, timeout: float = 600, **settings: str
    ) -> subprocess.CompletedProcess[str]:
        """``compose ARGS`` in the deployment's environment, with ``settings`` added."""
        return run([*self.command, *args], timeout, env=self.env | settings)

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

    def running(self) -> list[str]:
        """Ids of the project's running containers."""
        label = f"label=com.docker.compose.project={self.name}"
        return run(["docker", "ps", "--quiet", "--filter", label], 60).stdout.split()

    def up(self, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
        """``up ARGS``, checked to succeed and, with ``--build``, to build the fedldp image
        once."""
        up = self.compose("up", *args, timeout=1800, **settings)
        assert up.returncode == 0, f"compose up failed:\n{tail(up)}"
        which = run([str(ROOT / "scripts" / "compose"), "which"], 60, env=self.env)
        # compose v1 says "Building SERVICE" for each build
        if "--build" in args and which.stdout.strip() == "docker-compose":
            built = re.findall(r"^Building ([\w.-]+)$", up.stdout + up.stderr, re.MULTILINE)
            fedldp = [service for service in built if not service.startswith(OTHER_IMAGES)]
            assert len(fedldp) == 1, f"the fedldp image was built by {fedldp}"
        return up

    def build_and_start(self, *up_args: str) -> None:
        self.up("--build", "--detach", *up_args)

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
        "CLUSTER_",
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


def in_process_estimate(population: str, seed: int) -> NDArray[np.float64]:
    """The in-process simulation of the swarm's run, from the same flags and seed."""
    args = build_parser().parse_args(
        ["simulate", "--protocol", PROTOCOL, "--seed", str(seed), *population.split()]
    )
    spec = build_population(population_spec_from_args(args), seed)
    protocol = get_protocol(PROTOCOL)
    params = protocol.parse_params(fill_from_population(protocol, {}, spec))
    local = simulate(protocol, params, spec, seed)
    return np.asarray(local.result.estimate, dtype=np.float64)


def finished_study(
    port: int, users: int, name: str | None = None
) -> tuple[StudyView, NDArray[np.float64]]:
    """The only study on the server (or balancer) at ``port`` (the only one called ``name``, if
    given), finished with ``users`` participants, and its estimate, read over HTTP from the
    host."""
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        assert http.get("/health").status_code == 200
        studies = StudyList.model_validate_json(http.get("/v1/studies").raise_for_status().text)
        found = [s for s in studies.studies if name is None or s.name == name]
        assert len(found) == 1, studies
        study = found[0]
        assert (study.protocol, study.phase, study.n_participants) == (PROTOCOL, "finished", users)
        response = http.get(f"/v1/studies/{study.id}/result").raise_for_status()
        result = ResultView.model_validate_json(response.text)
    assert result.phase == "finished"
    assert result.estimate is not None
    assert result.epsilon_spent.participants == users
    return study, np.asarray(result.estimate, dtype=np.float64)


def assert_reproduces(remote: NDArray[np.float64], population: str, seed: int = SEED) -> None:
    local = in_process_estimate(population, seed)
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


def test_three_swarms_of_the_readme_share_the_default_population(compose: list[str]) -> None:
    """docs/deployment.md's sequence on the default population: `up --exit-code-from swarm`,
    then three swarms on a new study (`--scale swarm=3`), `docker wait` on them, `logs swarm`
    for their results. Every swarm serves a share only if all three ask for leases before one
    has leased every block, and one swarm enrolls 20,000 users in well under the second that
    compose takes to start the next (it re-creates the first): so the test creates the three
    (`up --no-start`), starts the server, freezes it once healthy, starts the swarms and
    unfreezes the server once each swarm has a connection to it waiting. All three then lease
    from the same moment, and each serves some."""
    with deployed(compose, "SERVER_PORT", SWARM_POPULATION=DEFAULT_POPULATION) as deployment:
        deployment.up("--build", "--exit-code-from", "swarm")
        three = {"SWARM_STUDY": "three", "SWARM_SEED": "3"}
        deployment.up("--no-start", "--scale", "swarm=3", **three)
        swarms = deployment.containers("swarm")
        assert len(swarms) == 3, deployment.compose("ps", "-a", timeout=60).stdout
        (server,) = deployment.containers("server")  # stopped with the first swarm
        started = run(["docker", "start", server], 120)
        assert started.returncode == 0, tail(started)
        wait_until_healthy(server)
        with frozen(server):
            started = run(["docker", "start", *swarms], 120)
            assert started.returncode == 0, tail(started)
            for swarm in swarms:
                wait_for_connection(swarm, port=8000)
        waited = run(["docker", "wait", *swarms], 900)
        assert waited.stdout.split() == ["0", "0", "0"], deployment.logs("swarm")
        # one JSON line per swarm, after compose's "swarm_1  | " prefix
        logs = deployment.logs("swarm")
        summaries = [
            json.loads(line.partition("| ")[2]) for line in logs.splitlines() if "{" in line
        ]
        assert len(summaries) == 3, logs
        served = [summary["users_served"] for summary in summaries]
        users = 20_000
        assert sum(served) == users
        print(f"users served per swarm: {served}")
        assert all(n > 0 for n in served), f"users served per swarm: {served}"

        study, remote = finished_study(deployment.port, users, "three")
    for summary in summaries:
        assert summary["study_id"] == study.id
        np.testing.assert_array_equal(remote, np.asarray(summary["estimate"], dtype=np.float64))
    assert_reproduces(remote, DEFAULT_POPULATION, seed=3)


@contextlib.contextmanager
def frozen(container: str) -> Iterator[None]:
    """``container`` paused (its processes frozen; the kernel still accepts connections to its
    sockets, which wait in the backlog) and unpaused after, whatever happens."""
    paused = run(["docker", "pause", container], 60)
    assert paused.returncode == 0, tail(paused)
    try:
        yield
    finally:
        unpaused = run(["docker", "unpause", container], 60)
        assert unpaused.returncode == 0, tail(unpaused)


def wait_until_healthy(container: str, timeout: float = 120.0) -> None:
    """Return once ``container``'s health check passes (docker-compose.yml's for the server)."""
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        inspect = ["docker", "inspect", "--format", "{{.State.Health.Status}}", container]
        status = run(inspect, 60).stdout.strip()
        if status == "healthy":
            return
        time.sleep(0.5)
    pytest.fail(f"container {container} not healthy after {timeout:.0f} s (last: {status!r})")


def wait_for_connection(container: str, port: int, timeout: float = 120.0) -> None:
    """Return once ``container`` holds an established TCP connection to a remote ``port``
    (/proc/net/tcp of its network namespace: state 01; the remote address's port is hex)."""
    remote = f":{port:04X} 01 "
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        table = run(["docker", "exec", container, "cat", "/proc/net/tcp"], 60).stdout
        if any(remote in " ".join(line.split()[2:4]) + " " for line in table.splitlines()[1:]):
            return
        time.sleep(0.2)
    pytest.fail(f"container {container} opened no connection to port {port} in {timeout:.0f} s")


def test_the_default_population_is_the_compose_files() -> None:
    """DEFAULT_POPULATION above is what docker-compose.yml gives SWARM_POPULATION by default."""
    text = (ROOT / "docker-compose.yml").read_text()
    assert f"POPULATION: ${{SWARM_POPULATION:-{DEFAULT_POPULATION}}}" in text


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
    lease_size = min(ENROLL_CHUNK, math.ceil(SCALED_USERS / LEASE_SHARES))
    assert len(leases) == math.ceil(SCALED_USERS / lease_size)
    closed = re.findall(rf"study {study.id}: round (\d+) \(", everything)
    assert sorted(int(i) for i in closed) == [r.index for r in study.rounds]
    assert all(r.status == "closed" and r.received == r.expected for r in study.rounds)


CLUSTER_EXPERIMENT = "heterogeneous-e3-frequency"
# How long the scheduler and workers may take to stop after the driver. Measured: all had exited
# when `up` returned (the scheduler at once, the workers' nannies ~9 s later, while the driver
# checked the claims). Longer means they were not shut down: they would run until `down`.
STOP_WITHIN_S = 60


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
    # docs/experiments.md's command (two workers, not four): naming experiment starts the
    # scheduler and workers it needs; it returns when the driver is done, with the driver's exit
    # code.
    up = deployment.up(
        "--build", "--scale", "dask-worker=2", "--exit-code-from", "experiment", "experiment"
    )
    assert "20 trials run, 0 already done, of 20" in up.stdout + up.stderr
    workers = deployment.containers("dask-worker")
    assert len(workers) == 2
    # The driver shut the scheduler and workers down (compose v1 stops only the named service):
    # their containers exit 0, and nothing of the project keeps running.
    began = time.monotonic()
    while deployment.running() and time.monotonic() - began < STOP_WITHIN_S:
        time.sleep(0.5)
    assert deployment.running() == [], f"still running {STOP_WITHIN_S} s after the driver"
    print(f"the scheduler and workers stopped {time.monotonic() - began:.1f} s after the driver")
    for container in [*deployment.containers("dask-scheduler"), *workers]:
        state = run(["docker", "inspect", "-f", "{{.State.ExitCode}}", container], 60)
        assert state.stdout.strip() == "0", tail(run(["docker", "logs", container], 60))

    listed = deployment.compose("ps", "-q", "-a", "experiment", timeout=60)
    (driver,) = listed.stdout.split()
    remote = tmp_path / "results"
    # docs/experiments.md's cp
    copied = run(["docker", "cp", f"{driver}:/results", str(remote)], 60)
    assert copied.returncode == 0, tail(copied)
    remote = remote / CLUSTER_EXPERIMENT / "trials.csv"

    experiment = load_experiment(ROOT / "experiments" / f"{CLUSTER_EXPERIMENT}.yaml")
    run_experiment(experiment, tmp_path / "local", progress=False)

    def without_timing(path: Path) -> list[list[str]]:
        rows = list(csv.reader(io.StringIO(path.read_text())))
        keep = [i for i, name in enumerate(rows[0]) if name not in TIMING_COLUMNS]
        return [[r[i] for i in keep] for r in rows]

    # the workers run the image's Python, not this one: floats may differ in the last digits
    local = without_timing(tmp_path / "local" / "trials.csv")
    assert same_rows(without_timing(remote), local), (without_timing(remote), local)


def test_the_cluster_profile_spreads_a_population_over_the_workers(compose: list[str]) -> None:
    """`fedldp swarm --cluster` in the ``cluster`` profile: the parts on two workers run every
    user of one study, whose estimate is the in-process one."""
    with deployed(
        compose,
        "CLUSTER_SERVER_PORT",
        ("cluster",),
        SCHEDULER_PORT=str(free_port()),
        SWARM_POPULATION=SCALED_POPULATION,
        SWARM_STUDY="spread",
    ) as deployment:
        deployment.build_and_start("--scale", "dask-worker=2", "swarm-cluster")
        (driver,) = deployment.containers("swarm-cluster")
        summary = deployment.swarm_summary(driver, "server-cluster")
        study, remote = finished_study(deployment.port, SCALED_USERS, "spread")
        assert summary["study_id"] == study.id
        assert summary["users_served"] == SCALED_USERS
        np.testing.assert_array_equal(remote, np.asarray(summary["estimate"], dtype=np.float64))
        assert_reproduces(remote, SCALED_POPULATION)


# What deploy/Dockerfile copies from the repository root (its COPY lines), all the build context
# needs; .dockerignore keeps everything else out (docs/ alone was 69 MB of the 158 MB sent).
CONTEXT = (
    "pyproject.toml",
    "README.md",
    "fedldp/py.typed",
    # deploy/Dockerfile's `COPY fedldp/*.py`: every module of the top-level package
    *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "fedldp").glob("*.py")),
)
CONTEXT_TREES = (
    "protocol/",
    "client/",
    "server/",
    "fedldp/testing/",
    "fedldp/templates/",
    "experiments/",
    "deploy/wheelhouse/",
    "deploy/plugins/",  # protocol plugins' wheels (tests/deploy/test_compose_plugins.py)
)
# The context less the wheelhouse (sources and README.md: 1.3 MB when written): it stays well
# below this, while one stray folder (docs/, tests/, .git) would not.
CONTEXT_SOURCES_MAX_BYTES = 4_000_000


def test_the_build_context_holds_only_what_the_image_copies(compose: list[str]) -> None:
    """The files the engine receives as the build context of the repository root (the legacy
    builder's, as Debian's Docker and compose v1 build): an image that copies the whole context,
    listed."""
    tag = f"fedldp-context-{uuid.uuid4().hex[:10]}"
    dockerfile = f"FROM {BASE_IMAGE}\nCOPY . /context/\n"
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    built = run(["docker", "build", "-f", "-", "-t", tag, "."], 600, input=dockerfile, env=env)
    assert built.returncode == 0, tail(built)
    try:
        listed = run(
            ["docker", "run", "--rm", tag, "find", "/context", "-type", "f", "-printf", "%s %P\n"],
            120,
        )
        assert listed.returncode == 0, tail(listed)
    finally:
        run(["docker", "image", "rm", tag], 120)
    sizes = {
        path: int(size)
        for size, path in (line.split(" ", 1) for line in listed.stdout.splitlines())
    }
    strays = [p for p in sizes if p not in CONTEXT and not p.startswith(CONTEXT_TREES)]
    assert strays == [], f"the build context holds files the image does not copy: {strays[:20]}"
    assert not [p for p in sizes if "__pycache__" in p or p.endswith(".pyc")]
    # ... and every file the image does copy (the sources git tracks)
    tracked = run(["git", "ls-files", "--", *CONTEXT, *CONTEXT_TREES], 60).stdout.split()
    wheels = [p for p in sizes if p.startswith("deploy/wheelhouse/")]
    assert wheels, "the wheelhouse (deploy/offline-base-image.sh fills it) is not in the context"
    missing = sorted(set(tracked) - set(sizes) - {"deploy/wheelhouse/.gitignore"})
    assert missing == [], f"the build context misses {missing[:20]}"
    sources = sum(size for path, size in sizes.items() if path not in wheels)
    assert sources < CONTEXT_SOURCES_MAX_BYTES, f"{sources} bytes of sources in the context"
    sent = re.search(r"Sending build context to Docker daemon\s+(\S+)", built.stdout + built.stderr)
    print(f"build context: {sent and sent.group(1)}; {sources} bytes besides the wheelhouse")

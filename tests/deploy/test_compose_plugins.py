"""A protocol plugin in the compose deployment (issue 25 items 5 and 6; docs/extending.md,
"Deploying"): the example plugin's wheel (examples/protocol-plugin) in deploy/plugins/, the
image rebuilt by ``up --build`` (every layer cached but the plugin's two), the server serving
``example-krr`` with its distribution's origin and version and a swarm running a study of it
whose estimate equals ``fedldp simulate``'s for the same seed (docs/architecture.md: 1e-9
relative). The commands are the guide's (tests/test_docs_extending.py checks that they are
these). Run like the other deploy tests: ``bash scripts/ci-docker`` (``pytest -m docker``).
"""

from __future__ import annotations

import json
import shlex
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from fedldp.protocol.core.wire import ProtocolList, ResultView, StudyList
from tests.deploy.test_compose import (
    RELATIVE_TOLERANCE,
    SEED,
    compose,  # noqa: F401  (the fixture)
    deployed,
    run,
    tail,
)
from tests.plugins import pip_installed

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "protocol-plugin"
PROJECT = tomllib.loads((EXAMPLE / "pyproject.toml").read_text(encoding="utf-8"))["project"]
PLUGINS = ROOT / "deploy" / "plugins"
PLUGIN_WHEEL = "pip wheel --no-deps --wheel-dir deploy/plugins examples/protocol-plugin"
"""The guide's command putting the plugin's wheel where deploy/Dockerfile installs it from."""
PLUGIN_SETTINGS = {
    "SWARM_PROTOCOL": "example-krr",
    "SWARM_POPULATION": (
        "--users 2000 --samples 3 --distribution categorical --items 5 --epsilon 1"
    ),
}
"""The guide's compose settings: the swarm's study is of the plugin's protocol."""
PLUGIN_UP = ("up", "--build", "--exit-code-from", "swarm")
"""The guide's compose command (``scripts/compose`` + these)."""


@pytest.fixture
def plugin_wheel() -> Iterator[Path]:
    """The example's wheel in deploy/plugins/, made by the guide's command; removed after (it
    would be in every image built from the folder)."""
    stray = sorted(p.name for p in PLUGINS.glob("*.whl"))
    assert stray == [], f"deploy/plugins/ already holds wheels {stray}: the test needs it empty"
    made = run([sys.executable, "-m", *shlex.split(PLUGIN_WHEEL)], 600)
    assert made.returncode == 0, tail(made)
    try:
        (wheel,) = PLUGINS.glob("*.whl")
        yield wheel
    finally:
        for path in PLUGINS.glob("*.whl"):
            path.unlink()


def simulated_estimate(population: str, seed: int) -> list[float]:
    """``fedldp simulate`` of the plugin's protocol (installed for the call) with the swarm's
    population and seed."""
    fedldp = str(Path(sys.executable).parent / "fedldp")
    command = [fedldp, "simulate", "--protocol", "example-krr", "--seed", str(seed), "--json"]
    with pip_installed(EXAMPLE, PROJECT["name"]):
        ran = run([*command, *population.split()], 300)
    assert ran.returncode == 0, tail(ran)
    estimate: list[float] = json.loads(ran.stdout)["estimate"]
    return estimate


def wait_healthy(http: httpx.Client, within_s: float = 60) -> None:
    """Return once the server answers ``/health`` (fail after ``within_s``)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            if http.get("/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"the server was not healthy within {within_s} s"
        time.sleep(0.5)


def test_the_image_with_the_plugin_serves_it_to_a_swarm(
    compose: list[str],  # noqa: F811
    plugin_wheel: Path,
) -> None:
    assert plugin_wheel.name.startswith(f"fedldp_example_krr-{PROJECT['version']}-")
    settings = {"FEDLDP_IMAGE_TAG": "deploy-test-plugins", **PLUGIN_SETTINGS}
    with deployed(compose, "SERVER_PORT", (), **settings) as deployment:
        began = time.monotonic()
        deployment.up(*PLUGIN_UP[1:])
        print(f"build and run with the plugin: {time.monotonic() - began:.0f} s")
        logs = deployment.logs("swarm")
        # one JSON line, after compose's "swarm_1  | " prefix
        (line,) = [line for line in logs.splitlines() if "{" in line]
        summary = json.loads(line.partition("| ")[2])
        # --exit-code-from stopped the server with the swarm: start it again on its volume
        deployment.up("--detach", "server")
        with httpx.Client(base_url=f"http://127.0.0.1:{deployment.port}", timeout=30) as http:
            wait_healthy(http)
            listed = ProtocolList.model_validate_json(http.get("/v1/protocols").content)
            (study,) = StudyList.model_validate_json(http.get("/v1/studies").content).studies
            result = ResultView.model_validate_json(
                http.get(f"/v1/studies/{study.id}/result").content
            )
        served = {p.name: p for p in listed.protocols}
        assert served["example-krr"].origin == PROJECT["name"]
        assert served["example-krr"].origin_version == PROJECT["version"]
        assert listed.broken == []
        assert (study.protocol, study.phase) == ("example-krr", "finished")
        assert (study.protocol_origin, study.protocol_version) == (
            PROJECT["name"],
            PROJECT["version"],
        )
        assert summary["study_id"] == study.id
        assert result.estimate == summary["estimate"]
    local = np.asarray(simulated_estimate(PLUGIN_SETTINGS["SWARM_POPULATION"], SEED))
    remote = np.asarray(summary["estimate"], dtype=np.float64)
    relative = float(np.max(np.abs(remote - local))) / float(np.max(np.abs(local)))
    assert relative <= RELATIVE_TOLERANCE, f"HTTP {remote} vs in process {local}: {relative:.3g}"

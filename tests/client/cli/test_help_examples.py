"""Every example in every ``fedldp … --help`` runs (issue 23: ``fedldp reproduce --help`` named an
experiment that does not exist).

The parser tree of client/cli is walked and each help text's ``examples:`` lines (a trailing
backslash continues a line) are read with shlex. Each example runs as a program (``fedldp``'s
main in a fresh interpreter) in one scratch folder holding what the examples name (the
repository's experiments/, a users.csv), against one live server, within ``LIMIT_S`` seconds, and
must exit with status 0. Only what ``adapt`` replaces differs from the printed text: the example
servers' URLs (the test's server instead), the study id placeholder ``6f1c...`` (a study of the
test's server: a fresh one for ``swarm --study``, a finished classification study otherwise),
and the port of ``fedldp server`` (a free one; the server runs until it answers ``/health``,
then must shut down cleanly on SIGTERM). ``EXEMPT`` names the few examples that
need what only a deployment has, each with the reason and the test that runs its equivalent.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest

from fedldp.client.cli.main import build_parser
from fedldp.client.swarm.server_process import free_port
from tests.live import sqlite_server

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]
FEDLDP = [
    sys.executable,
    "-c",
    "import sys; from fedldp.client.cli.main import main; sys.exit(main())",
]
LIMIT_S = 300.0
"""Longest an example may take (the slowest, 800 quick-scale trials, takes ~30 s on a quiet
machine: the limit leaves room for a loaded one)."""
PLACEHOLDER = "6f1c..."
EXAMPLE_SERVERS = ("http://127.0.0.1:8000", "http://10.0.0.5:8000")
COMPOSE_DATABASE = (
    "the database host `db` exists only in the compose deployment; the server tests run every "
    "request on the local PostgreSQL as well (tests/server/conftest.py)"
)
EXEMPT = {
    "fedldp server --database-url postgresql+psycopg://fedldp@db/fedldp --workers 2": (
        COMPOSE_DATABASE
    ),
    "fedldp db upgrade --database-url postgresql+psycopg://fedldp@db/fedldp": COMPOSE_DATABASE,
    "fedldp experiment run heterogeneous-e1-weighting --cluster "
    "tcp://scheduler:8786": "needs the compose deployment's Dask scheduler; "
    "tests/client/experiments/test_cluster.py runs trials with --cluster on a LocalCluster",
    "fedldp swarm --create user-mean --users 1000000 --samples 16 --seed 1 --batch "
    "--cluster tcp://127.0.0.1:8786": "needs a Dask scheduler listening on 127.0.0.1:8786; "
    "tests/client/swarm/test_spread.py runs fedldp swarm --cluster on a LocalCluster",
    "fedldp reproduce --scale paper --jobs 2": "every experiment at the papers' scale takes "
    "hours; the same command at the quick scale (fedldp reproduce NAME) runs here",
}
"""Example → why it does not run here."""


def parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subcommand's parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def example_lines(text: str | None) -> list[str]:
    """The commands after ``examples:`` in a help text, up to its first blank line."""
    if not text or "examples:" not in text:
        return []
    found: list[str] = []
    current = ""
    for line in text.split("examples:", 1)[1].splitlines()[1:]:
        if not line.strip():
            break
        current = f"{current} {line.strip()}".strip()
        if current.endswith("\\"):
            current = current[:-1].rstrip()
            continue
        found.append(current)
        current = ""
    return found


def all_examples() -> list[str]:
    """Every example once, in the order of the help texts."""
    found = (
        example
        for parser in parsers(build_parser())
        for text in (parser.description, parser.epilog)
        for example in example_lines(text)
    )
    return list(dict.fromkeys(found))


EXAMPLES = all_examples()


def test_the_examples_are_found_and_parse() -> None:
    """Every help text that shows examples yields commands of ``fedldp`` that its parser takes
    (the exempt ones included), and every exemption is still an example."""
    assert len(EXAMPLES) >= 25
    assert set(EXEMPT) <= set(EXAMPLES)
    parser = build_parser()
    for example in EXAMPLES:
        argv = shlex.split(example)
        assert argv[0] == "fedldp", example
        if argv[1:] != ["simulate", "--help"]:
            assert getattr(parser.parse_args(argv[1:]), "handler", None) is not None, example


@dataclass
class Setting:
    """The scratch folder, the live server, and the examples already run there (in any test
    order, an example that needs another's output runs that one first)."""

    folder: Path
    server: str
    study: str
    env: dict[str, str]
    done: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)


NEEDS = {
    "fedldp experiment plot results/hw": "fedldp experiment run "
    "heterogeneous-e1-weighting --out results/hw --jobs 2",
}
NEEDS["fedldp experiment check results/hw"] = NEEDS["fedldp experiment plot results/hw"]


def program(argv: list[str], setting: Setting) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FEDLDP, *argv],
        cwd=setting.folder,
        env=setting.env,
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
    )


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setting]:
    folder = tmp_path_factory.mktemp("examples")
    (folder / "experiments").symlink_to(ROOT / "experiments")
    (folder / "examples").symlink_to(ROOT / "examples")  # the campaign templates
    rng = np.random.default_rng(0)
    rows = [f"{u},{rng.random():.4f},1.0" for u in range(1000) for _ in range(4)]
    (folder / "users.csv").write_text("user_id,value,eps\n" + "\n".join(rows) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDLDP_")}
    with sqlite_server(tmp_path_factory.mktemp("examples-server")) as server:
        env["FEDLDP_SERVER"] = server.url
        made = Setting(folder, server.url, "", env)
        # the finished study of `studies show|result|watch|predict`: a classifier (predict)
        argv = [
            "swarm", "--create", "user-classify", "--users", "4000", "--samples", "16",
            "--distribution", "binned-classification", "--epsilon", "2", "--param",
            "bins_per_axis=4", "--seed", "8", "--batch", "1000", "--json", "--quiet",
        ]  # fmt: skip
        done = program(argv, made)
        assert done.returncode == 0, done.stderr
        made.study = json.loads(done.stdout)["study_id"]
        yield made


def adapt(example: str, setting: Setting) -> list[str]:
    """The example's arguments (after ``fedldp``) as they run here (module docstring)."""
    for url in EXAMPLE_SERVERS:
        example = example.replace(url, setting.server)
    if PLACEHOLDER in example:
        study = setting.study
        if example.startswith("fedldp swarm --study"):
            created = httpx.post(
                f"{setting.server}/v1/studies",
                json={"protocol": "user-mean", "params": {"samples_per_user": 64}, "seed": 1},
            )
            assert created.status_code == 201, created.text
            study = created.json()["id"]
        example = example.replace(PLACEHOLDER, study[:8])  # a unique prefix will do
    argv = shlex.split(example)[1:]
    if argv[0] == "server":
        port = str(free_port())
        if "--port" in argv:
            argv[argv.index("--port") + 1] = port
        else:
            argv += ["--port", port]
    return argv


def run_example(example: str, setting: Setting) -> subprocess.CompletedProcess[str]:
    if example not in setting.done:
        if example in NEEDS:
            needed = run_example(NEEDS[example], setting)
            assert needed.returncode == 0, needed.stderr
        setting.done[example] = program(adapt(example, setting), setting)
    return setting.done[example]


def serve(argv: list[str], setting: Setting) -> None:
    """``fedldp server …``: answers /health, then stops cleanly on SIGTERM."""
    port = argv[argv.index("--port") + 1]
    with subprocess.Popen(
        [*FEDLDP, *argv], cwd=setting.folder, env=setting.env, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            deadline = time.monotonic() + LIMIT_S
            while True:
                assert process.poll() is None, process.communicate()[1]
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the server did not answer /health"
                time.sleep(0.2)
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=60)
            # uvicorn shuts down cleanly, then ends by the signal it got (as the unhandled
            # signal would have ended it)
            assert process.returncode == -signal.SIGTERM, err
            assert "Application shutdown complete" in err
        finally:
            if process.poll() is None:
                process.kill()


RUN = [e for e in EXAMPLES if e not in EXEMPT]


@pytest.mark.parametrize("example", RUN, ids=[e.removeprefix("fedldp ") for e in RUN])
def test_the_example_runs(example: str, setting: Setting) -> None:
    if example.startswith("fedldp server"):
        serve(adapt(example, setting), setting)
        return
    done = run_example(example, setting)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr

"""docs/extending.md, run against the example it shows (examples/protocol-plugin, installed for
the module): its Python blocks in order in one namespace, in a new process (only new processes
see what pip installs), and its safe shell blocks (the ``fedldp`` commands); the module it shows
is the example's own file, its ``pyproject.toml`` the example's own, and the failure report it
prints is what the kit prints. Its ``sh`` blocks ("Deploying"): the Dask one runs (a scheduler
and a worker of this machine, on a free port, results in a temporary folder), the compose one
is what tests/deploy/test_compose_plugins.py runs (``bash scripts/ci-docker`` runs that). The
sections of ``SEPARATE`` run in their own tests: the skeleton's commands in a scratch folder
(``fedldp new-protocol``, its install, its kit test), the law's module and entry point are the
test law's (tests/client/population/plugin_law.py), its commands run with that law installed."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedldp.client.swarm.server_process import free_port
from tests.deploy.test_compose_plugins import PLUGIN_SETTINGS, PLUGIN_UP, PLUGIN_WHEEL
from tests.plugins import LAW_DISTRIBUTION, LAW_ENTRY_POINTS, law_distribution, pip_installed

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "extending.md"
EXAMPLE = ROOT / "examples" / "protocol-plugin"
FEDLDP = str(Path(sys.executable).parent / "fedldp")
BIN = Path(sys.executable).parent
DASK_PORT = "8786"
"""The scheduler port of the page's Dask block (the test runs it on a free one)."""
NOT_RUN = {"pip install -e examples/protocol-plugin": "what the installed fixture does"}
"""Shell lines of the page not run as written, and why."""
RUNNER = """
import json, sys
namespace = {"__name__": "extending_guide"}
for block in json.load(sys.stdin):
    exec(compile(block, "docs/extending.md", "exec"), namespace)
"""


SKELETON = "Start from a skeleton"
LAW = "Your own population law"
SEPARATE = (SKELETON, LAW)
"""Sections (by their heading's words) whose blocks run in tests of their own."""


SHELLS = ("bash", "sh")


def blocks(language: str, section: str | None = None) -> list[str]:
    """The page's ``language`` blocks: of the section whose heading holds ``section``, or, by
    default, of every section but ``SEPARATE``'s; a shell line's ``.venv/bin/`` prefix (the
    checkout's environment, as the other pages write it) is dropped, the command checked."""
    text = GUIDE.read_text(encoding="utf-8")
    parts = re.split(r"^(?=## )", text, flags=re.MULTILINE)
    if section is None:
        chosen = [p for p in parts if not any(s in p.split("\n", 1)[0] for s in SEPARATE)]
    else:
        chosen = [p for p in parts if section in p.split("\n", 1)[0]]
        assert chosen, f"the page lost its section {section!r}"
    pattern = rf"^```{language}\n(.*?)^```$"
    found = [b for p in chosen for b in re.findall(pattern, p, re.DOTALL | re.MULTILINE)]
    if language in SHELLS:  # the checkout's venv, as every page writes it: the same commands
        found = [re.sub(r"^\.venv/bin/", "", b, flags=re.MULTILINE) for b in found]
    return found


@pytest.fixture(scope="module")
def installed() -> Iterator[None]:
    with pip_installed(EXAMPLE, "fedldp-example-krr"):
        yield


def test_the_page_shows_the_example_as_it_is() -> None:
    module = (EXAMPLE / "fedldp_example_krr" / "krr.py").read_text(encoding="utf-8")
    # verbatim, as one block (the contract's shorter snippets come before it)
    assert module in blocks("python")
    assert blocks("toml") == [(EXAMPLE / "pyproject.toml").read_text(encoding="utf-8")]
    assert "[docs/extending.md](docs/extending.md)" in (ROOT / "README.md").read_text("utf-8")


def test_the_python_blocks_run_in_order(installed: None) -> None:
    run = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(blocks("python")),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "protocol 'example-krr':" in run.stdout
    assert "failed" not in run.stdout.split("protocol 'example-krr-leaky':")[0], run.stdout
    shown = [b for b in blocks("text") if "privacy-audit: failed" in b]
    assert len(shown) == 1
    for line in shown[0].splitlines():  # the page's failure report is the kit's, line for line
        assert line in run.stdout.splitlines(), (line, run.stdout)


def test_the_shell_blocks_run(installed: None) -> None:
    lines = [line for block in blocks("bash") for line in block.splitlines() if line.strip()]
    assert [line for line in lines if not line.startswith("fedldp ")] == list(NOT_RUN)
    runs = {
        line: subprocess.run(
            [FEDLDP, *line.split()[1:]], capture_output=True, text=True, cwd=ROOT, check=False
        )
        for line in lines
        if line.startswith("fedldp ")
    }
    for line, run in runs.items():
        assert run.returncode == 0, (line, run.stdout, run.stderr)
    listed = json.loads(runs["fedldp protocols --json"].stdout)
    served = {p["name"]: p for p in listed["protocols"]}
    assert served["example-krr"]["origin"] == "fedldp-example-krr"
    simulated = [run.stdout for line, run in runs.items() if "simulate" in line]
    assert simulated, "the page lost its simulate command"
    assert "example-krr" in simulated[0]


def deploy_blocks() -> dict[str, list[str]]:
    """The page's ``sh`` blocks (section "Deploying") by what they deploy to: their commands
    (a line continued with a backslash joined to the next)."""
    found: dict[str, list[str]] = {}
    for block in blocks("sh"):
        joined = re.sub(r"\\\n\s*", " ", block)
        lines = [line for line in joined.splitlines() if line.strip()]
        found["compose" if "scripts/compose" in block else "dask"] = lines
    assert len(found) == len(blocks("sh")) == 2, "an sh block of the page is not checked"
    return found


@pytest.mark.slow  # a Dask scheduler, a worker and 200 trials
def test_the_dask_block_runs(installed: None, tmp_path: Path) -> None:
    port = str(free_port())
    started: list[subprocess.Popen[bytes]] = []
    runs: dict[str, subprocess.CompletedProcess[str]] = {}
    try:
        for line in deploy_blocks()["dask"]:
            words = [w.replace(DASK_PORT, port) for w in shlex.split(line.removesuffix(" &"))]
            words = [str(tmp_path / w) if w.startswith("results/") else w for w in words]
            if line.endswith(" &"):  # a service: started, stopped after the block
                assert words[0] == "dask", line
                with (tmp_path / f"{words[1]}.log").open("wb") as log:  # the child keeps it
                    command = [str(BIN / "dask"), *words[1:]]
                    started.append(subprocess.Popen(command, stdout=log, stderr=log))
                continue
            assert words[0] == "fedldp", line
            runs[words[2]] = subprocess.run(
                [FEDLDP, *words[1:]], capture_output=True, text=True, cwd=ROOT, timeout=900
            )
            assert runs[words[2]].returncode == 0, (line, runs[words[2]].stderr)
    finally:
        for process in started:
            process.terminate()
            process.wait(timeout=60)
    assert list(runs) == ["run", "check", "plot"]
    assert "200 trials run, 0 already done, of 200" in runs["run"].stderr + runs["run"].stdout
    assert runs["check"].stdout.startswith("holds"), runs["check"].stdout
    assert (tmp_path / "results" / "krr-epsilon" / "plot-1.png").stat().st_size > 20_000


def test_the_compose_block_is_what_the_compose_test_runs() -> None:
    wheel, up = deploy_blocks()["compose"]
    assert wheel == PLUGIN_WHEEL
    words = shlex.split(up)
    settings = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    assert settings == PLUGIN_SETTINGS
    assert words[len(settings) :] == ["scripts/compose", *PLUGIN_UP]


def shell_lines(section: str) -> list[str]:
    return [line for block in blocks("bash", section) for line in block.splitlines() if line]


@pytest.mark.slow
def test_the_skeleton_section_runs(tmp_path: Path) -> None:
    """``fedldp new-protocol`` in a scratch folder, then the page's install, listing, simulation
    and kit test of what it wrote (each line of the section is one of these, or the test fails:
    the page cannot drift from what runs)."""
    lines = shell_lines(SKELETON)
    first, install, *rest = lines
    assert first.startswith("fedldp new-protocol ")
    made = subprocess.run(
        [FEDLDP, *first.split()[1:]], capture_output=True, text=True, cwd=tmp_path
    )
    assert made.returncode == 0, made.stderr
    assert install.startswith("pip install -e ")
    folder = tmp_path / install.split()[-1]
    runs: dict[str, subprocess.CompletedProcess[str]] = {}
    with pip_installed(folder, folder.name):
        for line in rest:
            if line.startswith("fedldp "):
                argv, cwd = [FEDLDP, *line.split()[1:]], tmp_path
            else:
                where, sep, command = line.partition(" && ")
                assert (sep, where.split()[0], command) == (" && ", "cd", "pytest"), line
                argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
                cwd = tmp_path / where.split()[1]
            runs[line] = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    for line, run in runs.items():
        assert run.returncode == 0, (line, run.stdout, run.stderr)
    name = first.split()[2]
    listed = {p["name"]: p for p in json.loads(runs["fedldp protocols --json"].stdout)["protocols"]}
    assert (listed[name]["origin"], listed[name]["origin_version"]) == (folder.name, "0.1.0")
    assert any("1 passed" in run.stdout for line, run in runs.items() if "pytest" in line)


def test_the_law_section_shows_the_test_law_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    law = ROOT / "tests" / "client" / "population" / "plugin_law.py"
    (module,) = blocks("python", LAW)
    assert module == law.read_text(encoding="utf-8")
    assert blocks("toml", LAW) == [LAW_ENTRY_POINTS]
    page = types.ModuleType("extending_guide_law")  # a module: dataclasses look theirs up
    monkeypatch.setitem(sys.modules, page.__name__, page)
    exec(compile(module, "docs/extending.md", "exec"), page.__dict__)
    assert page.Triangle(high=2).mean() == 1.0


@pytest.mark.slow
def test_the_law_section_runs(tmp_path: Path) -> None:
    lines = shell_lines(LAW)
    assert all(line.startswith("fedldp ") for line in lines), lines
    with pip_installed(law_distribution(tmp_path), LAW_DISTRIBUTION):
        runs = {
            line: subprocess.run(
                [FEDLDP, *line.split()[1:]], capture_output=True, text=True, cwd=tmp_path
            )
            for line in lines
        }
    for line, run in runs.items():
        assert run.returncode == 0, (line, run.stdout, run.stderr)
    assert f"[{LAW_DISTRIBUTION} 0.2.1]" in runs["fedldp laws"].stdout
    (simulated,) = [run.stdout for line, run in runs.items() if "simulate" in line]
    law = json.loads(simulated)["population"]["distribution"]
    assert law == {
        "name": "triangle",
        "law_params": {"high": 2},
        "plugin": LAW_DISTRIBUTION,
        "plugin_version": "0.2.1",
    }

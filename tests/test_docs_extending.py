"""docs/extending.md, run against the example it shows (examples/protocol-plugin, installed for
the module): its Python blocks in order in one namespace, in a new process (only new processes
see what pip installs), and its safe shell blocks (the ``fedldp`` commands); the module it shows
is the example's own file, its ``pyproject.toml`` the example's own, and the failure report it
prints is what the kit prints."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.plugins import pip_installed

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "extending.md"
EXAMPLE = ROOT / "examples" / "protocol-plugin"
FEDLDP = str(Path(sys.executable).parent / "fedldp")
NOT_RUN = {"pip install -e examples/protocol-plugin": "what the installed fixture does"}
"""Shell lines of the page not run as written, and why."""
RUNNER = """
import json, sys
namespace = {"__name__": "extending_guide"}
for block in json.load(sys.stdin):
    exec(compile(block, "docs/extending.md", "exec"), namespace)
"""


def blocks(language: str) -> list[str]:
    text = GUIDE.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)


@pytest.fixture(scope="module")
def installed() -> Iterator[None]:
    with pip_installed(EXAMPLE, "fedldp-example-krr"):
        yield


def test_the_page_shows_the_example_as_it_is() -> None:
    module = (EXAMPLE / "fedldp_example_krr" / "krr.py").read_text(encoding="utf-8")
    assert blocks("python")[0] == module
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

"""``fedldp simulate --json`` gives the outputs recorded before the package moved into the
``fedldp`` namespace (issue 10: the move changes no number).

Integers, strings and the structure must match exactly; floats to a relative 1e-12
(``tests.floats``: the recording machine and another CPU differ in the last digits).

The files in ``golden/`` were written by the pre-move tree with the commands of
``golden/commands.json``; a change that alters any estimate, error bar, ledger or diagnostic for
these seeds fails here and must say why in its commit (then re-record the file).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedldp.client.cli.main import main
from tests.floats import same

GOLDEN = Path(__file__).with_name("golden")
COMMANDS: dict[str, list[str]] = json.loads((GOLDEN / "commands.json").read_text())
TIMINGS = ("elapsed_s",)
"""Wall-clock keys: the only ones allowed to differ between runs."""


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_simulate_reproduces_the_recorded_output(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--json", "--quiet", *COMMANDS[name]]) == 0
    got = json.loads(capsys.readouterr().out)
    want = json.loads((GOLDEN / f"{name}.json").read_text())
    for timing in TIMINGS:
        assert isinstance(got.pop(timing), float)
        want.pop(timing)
    assert same(got, want), (got, want)

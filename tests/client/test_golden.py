"""``fedldp simulate --json`` gives the outputs recorded before the package moved into the
``fedldp`` namespace (issue 10: the move changes no number).

Integers, strings and the structure must match exactly; floats to a relative 1e-12. The recording
machine and another CPU can differ in the last digits (measured: up to 1.5e-14 relative, on an
AVX-512 machine against the recording one): numpy picks its SIMD kernels per CPU, and they sum in
a different order. A change in what is computed moves a number by far more than that. (On one
machine, HTTP and in-process runs agree to the last digit; the e2e tests check that exactly.)

The files in ``golden/`` were written by the pre-move tree with the commands of
``golden/commands.json``; a change that alters any estimate, error bar, ledger or diagnostic for
these seeds fails here and must say why in its commit (then re-record the file).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fedldp.client.cli.main import main

GOLDEN = Path(__file__).with_name("golden")
COMMANDS: dict[str, list[str]] = json.loads((GOLDEN / "commands.json").read_text())
TIMINGS = ("elapsed_s",)
"""Wall-clock keys: the only ones allowed to differ between runs."""
FLOAT_RTOL = 1e-12
"""100x the largest rounding difference measured between two CPUs."""


def same(got: object, want: object) -> bool:
    """Equal structure and values; floats within ``FLOAT_RTOL`` of each other (relative)."""
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and got.keys() == want.keys()
            and all(same(got[k], want[k]) for k in want)
        )
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(same(g, w) for g, w in zip(got, want, strict=True))
        )
    if isinstance(want, float) and isinstance(got, float):
        return math.isclose(got, want, rel_tol=FLOAT_RTOL, abs_tol=0.0)
    return type(got) is type(want) and got == want


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

"""``fedldp simulate`` runs the memoizing protocols (the catalogue registers them)."""

from __future__ import annotations

import json

import pytest

from fedldp.client.cli.main import main


@pytest.mark.parametrize(
    ("protocol", "population"),
    [
        ("memo-1bitmean", ["--distribution", "uniform", "--low", "0", "--high", "1"]),
        ("memo-rappor", ["--distribution", "categorical", "--items", "5"]),
        ("memo-dbitflip", ["--distribution", "categorical", "--items", "5"]),
    ],
)
@pytest.mark.parametrize("memoize", ["true", "false"])
def test_simulate_runs(
    protocol: str, population: list[str], memoize: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--protocol", protocol, "--users", "4000", *population]
    code = main([*argv, "--param", f"memoize={memoize}", "--seed", "3", "--json", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0
    assert err == ""
    result = json.loads(out)
    assert result["diagnostics"]["memoize"] is (memoize == "true")
    # within 4 half-widths of its 0.95 error bar: at least 7.8 standard deviations
    assert result["error"] <= 4 * result["error_bar"]["half_width"]

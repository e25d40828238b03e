"""The ``fedldp`` command line (client/cli/main.py), run in process."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from fedldp.client.cli.main import main
from fedldp.protocol.core.base.records import z_quantile
from tests.client.toy_protocol import ToyMean
from tests.plugins import PLUGIN, Plugins

SMALL = ["--users", "2000", "--samples", "8", "--distribution", "two-point", "--mean", "0.3"]


@pytest.fixture
def catalogue(monkeypatch: pytest.MonkeyPatch) -> Mapping[str, Any]:
    from fedldp.protocol import catalogue as cat

    monkeypatch.setitem(cat.CATALOGUE, "toy-mean", ToyMean())
    return cat.CATALOGUE


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_protocols_json_lists_every_protocol(
    catalogue: Mapping[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "protocols", "--json")
    listed = {p["name"]: p for p in json.loads(out)["protocols"]}
    assert code == 0
    assert set(listed) == set(catalogue)
    toy = listed["toy-mean"]
    assert toy["source"] == ToyMean.source
    assert toy["trust"] == "local"
    params = {q["name"]: q for q in toy["parameters"]}
    assert params["bound"]["default"] == 1.0
    assert not params["bound"]["required"]
    assert params["samples_per_user"]["required"]


def test_protocols_state_the_minimum_population_for_an_epsilon(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "protocols", "--json", "--epsilon", "0.5")
    listed = {p["name"]: p for p in json.loads(out)["protocols"]}
    assert code == 0
    user_mean = listed["user-mean"]["population"]
    assert user_mean["epsilon"] == 0.5
    assert user_mean["min_participants"] == 2 * 1200  # 2·⌈300/0.25⌉ (§1.5)
    assert "§1.5" in user_mean["rule"]
    assert listed["central-wme"]["population"]["min_participants"] == 2
    assert "sensitivity" in listed["user-mean"]["broadcast_fields"]
    code, out, _ = run(capsys, "protocols", "--epsilon", "0.5")
    assert code == 0
    assert "2400" in out


def test_protocols_table(catalogue: Mapping[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "protocols")
    assert code == 0
    assert "toy-mean" in out
    assert "samples_per_user (required)" in out
    assert "unequal ε" in out  # the column of how each protocol combines unequal ε's
    assert " ".join(ToyMean.heterogeneity.split()[:3]) in " ".join(out.split("│"))


def test_protocols_table_is_not_cut_off(
    catalogue: Mapping[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The table is laid out within the console it prints to (200 columns on a narrower
    terminal): every line of it ends with the table's right border. A column with a minimum
    width made rich widen it again after fitting the others, and cut the last column off."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, "protocols")
    assert code == 0
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    cut = [line for line in lines[start : end + 1] if line[-1] not in "┓┃┩│┤┘"]
    assert not cut, f"{len(cut)} of the table's lines are cut off, e.g. {cut[0]!r}"


def test_simulate_json(catalogue: Mapping[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "simulate",
        "--protocol",
        "toy-mean",
        *SMALL,
        "--param",
        "rounds=2",
        "--params-json",
        '{"bound": 2}',
        "--seed",
        "7",
        "--json",
        "--quiet",
    )
    result = json.loads(out)
    assert code == 0
    assert err == ""
    for key in ("estimate", "truth", "error", "error_bar", "epsilon_spent"):
        assert key in result
    assert result["params"] == {"bound": 2, "samples_per_user": 8, "rounds": 2, "overspend": 1.0}
    assert result["truth"] == 0.3
    assert result["n"] == 2000


def test_simulate_table_and_progress(
    catalogue: Mapping[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "simulate", "--protocol", "toy-mean", *SMALL, "--seed", "1", "--progress"
    )
    assert code == 0
    assert "estimate" in out
    assert "truth" in out
    assert "ε spent" in out


def test_param_values_are_json_or_strings(
    catalogue: Mapping[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys,
        "simulate",
        "--protocol",
        "toy-mean",
        *SMALL,
        "--param",
        "bound=wide",
        "--seed",
        "1",
    )
    assert code == 2
    assert err.startswith("error: bound: Input should be a valid number")


@pytest.mark.parametrize("argv", [[], ["simulate"], ["protocols"]])
def test_help_exits_zero(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    assert "usage:" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--protocol", "nope", *SMALL], "unknown protocol 'nope'"),
        (["--protocol", "toy-mean", *SMALL, "--param", "bound=-1"], "bound: Input should be"),
        (["--protocol", "toy-mean", *SMALL, "--param", "colour=1"], "colour: Extra inputs"),
        (["--protocol", "toy-mean", *SMALL, "--param", "bound"], "--param takes key=value"),
        (["--protocol", "toy-mean", *SMALL, "--params-json", "[1]"], "JSON object"),
        (["--protocol", "toy-mean", *SMALL, "--param", "overspend=2"], "beyond its declared"),
        (["--protocol", "toy-mean", *SMALL, "--epsilon", "0"], "epsilon must be finite and > 0"),
        (["--protocol", "toy-mean", *SMALL, "--sd", "2"], "--sd does not apply"),
        (["--protocol", "toy-mean", "--users", "5", "--dimension", "2"], "takes scalar data"),
        (["--protocol", "toy-mean", "--csv", "/nonexistent.csv"], "cannot read"),
        (["--protocol", "toy-mean", *SMALL, "--seed", "x"], "invalid int value"),
        (["--protocol", "toy-mean", *SMALL, "--distribution", "cauchy"], "unknown law 'cauchy'"),
        (["--protocol", "toy-mean", *SMALL, "--late", "0.1"], "--late takes F:S"),
        (["--protocol", "toy-mean", *SMALL, "--dropout", "2"], "dropout probability"),
        (["--protocol", "toy-mean", *SMALL, "--attack", "output"], "attack together with"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    catalogue: Mapping[str, Any], capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    argv = ["simulate", *extra]
    if "--seed" not in extra:
        argv += ["--seed", "1"]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse-level errors
        code = int(str(e.code))
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert message in err


def test_simulate_behaviour_flags(capsys: pytest.CaptureFixture[str]) -> None:
    common = ["simulate", "--protocol", "baseline-clipped-laplace", *SMALL, "--seed", "3"]
    code, out, _ = run(
        capsys, *common, "--json", "--dropout", "0.2", "--late", "0.1:20", "--round-deadline",
        "10", "--quorum", "0.5", "--join-late", "0.1", "--attack", "output", "--attackers",
        "0.05",
    )  # fmt: skip
    assert code == 0
    participation = json.loads(out)["diagnostics"]["participation"]
    (count,) = participation["rounds"]
    assert participation["joined_late"] > 0
    assert count["dropped"] > 0
    assert count["late"] > 0
    assert count["received"] == count["planned"] - count["dropped"] - count["late"]
    code, _, err = run(capsys, *common, "--dropout", "0.5", "--quorum", "0.9")
    assert code == 1
    assert err.startswith("error: the study failed: round 0 (report) got")


def test_missing_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys)
    assert code == 2
    assert "usage:" in err


GUIDE_USER_MEAN = (
    "simulate --protocol user-mean --users 100000 --samples 256 --distribution two-point "
    "--mean 0.3 --epsilon 1 --seed 7 --json"
)
"""The first command of docs/getting-started.md and docs/simulate.md (it was the README's)."""


@pytest.mark.slow
def test_guide_user_mean_command(capsys: pytest.CaptureFixture[str]) -> None:
    # The brief's first command, exactly as the pages show it; about a second (n = 10^5 users x
    # 256 samples).
    for page in ("getting-started.md", "simulate.md"):
        text = (Path(__file__).resolve().parents[3] / "docs" / page).read_text(encoding="utf-8")
        assert GUIDE_USER_MEAN in " ".join(text.replace("\\\n", " ").split()), page
    code, out, _ = run(capsys, *shlex.split(GUIDE_USER_MEAN))
    result = json.loads(out)
    assert code == 0
    assert result["truth"] == 0.3
    assert result["params"]["samples_per_user"] == 256
    # The estimate lies within 5 predicted standard errors (CLT: p ≈ 6e-7 of a false failure).
    bar = result["error_bar"]
    assert result["error"] <= 5 * bar["half_width"] / z_quantile(bar["level"])


def test_protocols_show_origins_and_broken_plugins(
    plugins: Plugins, capsys: pytest.CaptureFixture[str]
) -> None:
    plugins.install("fedldp-plug", "1.2.3", {"plug-mean": f"{PLUGIN}:PluginMean"})
    plugins.install("fedldp-impostor", "0.1", {"user-mean": f"{PLUGIN}:Impostor"})
    code, out, _ = run(capsys, "protocols", "--json")
    assert code == 0
    listed = json.loads(out)
    served = {p["name"]: p for p in listed["protocols"]}
    assert (served["plug-mean"]["origin"], served["plug-mean"]["origin_version"]) == (
        "fedldp-plug",
        "1.2.3",
    )
    assert served["user-mean"]["origin"] == "built-in"
    # the algorithm's revision (Protocol.version) beside its code's origin and version
    assert (served["plug-mean"]["version"], served["user-mean"]["version"]) == ("2", "1")
    (broken,) = listed["broken"]
    assert (broken["name"], broken["package"], broken["version"]) == (
        "user-mean",
        "fedldp-impostor",
        "0.1",
    )
    code, out, _ = run(capsys, "protocols")
    assert code == 0
    assert "plug-mean v2" in out
    assert "(fedldp-plug 1.2.3)" in out
    assert "broken plugin user-mean (fedldp-impostor 0.1), not served:" in " ".join(out.split())


@pytest.mark.parametrize(
    ("argv", "forwarded"),
    [
        ([], []),  # $FEDLDP_HOST, $FEDLDP_PORT (docs/server.md) or the server's defaults
        (["--port", "8080", "--host", "0.0.0.0"], ["--host", "0.0.0.0", "--port", "8080"]),
        (["--workers", "2"], ["--workers", "2"]),
    ],
)
def test_server_forwards_only_the_options_given(
    argv: list[str], forwarded: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fedldp server`` used to pass ``--host 127.0.0.1 --port 8000`` always, so the server's
    own ``FEDLDP_HOST``/``FEDLDP_PORT`` were never read."""
    from fedldp.client.cli import remote

    seen: list[list[str]] = []

    def become_server(args: list[str], env: Mapping[str, str] | None = None) -> int:
        seen.append(list(args))
        return 0

    monkeypatch.setattr(remote, "exec_server", become_server)
    assert main(["server", *argv]) == 0
    assert seen == [forwarded]

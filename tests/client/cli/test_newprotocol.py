"""``fedldp new-protocol`` (client/cli/newprotocol.py): the skeleton it writes is a working plugin
distribution. Fast tests: the names and folders it refuses, with one line; the protocol it
writes, loaded in process, estimates what it claims within its own error bar. The slow test
installs each kind (tests/plugins.py) and runs it as a user would: ``fedldp protocols``,
``fedldp simulate`` and the skeleton's own kit test, with pytest inside its folder."""

from __future__ import annotations

import importlib
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fedldp.client.cli.main import main
from fedldp.client.cli.newprotocol import KINDS, skeleton
from fedldp.protocol import catalogue as cat
from fedldp.protocol.api import Protocol, z_quantile
from tests.plugins import PLUGIN, Plugins, pip_installed

FEDLDP = str(Path(sys.executable).parent / "fedldp")
FALSE_FAILURE = 1e-6
"""The accuracy test's false-failure probability (normal approximation of the estimate)."""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("My-Mean", "is not a protocol name"),
        ("my_mean", "is not a protocol name"),
        ("my--mean", "is not a protocol name"),
        ("2mean", "is not a protocol name"),
        ("mean-", "is not a protocol name"),
        ("m" * 65, "at most 64 characters"),
        ("user-mean", "already fedldp's built-in protocol 'user-mean'"),
    ],
)
def test_a_bad_or_taken_name_is_one_line_and_writes_nothing(
    name: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "new-protocol", name, "--dir", str(tmp_path / "plugin"))
    assert code == 2
    assert err.startswith("error: "), err
    assert says in err
    assert err.count("\n") == 1, err
    assert out == ""
    assert not (tmp_path / "plugin").exists()


def test_a_name_an_installed_plugin_serves_is_taken(
    plugins: Plugins, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugins.install("fedldp-plug", "1.2.3", {"plug-mean": f"{PLUGIN}:PluginMean"})
    code, _, err = run(capsys, "new-protocol", "plug-mean", "--dir", str(tmp_path / "p"))
    assert code == 2
    assert "already fedldp-plug's protocol 'plug-mean'" in err


def test_a_name_a_broken_plugin_declares_is_taken(
    plugins: Plugins, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugins.install("fedldp-bad", "0.3", {"plug-bad": f"{PLUGIN}:NoSuchName"})
    code, _, err = run(capsys, "new-protocol", "plug-bad", "--dir", str(tmp_path / "p"))
    assert code == 2
    assert "declared by an installed plugin that is not served; fedldp-bad 0.3:" in err
    assert err.count("\n") == 1


def test_a_folder_that_is_not_empty_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    code, _, err = run(capsys, "new-protocol", "my-mean", "--dir", str(tmp_path))
    assert code == 2
    assert "is not an empty folder" in err
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


def test_an_empty_folder_is_filled_and_the_default_folder_is_named_after_the_distribution(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "empty").mkdir()
    code, out, _ = run(capsys, "new-protocol", "my-mean", "--dir", str(tmp_path / "empty"))
    assert code == 0
    assert (tmp_path / "empty" / "fedldp_my_mean" / "protocol.py").is_file()
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "new-protocol", "my-freq", "--kind", "frequency")
    assert code == 0
    folder = tmp_path / "fedldp-my-freq"
    made = {p.relative_to(folder).as_posix() for p in folder.rglob("*")}
    assert {
        "pyproject.toml",
        "README.md",
        "fedldp_my_freq/__init__.py",
        "fedldp_my_freq/protocol.py",
        "tests/test_protocol.py",
    } <= made
    assert "created fedldp-my-freq in fedldp-my-freq/" in out
    pyproject = (tmp_path / "fedldp-my-freq" / "pyproject.toml").read_text()
    assert '[project.entry-points."fedldp.protocols"]\nmy-freq = ' in pyproject


def test_the_help_shows_the_kinds_and_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["new-protocol", "--help"])
    out = capsys.readouterr().out
    assert "fedldp new-protocol my-mean" in out
    for kind in KINDS:
        assert kind in out


def _load(tmp_path: Path, name: str, kind: str, monkeypatch: pytest.MonkeyPatch) -> Protocol[Any]:
    """The skeleton's protocol, imported from its folder and put into the catalogue."""
    made = skeleton(name, tmp_path / name, kind)
    monkeypatch.syspath_prepend(str(made.directory))
    module = importlib.import_module(f"{made.package}.protocol")
    (protocol,) = (
        obj()
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, Protocol) and obj is not Protocol
    )
    monkeypatch.setitem(cat.CATALOGUE, name, protocol)
    return protocol


@pytest.mark.parametrize(
    ("kind", "population"),
    [
        ("mean", "--users 40000 --samples 4 --distribution uniform --low -0.5 --high 1"),
        ("frequency", "--users 40000 --samples 4 --distribution categorical --items 6 --zipf 1"),
    ],
)
def test_the_skeleton_estimates_within_its_error_bar(
    kind: str,
    population: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The written protocol is unbiased and its error bar holds: its half-width h is z·σ̄ at
    the bar's level (Bonferroni over the k items for frequencies) with σ̄ an upper bound on the
    estimate's standard deviation, so |error| exceeds h·z(1 − α/k)/z(1 − 0.05/k) with
    probability at most α = FALSE_FAILURE (normal approximation, 40 000 users)."""
    name = f"skeleton-{kind}"
    _load(tmp_path, name, kind, monkeypatch)
    argv = ["simulate", "--protocol", name, *shlex.split(population)]
    code, out, err = run(capsys, *argv, "--epsilon-mix", "0.5:0.5,2:0.5", "--seed", "4", "--json")
    assert code == 0, err
    result = json.loads(out)
    bar = result["error_bar"]
    k = 6 if kind == "frequency" else 1
    assert bar["level"] == 0.95
    allowed = bar["half_width"] * z_quantile(1 - FALSE_FAILURE / k) / z_quantile(1 - 0.05 / k)
    assert result["error"] <= allowed, result
    assert result["error"] > 0  # noise was added


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
def test_the_installed_skeleton_is_listed_simulates_and_passes_its_kit_test(
    kind: str, tmp_path: Path
) -> None:
    name = f"skel-{kind}"
    made = skeleton(name, tmp_path / "plugin", kind)
    with pip_installed(made.directory, made.distribution):
        listed = subprocess.run(
            [FEDLDP, "protocols", "--json"], check=True, capture_output=True, text=True
        )
        simulated = subprocess.run(
            [FEDLDP, "simulate", "--protocol", name, *shlex.split(KINDS[kind].simulate), "--json"],
            capture_output=True,
            text=True,
        )
        kit = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=made.directory,
            capture_output=True,
            text=True,
        )
    served = {p["name"]: p for p in json.loads(listed.stdout)["protocols"]}
    assert (served[name]["origin"], served[name]["origin_version"]) == (made.distribution, "0.1.0")
    assert simulated.returncode == 0, simulated.stderr
    assert json.loads(simulated.stdout)["protocol"] == name
    assert kit.returncode == 0, kit.stdout + kit.stderr
    assert "1 passed" in kit.stdout

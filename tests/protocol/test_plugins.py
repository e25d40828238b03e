"""Protocols from installed distributions (protocol/catalogue.py): entry points of group
``fedldp.protocols`` are loaded on first access, once, beside the built-in protocols, each with
its origin; a plugin that fails to load, is not a protocol, or clashes with a built-in or another
plugin is listed as broken with the reason and keeps no other protocol from being served.

The fast tests answer the catalogue's one question to the installation from fake distributions
(tests/plugins.py); the slow one pip-installs a real one into the project's environment and asks
the ``fedldp`` command in a fresh process."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fedldp.protocol.catalogue import (
    BUILT_IN,
    CATALOGUE,
    FEDLDP_VERSION,
    MAX_NAME,
    Origin,
    get_protocol,
)
from tests.plugins import PLUGIN, Plugins, pip_installed
from tests.protocol.plugin_mean import PROTOCOL, PluginMean

ROOT = Path(__file__).resolve().parents[2]


def test_a_declared_protocol_is_served_with_its_distribution_as_origin(plugins: Plugins) -> None:
    plugins.install("fedldp-plug", "1.2.3", {"plug-mean": f"{PLUGIN}:PluginMean"})
    served = get_protocol("plug-mean")
    assert isinstance(served, PluginMean)
    assert CATALOGUE.origin("plug-mean") == Origin("fedldp-plug", "1.2.3")
    assert CATALOGUE.origin("user-mean") == Origin("built-in", FEDLDP_VERSION)
    assert set(CATALOGUE) == {*BUILT_IN, "plug-mean"}
    assert CATALOGUE.broken == ()


def test_an_entry_point_may_name_an_instance(plugins: Plugins) -> None:
    plugins.install("fedldp-plug", "2.0", {"plug-mean": f"{PLUGIN}:PROTOCOL"})
    assert CATALOGUE["plug-mean"] is PROTOCOL


def test_plugins_load_on_first_access_and_only_once(plugins: Plugins) -> None:
    plugins.install("fedldp-plug", "1.2.3", {"plug-mean": f"{PLUGIN}:PluginMean"})
    assert plugins.asked == 0  # installing made the catalogue forget, not ask
    first = CATALOGUE["plug-mean"]
    assert "user-mean" in CATALOGUE
    assert len(CATALOGUE) == len(BUILT_IN) + 1
    assert CATALOGUE.origin("plug-mean").package == "fedldp-plug"
    assert CATALOGUE.broken == ()
    assert get_protocol("plug-mean") is first
    assert plugins.asked == 1


def test_a_name_taken_by_a_built_in_protocol_is_refused_naming_both(plugins: Plugins) -> None:
    plugins.install("fedldp-impostor", "0.1", {"user-mean": f"{PLUGIN}:Impostor"})
    assert CATALOGUE["user-mean"] is BUILT_IN["user-mean"]
    assert CATALOGUE.origin("user-mean").package == "built-in"
    (broken,) = CATALOGUE.broken
    assert (broken.name, broken.package, broken.version) == ("user-mean", "fedldp-impostor", "0.1")
    assert "fedldp-impostor" in broken.error
    assert "built-in" in broken.error


def test_a_name_two_plugins_declare_is_served_by_neither(plugins: Plugins) -> None:
    plugins.install("fedldp-plug-a", "1.0", {"plug-mean": f"{PLUGIN}:PluginMean"})
    plugins.install("fedldp-plug-b", "1.0", {"plug-mean": f"{PLUGIN}:PROTOCOL"})
    assert "plug-mean" not in CATALOGUE
    broken = {b.package: b for b in CATALOGUE.broken}
    assert set(broken) == {"fedldp-plug-a", "fedldp-plug-b"}
    for b in broken.values():
        assert "fedldp-plug-a" in b.error
        assert "fedldp-plug-b" in b.error
    with pytest.raises(ValueError, match="fedldp-plug-a"):
        get_protocol("plug-mean")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("tests.protocol.no_such_module:Thing", "ModuleNotFoundError"),
        (f"{PLUGIN}:NoSuchName", "AttributeError"),
        (f"{PLUGIN}:PlugParams", "not a fedldp.protocol.api.Protocol"),
        (f"{PLUGIN}:Misnamed", "names a protocol called 'plug-misnamed'"),
    ],
)
def test_a_plugin_that_cannot_be_served_is_broken_and_the_others_still_load(
    plugins: Plugins, value: str, reason: str
) -> None:
    plugins.install("fedldp-bad", "0.3", {"plug-bad": value})
    plugins.install("fedldp-plug", "1.2.3", {"plug-mean": f"{PLUGIN}:PluginMean"})
    assert "plug-mean" in CATALOGUE
    assert "plug-bad" not in CATALOGUE
    (broken,) = CATALOGUE.broken
    assert (broken.name, broken.package, broken.version) == ("plug-bad", "fedldp-bad", "0.3")
    assert reason in broken.error
    with pytest.raises(ValueError, match=reason):
        get_protocol("plug-bad")


def test_a_plugin_whose_import_raises_is_broken(
    plugins: Plugins, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "exploding_plugin.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.install("fedldp-boom", "9", {"plug-boom": "exploding_plugin:Thing"})
    assert set(CATALOGUE) == set(BUILT_IN)
    (broken,) = CATALOGUE.broken
    assert "RuntimeError: boom at import" in broken.error


@pytest.mark.slow
def test_a_pip_installed_distribution_shows_in_fedldp_protocols(tmp_path: Path) -> None:
    """A real distribution with the entry point in its pyproject, installed into the project's
    environment (editable, no dependencies, no build isolation: seconds, offline), is listed by
    ``fedldp protocols`` in a new process with its name and version; uninstalled afterwards."""
    package = tmp_path / "fedldp-test-plugin"
    module = package / "fedldp_test_plugin"
    module.mkdir(parents=True)
    shutil.copyfile(ROOT / "tests" / "protocol" / "plugin_mean.py", module / "__init__.py")
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "fedldp-test-plugin"\nversion = "0.4.2"\n'
        '[project.entry-points."fedldp.protocols"]\n'
        'plug-mean = "fedldp_test_plugin:PluginMean"\n'
        '[tool.setuptools]\npackages = ["fedldp_test_plugin"]\n'
    )
    with pip_installed(package, "fedldp-test-plugin"):
        run = subprocess.run(
            [str(Path(sys.executable).parent / "fedldp"), "protocols", "--json"],
            check=True,
            capture_output=True,
            text=True,
        )
    listed = json.loads(run.stdout)
    served = {p["name"]: p for p in listed["protocols"]}
    assert served["plug-mean"]["origin"] == "fedldp-test-plugin"
    assert served["plug-mean"]["origin_version"] == "0.4.2"
    assert served["user-mean"]["origin"] == "built-in"
    assert listed["broken"] == []


def test_the_generation_changes_with_what_the_catalogue_holds(plugins: Plugins) -> None:
    """What is cached from the catalogue (the server's listing) is keyed by it."""
    before = CATALOGUE.generation
    assert CATALOGUE.generation == before  # reading changes nothing
    plugins.install("fedldp-plug", "1.2.3", {"plug-mean": f"{PLUGIN}:PluginMean"})
    loaded = CATALOGUE.generation
    assert loaded != before
    CATALOGUE["plug-other"] = PROTOCOL
    assert CATALOGUE.generation != loaded
    assert CATALOGUE.origin("plug-other") == Origin("in-process", FEDLDP_VERSION)
    del CATALOGUE["plug-other"]
    assert "plug-other" not in CATALOGUE


def test_a_name_too_long_for_a_study_to_record_is_broken(
    plugins: Plugins, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_name = "p" * (MAX_NAME + 1)
    (tmp_path / "long_plugin.py").write_text(
        f"from {PLUGIN} import PluginMean\n\n\nclass Long(PluginMean):\n    name = {long_name!r}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.install("fedldp-long", "1", {long_name: "long_plugin:Long"})
    assert long_name not in CATALOGUE
    (broken,) = CATALOGUE.broken
    assert f"longer than {MAX_NAME}" in broken.error
    plugins.install("fedldp-long", "1" * (MAX_NAME + 1), {"plug-mean": f"{PLUGIN}:PluginMean"})
    assert "plug-mean" not in CATALOGUE
    (broken,) = CATALOGUE.broken
    assert "too long" in broken.error

"""Population laws from installed distributions (client/population/laws.py): entry points of group
``fedldp.laws`` are loaded on first access, once, beside the built-in laws, with the protocol
catalogue's machinery; a plugin law that fails to load, is not a law, or clashes with a built-in
or another plugin's is listed as broken with the reason and keeps no other law from being drawn.

The fast tests answer the laws' one question to the installation from fake distributions
(tests/plugins.py); the slow one pip-installs a real one and asks ``fedldp`` in new processes."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedldp.client.cli.main import main
from fedldp.client.population.api import PopulationSpec, build_population
from fedldp.client.population.distributions import Uniform
from fedldp.client.population.laws import LAW_ENTRY_POINT_GROUP, LAWS, get_law
from fedldp.protocol.catalogue import Origin
from fedldp.protocol.core.base.records import z_quantile
from tests.client.population.plugin_law import Triangle
from tests.plugins import (
    LAW_DISTRIBUTION,
    LAW_PLUGIN,
    Plugins,
    law_distribution,
    pip_installed,
)

FEDLDP = str(Path(sys.executable).parent / "fedldp")
TRIANGLE = {"triangle": f"{LAW_PLUGIN}:Triangle"}


def install_triangle(plugins: Plugins, dist: str = "fedldp-triangle", version: str = "1.0") -> None:
    plugins.install(dist, version, TRIANGLE, LAW_ENTRY_POINT_GROUP)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_declared_law_draws_the_population_with_its_options(plugins: Plugins) -> None:
    install_triangle(plugins, version="1.2.3")
    spec = PopulationSpec(users=20000, samples=4, distribution="triangle", law_params={"high": 3})
    population = build_population(spec, 5)
    assert population.data_kind == "scalar"
    assert population.truth == 1.5
    values = population.data(np.arange(population.n)).values
    assert values.min() >= 0.0
    assert values.max() <= 3.0
    # the sample mean of 80 000 draws of variance 9/24: within 5.3 σ with probability 1 − 1e-7
    sigma = math.sqrt(9 / 24 / values.size)
    assert abs(values.mean() - 1.5) <= z_quantile(1 - 1e-7) * sigma
    assert population.describe()["distribution"] == {
        "name": "triangle",
        "law_params": {"high": 3},
        "plugin": "fedldp-triangle",
        "plugin_version": "1.2.3",
    }
    assert LAWS.origin("triangle") == Origin("fedldp-triangle", "1.2.3")


def test_plugin_laws_load_on_first_access_and_only_once(plugins: Plugins) -> None:
    install_triangle(plugins)
    asked = plugins.asked
    assert get_law("triangle") is Triangle
    PopulationSpec(users=10, distribution="triangle")
    assert get_law("triangle") is Triangle
    assert plugins.asked == asked + 1


def test_a_name_taken_by_a_built_in_law_is_refused_naming_both(plugins: Plugins) -> None:
    plugins.install(
        "fedldp-impostor", "0.1", {"uniform": f"{LAW_PLUGIN}:Triangle"}, LAW_ENTRY_POINT_GROUP
    )
    (broken,) = LAWS.broken
    assert (broken.name, broken.package, broken.version) == ("uniform", "fedldp-impostor", "0.1")
    assert (
        "law 'uniform' of fedldp-impostor clashes with fedldp's built-in 'uniform'" in broken.error
    )
    assert isinstance(PopulationSpec(users=10, distribution="uniform").law(), Uniform)


def test_a_name_two_plugins_declare_is_drawn_by_neither(
    plugins: Plugins, capsys: pytest.CaptureFixture[str]
) -> None:
    install_triangle(plugins, "fedldp-tri-a")
    install_triangle(plugins, "fedldp-tri-b")
    assert "triangle" not in LAWS
    for b in LAWS.broken:
        assert "fedldp-tri-a" in b.error
        assert "fedldp-tri-b" in b.error
    code, _, err = run(
        capsys,
        "simulate",
        "--protocol",
        "user-mean",
        "--users",
        "10",
        "--distribution",
        "triangle",
        "--seed",
        "1",
    )
    assert code == 2
    assert "unknown law 'triangle'; fedldp-tri-a 1.0: law 'triangle' is declared by" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("tests.client.population.no_such_module:Law", "ModuleNotFoundError"),
        ("tests.client.population.bad_laws:NotALaw", "NotALaw is not a subclass of"),
        (
            "tests.client.population.bad_laws:Unfinished",
            "Unfinished does not implement mean, sample, variance",
        ),
    ],
)
def test_a_law_that_cannot_be_drawn_is_listed_broken_and_the_others_still_load(
    plugins: Plugins, capsys: pytest.CaptureFixture[str], value: str, reason: str
) -> None:
    plugins.install("fedldp-bad-law", "0.3", {"bad-law": value}, LAW_ENTRY_POINT_GROUP)
    install_triangle(plugins)
    code, out, _ = run(capsys, "laws", "--json")
    assert code == 0
    listed = json.loads(out)
    laws = {law["name"]: law for law in listed["laws"]}
    assert laws["triangle"]["origin"] == "fedldp-triangle"
    assert laws["triangle"]["parameters"] == ["low", "high", "dimension"]
    assert laws["uniform"]["origin"] == "built-in"
    (broken,) = listed["broken"]
    assert (broken["name"], broken["package"]) == ("bad-law", "fedldp-bad-law")
    assert reason in broken["error"]
    with pytest.raises(ValueError, match=reason):
        PopulationSpec(users=10, distribution="bad-law")
    code, out, _ = run(capsys, "laws")
    assert "broken plugin law bad-law (fedldp-bad-law 0.3), not served:" in out


def test_the_protocols_and_the_laws_read_their_own_groups(plugins: Plugins) -> None:
    from fedldp.protocol.catalogue import CATALOGUE

    install_triangle(plugins)
    assert "triangle" not in CATALOGUE
    assert CATALOGUE.broken == ()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--law-param", "high=-1"],
            "law 'triangle' (Triangle) refuses its parameters: triangle needs finite low < high",
        ),
        (["--law-param", "width=2"], "refuses its parameters: "),
        (["--law-param", "high"], "law-param must be written KEY=VALUE"),
        (
            ["--bound", "2"],
            "--bound does not apply to the triangle law (a plugin law takes its options as "
            "--law-param KEY=VALUE)",
        ),
    ],
)
def test_bad_law_options_are_one_line(
    plugins: Plugins, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    install_triangle(plugins)
    argv = ["simulate", "--protocol", "user-mean", "--users", "100", "--distribution", "triangle"]
    code, _, err = run(capsys, *argv, *extra, "--seed", "1")
    assert code == 2
    assert message in err
    assert err.count("\n") == 1


def test_law_params_belong_to_plugin_laws(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--protocol", "user-mean", "--users", "100", "--law-param", "low=0"]
    code, _, err = run(capsys, *argv, "--seed", "1")
    assert code == 2
    assert "--law-param sets a plugin law's options; the built-in uniform law" in err


def test_fedldp_simulate_draws_a_plugin_law(
    plugins: Plugins, capsys: pytest.CaptureFixture[str]
) -> None:
    install_triangle(plugins)
    argv = ["simulate", "--protocol", "user-mean", "--users", "20000", "--samples", "8"]
    law = ["--distribution", "triangle", "--law-param", "low=-1", "--law-param", "high=0.5"]
    code, out, err = run(capsys, *argv, *law, "--seed", "3", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["truth"] == -0.25
    assert result["population"]["distribution"]["plugin"] == "fedldp-triangle"


@pytest.mark.slow
def test_a_pip_installed_law_is_listed_and_simulated(tmp_path: Path) -> None:
    """A real distribution declaring the law in its pyproject, installed into the project's
    environment, is listed by ``fedldp laws`` with its version and drawn by ``fedldp simulate``
    in new processes; uninstalled afterwards."""
    package = law_distribution(tmp_path)
    simulate = [FEDLDP, "simulate", "--protocol", "user-mean", "--users", "4000", "--samples", "4"]
    law = ["--distribution", "triangle", "--law-param", "high=2", "--seed", "1", "--json"]
    with pip_installed(package, LAW_DISTRIBUTION):
        listed = subprocess.run(
            [FEDLDP, "laws", "--json"], check=True, capture_output=True, text=True
        )
        simulated = subprocess.run([*simulate, *law], capture_output=True, text=True)
    laws = {law["name"]: law for law in json.loads(listed.stdout)["laws"]}
    assert (laws["triangle"]["origin"], laws["triangle"]["origin_version"]) == (
        "fedldp-test-law",
        "0.2.1",
    )
    assert simulated.returncode == 0, simulated.stderr
    result = json.loads(simulated.stdout)
    assert result["truth"] == 1.0
    assert result["population"]["distribution"]["plugin_version"] == "0.2.1"


def test_an_experiment_file_draws_a_plugin_law(
    plugins: Plugins, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_triangle(plugins)
    experiment = tmp_path / "triangle.yaml"
    experiment.write_text(
        "name: triangle\ntitle: user-mean on a plugin law\nprotocol: user-mean\n"
        "population: {users: 2000, samples: 4, distribution: triangle, law_params: {high: 2}}\n"
        "grid:\n  epsilon: [1, 2]\nseeds: 1\n"
    )
    out = tmp_path / "out"
    code, _, err = run(
        capsys, "experiment", "run", str(experiment), "--out", str(out), "--jobs", "1"
    )
    assert code == 0, err
    with (out / "trials.csv").open(newline="") as trials:
        rows = list(csv.DictReader(trials))
    assert len(rows) == 2
    assert {row["truth"] for row in rows} == {"1.0"}  # the law's mean, (0 + 2)/2

"""examples/protocol-plugin, the example of docs/extending.md: a distribution of its own
(``fedldp-example-krr``, protocol ``example-krr``) written only against ``fedldp.protocol.api``.
Installed into the project's environment, it is listed with its origin, simulates from the
``fedldp`` command and passes the conformance kit strictly (the distribution's own test, in a
new process: only new processes see what pip installs); a variant that randomizes at twice the ε
it is charged fails the kit's privacy audit."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from fedldp.client.population.build import PopulationSpec
from fedldp.protocol.api import FloatArray, IntArray, RandomSource, RoundTask, UserData
from fedldp.testing import ProtocolCheckError, check_protocol
from tests.plugins import pip_installed

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "protocol-plugin"
PROJECT = tomllib.loads((EXAMPLE / "pyproject.toml").read_text(encoding="utf-8"))["project"]
FEDLDP = str(Path(sys.executable).parent / "fedldp")
ITEMS = 5
USERS = 4000
MIX = "1:0.5,2:0.5"
"""Half the users at ε = 1, half at ε = 2."""
K_SIGMA = 5.0
"""Per-coordinate tolerance in standard deviations: a false failure has probability below
ITEMS · 5.7e-7 ≈ 3e-6 (normal two-sided tail at 5σ, union over the coordinates; CLT)."""

sys.path.insert(0, str(EXAMPLE))  # the leaky variant subclasses the example without installing it
from fedldp_example_krr.krr import KaryRR, KaryRRParams, krr_probabilities  # noqa: E402


def test_the_example_imports_nothing_of_fedldp_but_the_api() -> None:
    for source in (EXAMPLE / "fedldp_example_krr").glob("*.py"):
        tree = ast.parse(source.read_text(encoding="utf-8"))
        modules = {
            node.module or ""
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fedldp")
        } | {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
            if alias.name.startswith("fedldp")
        }
        assert modules <= {"fedldp.protocol.api", "fedldp_example_krr.krr"}, (source, modules)


def worst_sigma() -> float:
    """The estimate's per-coordinate standard deviation bound: Σ_i 1/(4 (p_i − q_i)²) / n²."""
    eps = np.repeat([1.0, 2.0], USERS // 2)
    p, q = krr_probabilities(eps, ITEMS)
    return math.sqrt(float(np.sum(0.25 / (p - q) ** 2))) / USERS


def test_the_installed_example_is_listed_simulates_and_passes_the_kit() -> None:
    simulate = [
        *(FEDLDP, "simulate", "--protocol", "example-krr", "--seed", "3", "--json"),
        *("--users", str(USERS), "--samples", "3", "--distribution", "categorical"),
        *("--items", str(ITEMS), "--epsilon-mix", MIX),
    ]
    with pip_installed(EXAMPLE, PROJECT["name"]):
        listed = json.loads(
            subprocess.run(
                [FEDLDP, "protocols", "--json"], check=True, capture_output=True, text=True
            ).stdout
        )
        run = json.loads(
            subprocess.run(simulate, check=True, capture_output=True, text=True).stdout
        )
        kit = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
            cwd=EXAMPLE,
            capture_output=True,
            text=True,
        )
    served = {p["name"]: p for p in listed["protocols"]}
    assert served["example-krr"]["origin"] == PROJECT["name"] == "fedldp-example-krr"
    assert served["example-krr"]["origin_version"] == PROJECT["version"]
    assert served["example-krr"]["data_kind"] == "categorical"
    assert listed["broken"] == []
    assert run["params"] == {"domain_size": ITEMS}
    assert len(run["estimate"]) == ITEMS
    assert math.isclose(sum(run["estimate"]), 1.0, rel_tol=1e-9)  # the debiased reports sum to 1
    assert run["error_bar"]["norm"] == "linf"
    errors = np.abs(np.subtract(run["estimate"], run["truth"]))
    assert np.all(errors <= K_SIGMA * worst_sigma()), (errors, worst_sigma())
    assert kit.returncode == 0, kit.stdout + kit.stderr
    assert "1 passed" in kit.stdout, kit.stdout


class LeakyKaryRR(KaryRR):
    """The example with a client step that randomizes at twice the ε its plan charges."""

    name: ClassVar[str] = "example-krr-leaky"

    def privatize(
        self,
        params: KaryRRParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        return super().privatize(params, task, data, 2.0 * epsilon, group, rng)


def test_a_client_step_at_twice_its_charge_fails_the_privacy_audit() -> None:
    population = PopulationSpec(users=600, samples=4, distribution="categorical", items=ITEMS)
    honest = check_protocol(KaryRR(), population=population, only=["privacy-audit"])
    assert honest["privacy-audit"].passed, str(honest)
    report = check_protocol(LeakyKaryRR(), population=population, only=["privacy-audit"])
    assert report["privacy-audit"].failed, str(report)
    assert "beyond the charged ε" in report["privacy-audit"].reason
    with pytest.raises(ProtocolCheckError, match="privacy-audit"):
        report.raise_for_failures()

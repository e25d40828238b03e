"""The extension API (protocol/api.py) is a contract: its names are frozen here, so removing or
renaming one fails this test (adding one means adding it here, on purpose); each has a docstring;
the steps of ``Protocol`` state what they may assume and raise; and the built-in families use
it, as a plugin would."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import fedldp.protocol.api as api
from fedldp.protocol.core.base.protocol import Protocol

ROOT = Path(__file__).resolve().parents[2]

FROZEN = [
    "IMPLAUSIBLE_PROBABILITY",
    "JL_MAX_ENTRIES",
    "JSON",
    "LAPLACE_TAIL",
    "MULTI_D_EPSILON_CAP",
    "ONE_D_EPSILON_CAP",
    "AuditCase",
    "EpsilonDeltaDpEvent",
    "BoolArray",
    "Calibration",
    "ClientAudit",
    "ClientStep",
    "DataKind",
    "Draw",
    "ErrorBar",
    "FloatArray",
    "IntArray",
    "Params",
    "PayloadKind",
    "Plan",
    "Predictor",
    "PrivacyAudit",
    "Protocol",
    "RandomSource",
    "ReportChunk",
    "Result",
    "RoundPlan",
    "RoundTask",
    "Statistic",
    "StreamKey",
    "Trust",
    "UserData",
    "UserStreams",
    "around",
    "as_user_means",
    "calibrated_alpha",
    "check_delta",
    "check_epsilons",
    "check_positive",
    "client_step",
    "composed_epsilon",
    "cohort_permutation",
    "cohort_plan",
    "duchi_density",
    "duchi_hemisphere_probability",
    "duchi_radius",
    "duchi_report",
    "finite_or_none",
    "from_unit",
    "gaussian_coefficient",
    "gaussian_hockey_stick",
    "gaussian_reach",
    "halves",
    "jl_dimension",
    "jl_estimate",
    "jl_items",
    "jl_report",
    "jl_report_probability",
    "jl_sign",
    "jl_signs",
    "jsonable",
    "kappa",
    "laplace",
    "laplace_false_refusal",
    "laplace_log_density",
    "laplace_loss_statistic",
    "laplace_mean_reach",
    "laplace_mean_report",
    "laplace_reach",
    "laplace_scale",
    "laplace_variance",
    "noise_constants",
    "one_bit_report",
    "one_user",
    "paper_alpha_beta",
    "ragged_random",
    "random_blocks",
    "random_word_blocks",
    "random_words",
    "randomized_response",
    "rr_debias",
    "rr_keep_probability",
    "rr_plus_probability",
    "rr_variance",
    "run_audit",
    "run_client_audit",
    "scaled_loss",
    "smooth_beta",
    "smooth_gaussian_delta",
    "split_sizes",
    "stream_key",
    "to_unit",
    "unit",
    "valid_payloads",
    "z_quantile",
]
"""The public names, frozen: a plugin written against them keeps working."""

HOMES = (
    "fedldp.protocol.core.base.protocol",
    "fedldp.protocol.core.base.records",
    "fedldp.protocol.core.streams",
    "fedldp.protocol.core.accounting",
    "fedldp.protocol.mechanisms.audit",
    "fedldp.protocol.mechanisms.dp_noise",
    "fedldp.protocol.mechanisms.plausibility",
    "fedldp.protocol.mechanisms.randomizers",
)
"""The modules the API re-exports from (internal homes: a family takes these names from the
API instead)."""

FAMILIES = ("user_level", "heterogeneous", "central", "semi_feature")


def test_the_names_are_frozen_and_all_there() -> None:
    assert sorted(api.__all__) == sorted(FROZEN)
    assert len(set(api.__all__)) == len(api.__all__)
    for name in FROZEN:
        assert hasattr(api, name), name


def test_the_api_imports_on_its_own_without_the_families() -> None:
    """A plugin imports the API first: it must load without the catalogue or any family (which
    import it in turn)."""
    probe = (
        "import sys, fedldp.protocol.api as api; "
        "print(sorted(m for m in sys.modules if m.startswith('fedldp.protocol.') and "
        "m.split('.')[2] not in ('api', 'core', 'mechanisms')))"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"


@pytest.mark.parametrize("name", FROZEN)
def test_every_name_is_documented(name: str) -> None:
    """Classes and functions carry their own docstring; aliases and constants (which cannot)
    are described in the module's guide."""
    obj = getattr(api, name)
    if inspect.isclass(obj):
        assert (obj.__dict__.get("__doc__") or "").strip(), name
    elif inspect.isfunction(obj):
        assert (obj.__doc__ or "").strip(), name
    else:
        assert f"``{name}``" in (api.__doc__ or ""), name


@pytest.mark.parametrize(
    ("step", "states"),
    [
        ("plan", ["ValueError", "Deterministic", "seed"]),
        ("broadcast", ["ValueError", "Deterministic", "outputs"]),
        ("privatize", ["ValueError", "rng", "ε-LDP"]),
        ("check", ["never", "raises", "NaN"]),
        ("aggregate", ["ValueError", "Deterministic", "increasing participant slot", "chunks"]),
        ("finalize", ["ValueError", "Deterministic"]),
        ("max_gain_reports", ["Optional", "None", "rng", "ValueError", "server's checks"]),
        ("output_attack_reports", ["Optional", "None", "rng", "check", "report_bounds"]),
        ("release_event", ["DpEvent", "None", "deterministic", "dominate", "ValueError"]),
    ],
)
def test_each_step_states_its_contract(step: str, states: list[str]) -> None:
    doc = inspect.getdoc(getattr(Protocol, step)) or ""
    missing = [s for s in states if s not in doc]
    assert not missing, f"Protocol.{step}'s docstring does not state {missing}"


def _family_modules() -> list[Path]:
    return [p for family in FAMILIES for p in sorted((ROOT / "protocol" / family).rglob("*.py"))]


@pytest.mark.parametrize("path", _family_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_families_take_public_names_from_the_api(path: Path) -> None:
    """A family imports a name the API exports from the API, not from its internal home: the
    families are written against the same contract as a plugin."""
    tree = ast.parse(path.read_text())
    inner = [
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in HOMES
        for alias in node.names
        if alias.name in FROZEN
    ]
    assert not inner, f"{path.relative_to(ROOT)} imports {inner}; import them from the api"

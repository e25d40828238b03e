"""The population API (client/population/api.py) is a contract: its names are frozen here, so
removing or renaming one fails this test (adding one means adding it here, on purpose); each has
a docstring; a law written against it alone is drawn (tests/client/population/plugin_law.py)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import fedldp.client.population.api as api

ROOT = Path(__file__).resolve().parents[3]

FROZEN = [
    "BUILT_IN_LAWS",
    "LAW_ENTRY_POINT_GROUP",
    "Distribution",
    "FloatArray",
    "IntArray",
    "PopulationSpec",
    "StreamKey",
    "UserStreams",
    "build_population",
]


def test_the_names_are_frozen() -> None:
    assert api.__all__ == FROZEN
    for name in FROZEN:
        assert hasattr(api, name), name


def test_every_class_and_function_states_its_contract() -> None:
    for name in FROZEN:
        obj = getattr(api, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert (obj.__doc__ or "").strip(), name
    for method in ("sample", "mean", "variance", "draws_per_sample"):
        assert (getattr(api.Distribution, method).__doc__ or "").strip(), method


def test_the_test_law_imports_only_the_api() -> None:
    tree = ast.parse((ROOT / "tests" / "client" / "population" / "plugin_law.py").read_text())
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fedldp")
    }
    assert imported == {"fedldp.client.population.api"}

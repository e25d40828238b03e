"""STYLE rule 1: protocol/ imports only stdlib, numpy, scipy, pydantic; client/ and server/ never
import each other. Walks every module's imports with ast."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROTOCOL_ALLOWED = {"numpy", "scipy", "pydantic", "protocol"}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def modules(package: str) -> list[Path]:
    found = sorted((ROOT / package).rglob("*.py"))
    assert found, f"no modules under {package}/"
    return found


@pytest.mark.parametrize("path", modules("protocol"), ids=lambda p: p.name)
def test_protocol_imports_only_pure_dependencies(path: Path) -> None:
    forbidden = {
        r
        for r in imported_roots(path)
        if r not in PROTOCOL_ALLOWED and r not in sys.stdlib_module_names
    }
    assert not forbidden, f"{path.relative_to(ROOT)} imports {sorted(forbidden)}"


@pytest.mark.parametrize(("package", "other"), [("client", "server"), ("server", "client")])
def test_client_and_server_never_import_each_other(package: str, other: str) -> None:
    offenders = [str(p.relative_to(ROOT)) for p in modules(package) if other in imported_roots(p)]
    assert not offenders, f"{package}/ imports {other}/: {offenders}"


def test_walker_sees_forbidden_edges(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import httpx\nfrom server.app import create_app\nfrom . import sibling\n")
    assert imported_roots(bad) == {"httpx", "server"}

"""STYLE rule 1 and the package layout (issue 10), checked by walking every module's imports with
ast (function-level imports included: an import at call time is still an edge).

* ``fedldp.protocol`` imports only the standard library, numpy, scipy, pydantic and itself.
* Inside it: ``core`` imports no other part of the protocol package; ``mechanisms`` only ``core``;
  each paper family (``user_level``, ``heterogeneous``, ``central``, ``semi_feature``) only
  ``core``, ``mechanisms`` and itself: no family builds on another today, and a family that comes
  to build on another must be added to ``FAMILY_EXTRA`` here, on purpose. ``catalogue`` imports
  every family.
* ``fedldp.client`` and ``fedldp.server`` never import each other.
* No import circle between the modules of ``fedldp.client`` or ``fedldp.protocol``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("protocol", "client", "server")
PROTOCOL_ALLOWED = {"numpy", "scipy", "pydantic"}
FAMILIES = ("user_level", "heterogeneous", "central", "semi_feature")
ALLOWED_SUBPACKAGES: dict[str, set[str]] = {
    "core": set(),
    "mechanisms": {"core"},
    **{family: {"core", "mechanisms"} for family in FAMILIES},
}
FAMILY_EXTRA: dict[str, set[str]] = {}
"""A family that builds on another names it here (none does)."""


def imported_names(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports (``from a.b import c`` gives ``a.b`` and
    ``a.b.c``: c may be a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def module_name(path: Path) -> str:
    """``protocol/core/wire.py`` -> ``fedldp.protocol.core.wire``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("fedldp", *parts))


def modules(part: str) -> list[Path]:
    found = sorted((ROOT / part).rglob("*.py"))
    assert found, f"no modules under {part}/"
    return found


def ours(name: str) -> bool:
    return name == "fedldp" or name.startswith("fedldp.")


@pytest.mark.parametrize("path", modules("protocol"), ids=lambda p: str(p.relative_to(ROOT)))
def test_protocol_imports_only_pure_dependencies(path: Path) -> None:
    forbidden = {
        name
        for name in imported_names(path)
        if not name.startswith("fedldp.protocol")
        and name.split(".")[0] not in PROTOCOL_ALLOWED | set(sys.stdlib_module_names)
    }
    assert not forbidden, f"{path.relative_to(ROOT)} imports {sorted(forbidden)}"


def subpackage(name: str) -> str | None:
    """``core`` for ``fedldp.protocol.core.wire``; None for top-level protocol modules."""
    parts = name.split(".")
    return (
        parts[2]
        if len(parts) > 3 or (len(parts) == 3 and parts[2] in ALLOWED_SUBPACKAGES)
        else None
    )


@pytest.mark.parametrize("path", modules("protocol"), ids=lambda p: str(p.relative_to(ROOT)))
def test_protocol_subpackages_import_only_the_layers_below(path: Path) -> None:
    own = subpackage(module_name(path))
    if own is None:  # fedldp.protocol itself and the catalogue
        return
    allowed = {own} | ALLOWED_SUBPACKAGES[own] | FAMILY_EXTRA.get(own, set())
    wrong = {
        name
        for name in imported_names(path)
        if name.startswith("fedldp.protocol.")
        and (subpackage(name) or name.split(".")[2]) not in allowed
    }
    assert not wrong, f"{path.relative_to(ROOT)} ({own}) imports {sorted(wrong)}"


@pytest.mark.parametrize(("part", "other"), [("client", "server"), ("server", "client")])
def test_client_and_server_never_import_each_other(part: str, other: str) -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in modules(part)
        if any(n.startswith(f"fedldp.{other}") for n in imported_names(p))
    ]
    assert not offenders, f"{part}/ imports fedldp.{other}: {offenders}"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path, or None (depth-first search with colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


@pytest.mark.parametrize("part", ["protocol", "client"])
def test_no_import_circle(part: str) -> None:
    paths = {module_name(p): p for p in modules(part) if p.name != "__init__.py"}
    graph = {
        name: {n for n in imported_names(path) if n in paths and n != name}
        for name, path in paths.items()
    }
    assert find_cycle(graph) is None, f"import circle: {' -> '.join(find_cycle(graph) or [])}"


def test_nothing_imports_the_old_top_level_names() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for part in (*PARTS, "tests", "benchmarks")
        for p in sorted((ROOT / part).rglob("*.py"))
        if any(n.split(".")[0] in PARTS for n in imported_names(p))
    ]
    assert not offenders, f"bare client/server/protocol imports: {offenders}"


def test_walker_sees_forbidden_edges(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import httpx\nfrom fedldp.server.app import create_app\n"
        "def f():\n    from fedldp.client.cli import main\nfrom . import sibling\n"
    )
    assert imported_names(bad) == {
        "httpx",
        "fedldp.server.app",
        "fedldp.server.app.create_app",
        "fedldp.client.cli",
        "fedldp.client.cli.main",
    }
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert subpackage("fedldp.protocol.core.wire") == "core"
    assert subpackage("fedldp.protocol.core") == "core"
    assert subpackage("fedldp.protocol.catalogue") is None

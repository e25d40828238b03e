"""STYLE rule 1 and the package layout (issue 10), checked by walking every module's imports with
ast (function-level imports included: an import at call time is still an edge).

* ``fedldp.protocol`` imports only the standard library, numpy, scipy, pydantic and itself, and
  dp-accounting (``dp_accounting``, with its ``attr``) for the privacy loss of central releases.
* Inside it: ``core`` imports no other part of the protocol package; ``mechanisms`` only ``core``;
  the extension API (``api``, what a plugin imports) only ``core`` and ``mechanisms``; each paper
  family (``user_level``, ``heterogeneous``, ``central``, ``semi_feature``) only ``api``,
  ``core``, ``mechanisms`` and itself (``classic`` only ``api`` and itself): no family builds on
  another today, and a family that comes to build on another must be added to ``FAMILY_EXTRA``
  here, on purpose. ``catalogue`` imports
  every family.
* ``fedldp.client`` and ``fedldp.server`` never import each other.
* The server's layers (``web`` → ``services`` → ``runtime`` → ``store``, docs/architecture.md)
  import only themselves, the layers below and ``settings``/``errors``, which import no other
  server module; only ``store`` builds SQL (no query construct, no ``session.add``/``get``/
  ``execute`` elsewhere).
* The client's parts import only what ``CLIENT_ALLOWED`` lists: the API client (``api``) only
  the leaves ``extras`` and ``frames`` (the pandas frames of its views), the swarm the API
  client and the population, the command line anything, and nothing imports the command line.
* No import circle between the modules of ``fedldp.client``, ``fedldp.protocol`` or
  ``fedldp.server``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("protocol", "client", "server")
PROTOCOL_ALLOWED = {"numpy", "scipy", "pydantic", "dp_accounting", "attr"}
FAMILIES = ("user_level", "heterogeneous", "central", "semi_feature", "longitudinal")
ALLOWED_SUBPACKAGES: dict[str, set[str]] = {
    "core": set(),
    "mechanisms": {"core"},
    **{family: {"api", "core", "mechanisms"} for family in FAMILIES},
    "classic": {"api"},  # the classic baselines are written only against the extension API
    "longitudinal": {"api"},  # written only against the extension API (docs/longitudinal.md)
}
API_ALLOWED = {"core", "mechanisms"}
"""What ``fedldp.protocol.api`` (a module beside the sub-packages) may import: a family imports
it, so it must import no family (nor the catalogue, which imports them all)."""
FAMILY_EXTRA: dict[str, set[str]] = {}
"""A family that builds on another names it here (none does)."""
SERVER_LAYERS = ("web", "services", "runtime", "store")
"""Each imports only itself and the ones after it."""
SERVER_SHARED = {"settings", "errors"}
"""Beside the layers: any layer imports them; they import no other server module."""
CLIENT_ALLOWED: dict[str, set[str]] = {
    "api": {"extras", "frames"},
    "seeds": set(),
    "results": set(),
    "extras": set(),
    "frames": {"extras"},
    "cluster": {"extras"},
    "behaviour": {"seeds"},
    "population": {"extras", "seeds"},
    "simulate": {"behaviour", "frames", "population", "results", "seeds"},
    "swarm": {"api", "behaviour", "cluster", "extras", "frames", "population", "results", "seeds"},
    "experiments": {
        "behaviour",
        "cluster",
        "extras",
        "frames",
        "population",
        "results",
        "seeds",
        "simulate",
    },
    "campaign": {"api", "population", "results", "seeds", "simulate", "swarm"},
    "cli": {
        "api",
        "behaviour",
        "campaign",
        "cluster",
        "experiments",
        "extras",
        "frames",
        "population",
        "results",
        "seeds",
        "simulate",
        "swarm",
    },
}
"""Each part of ``fedldp.client`` (a sub-package or a top-level module) and the others it may
import."""
SQL_FREE_SQLALCHEMY = {"Engine", "event"}
"""What a server module outside ``store`` may import from ``sqlalchemy`` itself (types and the
event hooks the metrics count queries with); ``sqlalchemy.orm.Session`` (a type) and
``sqlalchemy.exc`` (errors) come from their own modules."""
SESSION_SQL = {"add", "add_all", "delete", "execute", "flush", "get", "merge", "query", "scalars"}


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


def test_the_extension_api_imports_only_core_and_mechanisms() -> None:
    wrong = {
        name
        for name in imported_names(ROOT / "protocol" / "api.py")
        if name.startswith("fedldp.protocol.") and subpackage(name) not in API_ALLOWED
    }
    assert not wrong, f"protocol/api.py imports {sorted(wrong)}"


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


def server_layer(path: Path) -> str | None:
    """``store`` for ``server/store/db.py``; None for the modules beside the layers."""
    parts = path.relative_to(ROOT / "server").parts
    return parts[0] if len(parts) > 1 and parts[0] in SERVER_LAYERS else None


def server_target(name: str) -> str | None:
    """The layer (or shared module) a ``fedldp.server.…`` import reaches, None for the package
    itself (its ``__version__``)."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[2] != "__version__" else None


@pytest.mark.parametrize("path", modules("server"), ids=lambda p: str(p.relative_to(ROOT)))
def test_server_layers_import_only_downwards(path: Path) -> None:
    own = server_layer(path)
    shared = path.parent == ROOT / "server" and path.stem in SERVER_SHARED
    if own is None and not shared:  # __init__, __main__, worker: the process entry points
        return
    allowed = SERVER_SHARED | (
        set() if own is None else set(SERVER_LAYERS[SERVER_LAYERS.index(own) :])
    )
    wrong = {
        name
        for name in imported_names(path)
        if name.startswith("fedldp.server.")
        and (target := server_target(name)) is not None
        and target not in allowed
        and not (shared and target == path.stem)
    }
    if shared:
        wrong |= {n for n in imported_names(path) if n.startswith("fedldp.server.")}
    assert not wrong, f"{path.relative_to(ROOT)} ({own or 'shared'}) imports {sorted(wrong)}"


def client_part(name: str) -> str | None:
    """``swarm`` for ``fedldp.client.swarm.run``; None for ``fedldp.client`` itself."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 else None


@pytest.mark.parametrize("path", modules("client"), ids=lambda p: str(p.relative_to(ROOT)))
def test_client_parts_import_only_what_they_build_on(path: Path) -> None:
    own = client_part(module_name(path))
    if own is None:
        return
    assert own in CLIENT_ALLOWED, f"{path.relative_to(ROOT)}: a new part? list it in CLIENT_ALLOWED"
    wrong = {
        name
        for name in imported_names(path)
        if name.startswith("fedldp.client.")
        and client_part(name) not in CLIENT_ALLOWED[own] | {own}
    }
    assert not wrong, f"{path.relative_to(ROOT)} ({own}) imports {sorted(wrong)}"


def sql_outside_store(path: Path) -> list[str]:
    """What ``path`` does that only ``server/store`` may: import query constructs from
    ``sqlalchemy``, or call ``session.add``/``get``/``execute``/… ."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "sqlalchemy":
            found += [a.name for a in node.names if a.name not in SQL_FREE_SQLALCHEMY]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "session"
            and node.func.attr in SESSION_SQL
        ):
            found.append(f"session.{node.func.attr} (line {node.lineno})")
    return found


@pytest.mark.parametrize(
    "path",
    [p for p in modules("server") if server_layer(p) != "store"],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_only_the_store_builds_sql(path: Path) -> None:
    assert not sql_outside_store(path), f"{path.relative_to(ROOT)}: {sql_outside_store(path)}"


@pytest.mark.parametrize("part", ["protocol", "client", "server"])
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
        "import httpx\nfrom fedldp.server.web.app import create_app\n"
        "def f():\n    from fedldp.client.cli import main\nfrom . import sibling\n"
    )
    assert imported_names(bad) == {
        "httpx",
        "fedldp.server.web.app",
        "fedldp.server.web.app.create_app",
        "fedldp.client.cli",
        "fedldp.client.cli.main",
    }
    sql = tmp_path / "sql.py"
    sql.write_text(
        "from sqlalchemy import Engine, select\n"
        "def f(session):\n    session.add(1)\n    session.commit()\n"
    )
    assert sql_outside_store(sql) == ["select", "session.add (line 3)"]
    assert server_layer(ROOT / "server/store/db.py") == "store"
    assert server_layer(ROOT / "server/worker.py") is None
    assert server_target("fedldp.server.web.app.create_app") == "web"
    assert server_target("fedldp.server.__version__") is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert subpackage("fedldp.protocol.core.wire") == "core"
    assert subpackage("fedldp.protocol.core") == "core"
    assert subpackage("fedldp.protocol.catalogue") is None


def test_nothing_of_the_package_imports_the_conformance_kit() -> None:
    """``fedldp.testing`` sits above the client and the server (it drives both); none of the
    three parts imports it."""
    offenders = [
        str(p.relative_to(ROOT))
        for part in PARTS
        for p in modules(part)
        if any(n.startswith("fedldp.testing") for n in imported_names(p))
    ]
    assert not offenders, f"these import fedldp.testing: {offenders}"

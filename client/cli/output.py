"""The table rendering of a run's result summary (``fedldp.client.results.result_summary``),
whatever produced the result."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from fedldp.protocol.core.base.records import jsonable
from fedldp.protocol.diagnostics import describe_diagnostic

__all__ = ["jsonable", "render_table"]

_VECTOR_SHOWN = 6


def _number(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return str(x)  # counts and seeds exactly: 1000000 users, not 1e+06
    return f"{x:.6g}"


def _value(x: Any) -> str:
    if isinstance(x, list):
        shown = ", ".join(_number(v) for v in x[:_VECTOR_SHOWN])
        more = f", … ({len(x)} entries)" if len(x) > _VECTOR_SHOWN else ""
        return f"[{shown}{more}]"
    if isinstance(x, dict):
        return json.dumps(x, separators=(", ", ": "))
    return _number(x)


def _heterogeneity(protocol: Any) -> str | None:
    """How the catalogue protocol combines unequal ε's (None for an unknown name)."""
    from fedldp.protocol.catalogue import CATALOGUE

    entry = CATALOGUE.get(str(protocol))
    return None if entry is None else entry.heterogeneity


def render_table(summary: Mapping[str, Any], *, width: int = 120) -> str:
    """``summary`` (from ``result_summary``) as a plain-text table: every field, the protocol's
    rule for unequal ε's, the ``evaluation`` of a learning task, and each diagnostic with the
    catalogue's line on what it is (``fedldp.protocol.diagnostics``)."""
    table = Table(title=f"fedldp · {summary.get('protocol', '?')}", show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold", ratio=3)
    table.add_column("meaning", overflow="fold", ratio=2, style="dim")
    if summary.get("study_id") is not None:
        table.add_row("study", str(summary["study_id"]))
    table.add_row("params", _value(summary.get("params", {})))
    table.add_row("users", _number(summary.get("n")))
    if summary.get("users_served") is not None:
        table.add_row(
            "users served", _number(summary["users_served"]), "by this swarm (leases split them)"
        )
    stats = summary.get("stats")
    if stats:
        table.add_row(
            "reports sent",
            _number(stats.get("reports")),
            f"late {_number(stats.get('late'))}, dropped {_number(stats.get('dropped'))}, "
            f"refused {_number(stats.get('refused'))}, joined late "
            f"{_number(stats.get('joined_late'))}",
        )
    table.add_row("seed", _number(summary.get("seed")))
    table.add_row("estimate", _value(summary.get("estimate")))
    table.add_row("truth", _value(summary.get("truth")))
    norm = summary.get("error_norm", "abs")
    table.add_row(f"error ({norm})", _number(summary.get("error")))
    bar = summary.get("error_bar")
    if bar:
        approx = ", approximate" if bar.get("approximate") else ""
        table.add_row(
            "error bar",
            f"± {_number(bar.get('half_width'))} at level {_number(bar.get('level'))} "
            f"({bar.get('kind')}{approx}, {bar.get('norm')})",
        )
    else:
        table.add_row("error bar", "-")
    spent = summary.get("epsilon_spent") or {}
    table.add_row(
        "ε spent",
        f"max {_number(spent.get('max'))}, median {_number(spent.get('median'))}, "
        f"mean {_number(spent.get('mean'))}",
    )
    rule = _heterogeneity(summary.get("protocol"))
    if rule:
        table.add_row("unequal ε", rule, "how the protocol combines users' different ε's")
    for key, value in (summary.get("evaluation") or {}).items():
        table.add_row(f"evaluation: {key}", _value(value), "the learning task's own score")
    if summary.get("diagnostics"):
        table.add_row("diagnostics", "", "")
    for key, value in (summary.get("diagnostics") or {}).items():
        table.add_row(f"  {key}", _value(value), describe_diagnostic(key))
    if summary.get("elapsed_s") is not None:
        table.add_row("elapsed", f"{summary['elapsed_s']:.3g} s")
    for w in summary.get("warnings") or []:
        table.add_row("warning", str(w), style="yellow")
    buffer = io.StringIO()
    Console(file=buffer, width=width, force_terminal=False, color_system=None).print(table)
    return buffer.getvalue()

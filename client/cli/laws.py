"""``fedldp laws``: the population laws ``--distribution`` can name, the built-in ones and the
installed plugins' (``fedldp.client.population.laws``), with their origins, and the plugin laws
that are not served, with the reason."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from fedldp.client.population.laws import BUILT_IN_LAWS, LAWS
from fedldp.client.population.spec import law_flags
from fedldp.protocol.core.plugins import BUILT_IN_ORIGIN

__all__ = ["add_laws_parser", "law_listing"]


def law_listing() -> dict[str, list[dict[str, Any]]]:
    """Every law (``laws``: name, origin, origin version, summary and its options: a built-in
    law's flags, a plugin law's ``--law-param`` keys, the fields of its dataclass) and the
    broken plugin laws (``broken``)."""
    laws: list[dict[str, Any]] = [
        {
            "name": name,
            "origin": BUILT_IN_ORIGIN.package,
            "origin_version": BUILT_IN_ORIGIN.version,
            "summary": "built-in (fedldp simulate --help describes its flags)",
            "parameters": law_flags(name),
        }
        for name in BUILT_IN_LAWS
    ]
    for name in sorted(LAWS):
        law, origin = LAWS[name], LAWS.origin(name)
        doc = (law.__doc__ or "").strip().splitlines()
        fields: tuple[dataclasses.Field[Any], ...] = ()
        if dataclasses.is_dataclass(law):
            fields = dataclasses.fields(law)
        laws.append(
            {
                "name": name,
                "origin": origin.package,
                "origin_version": origin.version,
                "summary": doc[0] if doc else law.__name__,
                "parameters": [f.name for f in fields if f.init],
            }
        )
    broken = [
        {"name": b.name, "package": b.package, "version": b.version, "error": b.error}
        for b in LAWS.broken
    ]
    return {"laws": laws, "broken": broken}


def _run_laws(args: argparse.Namespace) -> int:
    listing = law_listing()
    if args.json:
        print(json.dumps(listing, indent=2))
        return 0
    for law in listing["laws"]:
        options = f" ({', '.join(law['parameters'])})" if law["parameters"] else ""
        sys.stdout.write(
            f"{law['name']}{options}: {law['summary']} [{law['origin']} {law['origin_version']}]\n"
        )
    for b in listing["broken"]:
        sys.stdout.write(
            f"broken plugin law {b['name']} ({b['package']} {b['version']}), not served: "
            f"{b['error']}\n"
        )
    return 0


def add_laws_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "laws",
        help="list the population laws (--distribution)",
        description="List the data laws --distribution can name: the built-in ones and those "
        "installed plugin distributions declare (entry-point group fedldp.laws), each with "
        "its origin and version, a plugin law with the options --law-param sets; then the "
        "plugin laws that are not served, with the reason (docs/extending.md).",
        epilog="examples:\n  fedldp laws\n  fedldp laws --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print the laws as JSON")
    parser.set_defaults(handler=_run_laws)

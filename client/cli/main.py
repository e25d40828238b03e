"""The ``fedldp`` command line.

Each subcommand is a function ``add_parser(subparsers)`` in ``COMMANDS`` that registers its parser
and sets ``handler`` (``args -> exit code``); adding a subcommand is one line. User errors
(unknown protocol, invalid parameters, infeasible plan, bad population, unreadable file) print one
line ``error: ...`` to stderr and exit with status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext, suppress
from typing import Any, NoReturn

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fedldp.client.cli.campaigns import CAMPAIGN_COMMANDS
from fedldp.client.cli.db import add_db_parser
from fedldp.client.cli.experiments import EXPERIMENT_COMMANDS
from fedldp.client.cli.laws import add_laws_parser
from fedldp.client.cli.newprotocol import add_new_protocol_parser
from fedldp.client.cli.output import jsonable, render_table
from fedldp.client.cli.params import (
    add_behaviour_arguments,
    behaviour_from_args,
    one_line_error,
    parse_params,
)
from fedldp.client.cli.remote import REMOTE_COMMANDS
from fedldp.client.population.build import (
    add_population_arguments,
    build_population,
    population_spec_from_args,
)
from fedldp.client.simulate import ProgressFn, StudyFailed, fill_from_population, simulate
from fedldp.threads import one_blas_thread

__all__ = ["COMMANDS", "build_parser", "main", "protocol_catalogue"]

Subparsers = Any  # argparse._SubParsersAction, private in typeshed


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``error: ... (see PROG --help)``), exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


# --------------------------------------------------------------------------- fedldp protocols


def _value_range(prop: dict[str, Any]) -> str | None:
    """A numeric parameter's range from its JSON schema property, e.g. "[1e-50, 1e+50]" or
    "(0, 1)" (brackets: inclusive, parentheses: exclusive); None for other parameters."""
    for option in prop.get("anyOf", [prop]):
        if option.get("type") in ("number", "integer"):
            inclusive = "minimum" in option, "maximum" in option
            low = option.get("minimum", option.get("exclusiveMinimum", -math.inf))
            high = option.get("maximum", option.get("exclusiveMaximum", math.inf))
            return "[("[not inclusive[0]] + f"{low!r}, {high!r}" + "])"[not inclusive[1]]
    return None


def protocol_catalogue(epsilon: float = 1.0) -> dict[str, list[dict[str, Any]]]:
    """Every catalogue protocol (``protocols``) with its ``version`` (the algorithm's own
    revision, ``Protocol.version``), its ``origin`` and ``origin_version`` (the code's: fedldp's
    for a built-in protocol, the distribution's for a plugin), its parameters,
    their defaults (None when required) and the ranges of the numeric ones, its broadcast
    fields, and its minimum population at ``epsilon``; and the installed plugins that are not
    served (``broken``, with the reason), as GET /v1/protocols lists them (which also has the
    parameters' whole JSON schema)."""
    from fedldp.protocol.catalogue import CATALOGUE

    out = []
    for name in sorted(CATALOGUE):
        p = CATALOGUE[name]
        origin = CATALOGUE.origin(name)
        properties = p.params_model.model_json_schema()["properties"]
        params = []
        for field_name, f in p.params_model.model_fields.items():
            params.append(
                {
                    "name": field_name,
                    "required": f.is_required(),
                    "default": None if f.is_required() else jsonable(f.default),
                    "range": _value_range(properties[field_name]),
                    "description": f.description or "",
                }
            )
        out.append(
            {
                "name": name,
                "version": p.version,
                "summary": p.summary,
                "source": p.source,
                "trust": p.trust,
                "data_kind": p.data_kind,
                "heterogeneity": p.heterogeneity,
                "dropout": p.dropout,
                "parameters": params,
                "broadcast_fields": dict(p.broadcast_fields),
                "population": p.population(epsilon),
                "origin": origin.package,
                "origin_version": origin.version,
            }
        )
    broken = [
        {"name": b.name, "package": b.package, "version": b.version, "error": b.error}
        for b in CATALOGUE.broken
    ]
    return {"protocols": out, "broken": broken}


def _run_protocols(args: argparse.Namespace) -> int:
    catalogue = protocol_catalogue(args.epsilon)
    if args.json:
        print(json.dumps(catalogue, indent=2))
        return 0
    table = Table(title="fedldp protocols", show_lines=True)
    least = f"min. users at ε={args.epsilon:g}"
    table.add_column("protocol", no_wrap=True)
    for col in (
        "description",
        "source",
        "trust",
        "unequal ε",
        "parameters (default, range)",
        least,
    ):
        # No min_width: rich's layout shrinks every column to fit and then widens the one with
        # a minimum back to it, so the table came out wider than the console and its right edge
        # was cut off. At the console's 200 columns the parameters still get 29, every name whole.
        table.add_column(
            col, overflow="fold", ratio=3 if col in ("description", "unequal ε") else 1
        )
    for p in catalogue["protocols"]:
        params = "\n".join(
            f"{q['name']}"
            + (" (required)" if q["required"] else f"={json.dumps(q['default'])}")
            + (f" in {q['range']}" if q["range"] else "")
            for q in p["parameters"]
        )
        population = p["population"]
        smallest = population["min_participants"]
        if smallest is not None:
            rule = f"{smallest}: {population['rule']}"
        elif population["depends_on"]:
            rule = f"depends on {', '.join(population['depends_on'])}: {population['rule']}"
        else:
            rule = population["rule"]
        name = f"{p['name']} v{p['version']}\n({p['origin']} {p['origin_version']})"
        table.add_row(name, p["summary"], p["source"], p["trust"], p["heterogeneity"], params, rule)
    console = Console(width=max(200, Console().width))  # seven columns: wide
    console.print(table)
    for b in catalogue["broken"]:
        console.print(
            f"broken plugin {b['name']} ({b['package']} {b['version']}), not served: {b['error']}",
            markup=False,
        )
    return 0


def add_protocols_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "protocols",
        help="list the protocol catalogue",
        description="List every protocol: name and version (the algorithm's own revision, "
        "'vN'), origin (built-in, or the plugin distribution that declares it) and the code's "
        "version (fedldp's or the distribution's: what a study records), description, source "
        "(paper and algorithm), trust model, how it combines unequal ε's, data kind, its "
        "parameters with their defaults, the fields of its round broadcasts (--json; "
        "docs/clients.md), and the smallest population it can plan for with every participant "
        "at --epsilon; then the installed plugins that are not served, with the reason (--json: "
        "'broken').",
        epilog="examples:\n  fedldp protocols\n  fedldp protocols --epsilon 0.5 --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    parser.add_argument(
        "--epsilon",
        type=float,
        default=1.0,
        help="ε of every participant, for the minimum populations (default 1)",
    )
    parser.set_defaults(handler=_run_protocols)


# --------------------------------------------------------------------------- fedldp simulate

_SIMULATE_EPILOG = """\
protocol parameters:
  --param key=value sets one parameter (value parsed as JSON when it can be, else a string);
  --params-json sets several; --param wins over --params-json. Parameters the population
  determines are filled in when not given: samples_per_user (the smallest per-user sample
  count; users holding more keep their first m), dimension (--dimension), domain_size
  (--items), radius (the l2 ball holding a synthetic vector law: sqrt(d)*D for the box) and
  gamma (central-huber: the --imbalance γ >= 1 of the sample counts).

examples:
  fedldp simulate --protocol user-mean --users 100000 --samples 256 \\
      --distribution two-point --mean 0.3 --epsilon 1 --seed 7 --json
  fedldp simulate --protocol hetero-mean-rr --users 100000 --distribution two-point \\
      --mean 0.2 --epsilon-mix 0.1:0.5,1:0.5 --seed 7 --json
  fedldp simulate --protocol user-mean --param heavy_tail=true --param moment_bound=3 \\
      --users 20000 --samples 64 --distribution lomax --shape 4 --seed 1
  fedldp simulate --protocol hetero-frequency --users 20000 --distribution categorical \\
      --items 100 --zipf 1 --epsilon-uniform 0.5:2 --seed 3
  fedldp simulate --protocol user-mean --csv users.csv --epsilon-column eps --seed 0
  fedldp simulate --protocol user-mean --users 20000 --samples 16 --seed 1 \\
      --dropout 0.2 --late 0.05:30 --round-deadline 10 --quorum 0.5
  fedldp simulate --protocol hetero-frequency --users 20000 --distribution categorical \\
      --items 20 --seed 1 --attack max-gain --attackers 0.05 --targets 3
"""


def _progress_bar(args: argparse.Namespace) -> tuple[Any, ProgressFn | None]:
    if args.quiet or not (args.progress or sys.stderr.isatty()):
        return nullcontext(), None
    bar = Progress(
        TextColumn("simulating"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task("simulate", total=None)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return bar, update


def _run_simulate(args: argparse.Namespace) -> int:
    from fedldp.protocol.catalogue import get_protocol

    protocol = get_protocol(args.protocol)
    population = build_population(population_spec_from_args(args), args.seed)
    params = protocol.parse_params(fill_from_population(protocol, parse_params(args), population))
    context, progress = _progress_bar(args)
    with context:
        try:
            result = simulate(
                protocol,
                params,
                population,
                args.seed,
                chunk_size=args.chunk_size,
                progress=progress,
                behaviour=behaviour_from_args(args),
                round_deadline_s=args.round_deadline,
                quorum=args.quorum,
            )
        except StudyFailed as exc:
            sys.stderr.write(f"error: the study failed: {exc}\n")
            return 1
    summary = result.to_dict()
    if args.json:
        print(json.dumps(summary))
    else:
        sys.stdout.write(render_table(summary))
    return 0


def add_simulate_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="run a protocol on a simulated population, in process",
        description="Run a catalogue protocol on a simulated population in process (the fast, "
        "vectorised path; the HTTP deployment reproduces its estimate for the same seed) and "
        "print the estimate, the truth, the error, the error bar and the ε spent.",
        epilog=_SIMULATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--protocol", required=True, metavar="NAME", help="protocol name (see fedldp protocols)"
    )
    parser.add_argument(
        "--param", action="append", metavar="KEY=VALUE", help="one protocol parameter (repeat)"
    )
    parser.add_argument("--params-json", metavar="JSON", help="protocol parameters as an object")
    parser.add_argument(
        "--seed",
        type=int,
        required=True,
        metavar="S",
        help="run seed (fixes the data, the noise and the plan)",
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=8192,
        metavar="N",
        help="participants per block (default 8192)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--progress", action="store_true", help="progress bar on stderr")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_population_arguments(parser)
    add_behaviour_arguments(parser)
    parser.set_defaults(handler=_run_simulate)


# --------------------------------------------------------------------------- entry point

COMMANDS: list[Callable[[Subparsers], None]] = [
    add_protocols_parser,
    add_simulate_parser,
    add_laws_parser,
    *REMOTE_COMMANDS,
    add_db_parser,
    *EXPERIMENT_COMMANDS,
    add_new_protocol_parser,
    *CAMPAIGN_COMMANDS,
]
"""Subcommand registrars; another module's ``add_parser`` is added with one line here."""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fedldp",
        description="Simulate federated local-differential-privacy deployments: privatizing "
        "clients, an aggregation server, multi-round protocols from the papers.",
        epilog="examples:\n  fedldp protocols\n  fedldp simulate --help",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for add_parser in COMMANDS:
        add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fedldp`` with ``argv`` (default sys.argv[1:]); returns the exit status. A reader
    that closes stdout early (``fedldp reproduce --list | head``) ends any command quietly."""
    one_blas_thread()
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # the pipe may break here at the latest (also after --help)
    except BrokenPipeError:
        return _closed_pipe()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return handler(args)
    except BrokenPipeError:
        raise
    except (ValueError, OSError) as e:
        sys.stderr.write(f"error: {one_line_error(e)}\n")
        return 2


def _closed_pipe() -> int:
    """Stdout's reader is gone: no message, and the status of a Unix tool that SIGPIPE ended
    (128 + 13, as a shell reports it). Stdout is pointed at /dev/null so that the interpreter's
    last flush of what could not be written fails no more (it would print a traceback)."""
    with suppress(OSError, ValueError):  # ValueError: a stdout without a descriptor
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 128 + signal.SIGPIPE

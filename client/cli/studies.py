"""``fedldp studies list|show|result|watch|predict``, and what every remote subcommand shares: the
``--server`` option and ``remote``, which turns API and swarm errors into one line
``error: <code>: <detail>`` with exit status 2 (the request's fault) or 1 (the server's, the
network's, a failed study's)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from fedldp.client.api.client import ApiClient, ApiError, InvalidRequestError, NotFoundError
from fedldp.client.api.retry import RetryPolicy, stderr_notice
from fedldp.client.cli.output import render_table
from fedldp.client.swarm.agents import SwarmError
from fedldp.client.swarm.run import view_summary
from fedldp.protocol.core.wire import ProgressEvent, StudyView

__all__ = [
    "DEFAULT_SERVER",
    "add_server_option",
    "add_studies_parser",
    "remote",
    "resolve_study_id",
    "retry_policy",
]

Subparsers = Any
Handler = Callable[[argparse.Namespace], int]
DEFAULT_SERVER = os.environ.get("FEDLDP_SERVER", "http://127.0.0.1:8000")
ENDED = ("finished", "failed", "cancelled")
STUDY_ID_LENGTH = 32  # the server's ids: uuid4 hex


def remote(handler: Handler) -> Handler:
    """Run ``handler``; API and swarm errors become ``error: <code>: <detail>`` and 2 or 1."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (ApiError, SwarmError) as exc:
            detail = " ".join(exc.detail.split())
            sys.stderr.write(f"error: {exc.code}: {detail}\n")
            return 1 if exc.server_side else 2
        except KeyboardInterrupt:
            sys.stderr.write("error: interrupted\n")
            return 130

    return run


def add_server_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server",
        default=DEFAULT_SERVER,
        metavar="URL",
        help=f"server base URL (default $FEDLDP_SERVER or {DEFAULT_SERVER})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="give up on a request after retrying it for S seconds (default: 10 tries over "
        "about 20 s); each retry is announced on stderr",
    )


def retry_policy(args: argparse.Namespace) -> RetryPolicy:
    """The retries of a remote command: announced on stderr, bounded by ``--timeout``."""
    timeout: float | None = args.timeout
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"--timeout must be >= 0, got {timeout:g}")
    if timeout is None:
        return RetryPolicy(notify=stderr_notice)
    return RetryPolicy(attempts=1_000_000, deadline_s=timeout, notify=stderr_notice)


async def resolve_study_id(api: ApiClient, given: str) -> str:
    """The id of the one study whose id starts with ``given`` (a full id or a unique prefix, as
    ``studies list`` shows them); NotFoundError for none, InvalidRequestError for several."""
    given = given.strip().lower()
    if len(given) == STUDY_ID_LENGTH:
        return given  # a whole id: the server says whether it exists
    if not given:
        raise InvalidRequestError("ambiguous_study_id", "give a study id or a prefix of one", 0)
    ids = [v.id for v in (await api.list_studies()).studies]
    matches = [i for i in ids if i.startswith(given)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFoundError("unknown_study", f"no study id starts with {given!r}", 404)
    shown = ", ".join(sorted(matches)[:5]) + (", …" if len(matches) > 5 else "")
    raise InvalidRequestError(
        "ambiguous_study_id",
        f"{len(matches)} studies start with {given!r} ({shown}): give more characters",
        0,
    )


def _console() -> Console:
    return Console(width=max(100, Console().width))


def _studies_table(views: Sequence[StudyView]) -> Table:
    table = Table(title="fedldp studies")
    table.add_column("id", no_wrap=True, min_width=32)  # whole, so that it can be copied
    for col in ("name", "protocol", "phase", "participants", "round", "created"):
        table.add_column(col, overflow="fold")
    for v in views:
        current = "-" if v.current_round is None else f"{v.current_round + 1}/{len(v.rounds)}"
        table.add_row(
            v.id,
            v.name or "-",
            v.protocol,
            v.phase,
            str(v.n_participants),
            current,
            v.created_at.isoformat(timespec="seconds"),
        )
    return table


_POLICY = {
    "open": "open (anyone may enroll)",
    "leased": "leased (only holders of a lease enroll)",
}


def _study_tables(view: StudyView) -> Group:
    about = Table(title=f"study {view.id}", show_header=False)
    about.add_column("field", style="bold")
    about.add_column("value", overflow="fold")
    about.add_row("name", view.name or "-")
    about.add_row("protocol", f"{view.protocol} ({view.trust} trust)")
    if view.protocol_version is not None:  # a study made before origins were records none
        about.add_row("protocol code", f"{view.protocol_origin} {view.protocol_version}")
    about.add_row("params", json.dumps(view.params))
    about.add_row("phase", view.phase)
    about.add_row("participants", str(view.n_participants))
    about.add_row("ε accepted", f"{view.epsilon_min:g} to {view.epsilon_max:g}")
    about.add_row("enrollment", _POLICY[view.enrollment])
    about.add_row("seed", str(view.seed))
    about.add_row("round deadline", f"{view.round_deadline_s:g} s, quorum {view.quorum:g}")
    if view.failure_reason:
        about.add_row("failure", view.failure_reason, style="red")
    for w in view.warnings:
        about.add_row("warning", w, style="yellow")
    rounds = Table(title="rounds")
    for col in ("round", "name", "status", "received", "expected", "time left"):
        rounds.add_column(col)
    for r in view.rounds:
        left = "-" if r.seconds_left is None else f"{r.seconds_left:.0f} s"
        rounds.add_row(str(r.index), r.name, r.status, str(r.received), str(r.expected), left)
    return Group(about, rounds)


async def _studies(args: argparse.Namespace) -> int:
    async with ApiClient(args.server, retry=retry_policy(args)) as api:
        if args.action != "list":
            args.id = await resolve_study_id(api, args.id)
        if args.action == "list":
            views = (await api.list_studies()).studies
            if args.json:
                print(json.dumps([v.model_dump(mode="json") for v in views]))
            else:
                _console().print(_studies_table(views))
            return 0
        if args.action == "show":
            view: StudyView = await api.study(args.id)
            if args.json:
                print(view.model_dump_json())
            else:
                _console().print(_study_tables(view))
            return 0
        if args.action == "predict":
            answer = await api.predict(args.id, args.features)
            if args.json:
                print(answer.model_dump_json())
            else:
                table = Table("features", "prediction", title=f"study {args.id}")
                for row, value in zip(args.features, answer.predictions, strict=True):
                    table.add_row(", ".join(f"{v:g}" for v in row), f"{value:.6g}")
                _console().print(table)
            return 0
        if args.action == "watch":
            view = await _watch(api, args.id, quiet=args.json)
            if view.phase != "finished":
                reason = view.failure_reason or "no reason given"
                raise SwarmError(f"study_{view.phase}", f"study {view.id}: {reason}")
        result = await api.result(args.id)
        if result.phase != "finished":
            reason = result.failure_reason or "no reason given"
            raise SwarmError(f"study_{result.phase}", f"study {args.id}: {reason}")
        if args.json:
            print(result.model_dump_json())
        else:
            study = await api.study(args.id)
            sys.stdout.write(render_table(view_summary(study, result)))
        return 0


def _feature_rows(text: str) -> list[list[float]]:
    """'0.1,0.2;0.7,0.3' → [[0.1, 0.2], [0.7, 0.3]] (argparse type: ValueError → usage error)."""
    try:
        rows = [[float(v) for v in row.split(",")] for row in text.split(";") if row.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not numbers separated by ',' and ';': {text!r}"
        ) from None
    if not rows:
        raise argparse.ArgumentTypeError("give at least one feature row")
    return rows


async def _watch(api: ApiClient, study_id: str, *, quiet: bool) -> StudyView:
    """Follow the study's event stream until it ends, redrawing its tables on each event (a
    ``progress`` event updates the open round's counters; a transition re-reads the study);
    the last view."""
    view: StudyView = await api.study(study_id)
    with contextlib.ExitStack() as stack:
        live = None
        if not quiet:
            live = stack.enter_context(
                Live(_study_tables(view), console=_console(), auto_refresh=False)
            )
        async for event in api.events(study_id):
            if isinstance(event, ProgressEvent):
                view = _with_progress(view, event)
            else:
                view = await api.study(study_id)
            if live is not None:
                live.update(_study_tables(view), refresh=True)
    if live is not None and not live.console.is_terminal:
        live.console.line()  # Live ends its last frame with a newline on a terminal only
    return await api.study(study_id)


def _with_progress(view: StudyView, event: ProgressEvent) -> StudyView:
    """``view`` with the counters of a ``progress`` event."""
    rounds = [
        r.model_copy(update={"received": event.received}) if r.index == event.round else r
        for r in view.rounds
    ]
    return view.model_copy(update={"n_participants": event.n_participants, "rounds": rounds})


def _run_studies(args: argparse.Namespace) -> int:
    return asyncio.run(_studies(args))


def add_studies_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "studies",
        help="list and inspect studies on a server",
        description="Read studies from a fedldp server: list them, show one with its rounds, "
        "print a finished study's result, watch a study until it ends (then its result), or "
        "ask a finished classification or regression study for predictions.",
        epilog="examples:\n  fedldp studies list\n  fedldp studies show 6f1c...\n"
        "  fedldp studies result 6f1c... --json\n"
        "  fedldp studies watch 6f1c... --server http://10.0.0.5:8000\n"
        "  fedldp studies predict 6f1c... --features '0.1;0.5;0.9'",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    for action, text in (
        ("list", "every study on the server"),
        ("show", "one study and its rounds"),
        ("result", "a finished study's result"),
        ("watch", "follow a study's live events until it ends, then print its result"),
        ("predict", "predictions of a finished user-classify or user-regress study"),
    ):
        sub = actions.add_parser(action, help=text, description=text[0].upper() + text[1:] + ".")
        if action != "list":
            sub.add_argument("id", metavar="ID", help="study id, or a unique prefix of one")
        if action == "predict":
            sub.add_argument(
                "--features",
                type=_feature_rows,
                required=True,
                metavar="ROWS",
                help="feature rows: values separated by ',' and rows by ';', "
                "e.g. '0.1;0.5;0.9' (d = 1) or '0.1,0.2;0.7,0.3' (d = 2)",
            )
        add_server_option(sub)
        sub.add_argument("--json", action="store_true", help="print JSON")
        sub.set_defaults(handler=remote(_run_studies), action=action)

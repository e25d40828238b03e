"""Flag parsing shared by the command line's modules (so that none imports another's entry
point)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic import ValidationError

from fedldp.client.behaviour import ATTACKS, Behaviour, parse_dropout, parse_late

__all__ = [
    "add_behaviour_arguments",
    "behaviour_from_args",
    "one_line_error",
    "parse_params",
]


def one_line_error(exc: BaseException) -> str:
    """A one-line message for a user error (pydantic's multi-line ValidationError included)."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            where = ".".join(str(x) for x in err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            parts.append(f"{where}: {msg}" if where else msg)
        return "; ".join(parts)
    return " ".join(str(exc).split())


def parse_params(args: argparse.Namespace) -> dict[str, Any]:
    """The protocol parameters of ``--params-json`` and every ``--param key=value`` (values parsed
    as JSON where they are JSON, kept as text otherwise); ValueError on a malformed flag."""
    raw: dict[str, Any] = {}
    if args.params_json:
        try:
            loaded = json.loads(args.params_json)
        except json.JSONDecodeError as e:
            raise ValueError(f"--params-json is not valid JSON: {e}") from None
        if not isinstance(loaded, dict):
            raise ValueError("--params-json must be a JSON object")
        raw.update(loaded)
    for item in args.param or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--param takes key=value, got {item!r}")
        try:
            raw[key.strip()] = json.loads(text)
        except json.JSONDecodeError:
            raw[key.strip()] = text
    return raw


def add_behaviour_arguments(parser: argparse.ArgumentParser) -> None:
    """The behaviour options (``fedldp.client.behaviour``) and the rounds' deadline and quorum,
    shared by ``fedldp simulate`` and ``fedldp swarm``."""
    group = parser.add_argument_group(
        "behaviour", "what users do besides the protocol (drawn from the private seed)"
    )
    group.add_argument(
        "--dropout",
        metavar="P[,P1,...]",
        help="each user leaves before each round with probability P (or P0,P1,... per round; "
        "the last one holds for later rounds); gone users never come back",
    )
    group.add_argument(
        "--late",
        metavar="F:S",
        help="a fraction F of the users answers S seconds late (refused when S passes the "
        "round deadline)",
    )
    group.add_argument(
        "--join-late",
        type=float,
        default=0.0,
        metavar="F",
        help="a fraction F enrolls after the study started (the server refuses them)",
    )
    group.add_argument(
        "--attack", choices=ATTACKS, help="fake users follow this attack instead of the protocol"
    )
    group.add_argument(
        "--attackers", type=float, default=0.0, metavar="F", help="fraction of fake users"
    )
    group.add_argument("--targets", metavar="I,J,...", help="target items of the max-gain attack")
    group.add_argument(
        "--round-deadline",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds a round stays open (default 600)",
    )
    group.add_argument(
        "--quorum",
        type=float,
        default=1.0,
        metavar="Q",
        help="fraction of a round's cohort that must report by its deadline (default 1)",
    )


def behaviour_from_args(args: argparse.Namespace) -> Behaviour:
    """The ``Behaviour`` of ``add_behaviour_arguments``' flags; ValueError on a bad one."""
    late_fraction, late_delay = parse_late(args.late) if args.late else (0.0, 0.0)
    try:
        targets = tuple(int(t) for t in args.targets.split(",")) if args.targets else ()
    except ValueError:
        raise ValueError(f"--targets takes item indices I,J,..., got {args.targets!r}") from None
    return Behaviour(
        dropout=parse_dropout(args.dropout) if args.dropout else (),
        late_fraction=late_fraction,
        late_delay_s=late_delay,
        join_late=args.join_late,
        attack=args.attack,
        attackers=args.attackers,
        targets=targets,
    )

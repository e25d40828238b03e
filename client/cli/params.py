"""Flag parsing shared by the command line's modules (so that none imports another's entry
point)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic import ValidationError

__all__ = ["one_line_error", "parse_params"]


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

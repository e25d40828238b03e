"""A YAML loader that remembers where every value was written, so errors can name the line.

``load_marked(text)`` returns the plain Python value of a YAML document and a map from each
value's path (a tuple of mapping keys and sequence indices) to its 1-based line. It refuses
duplicate keys (PyYAML silently keeps the last) and never reads ``a:b`` as a base-60 number
(YAML 1.1 turns ``1:30`` into 90; an ε profile ``1:2`` must stay the text ``"1:2"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import ValidationError

__all__ = ["Lines", "MarkedError", "load_marked", "locate", "validation_message"]

Path = tuple[str | int, ...]
Lines = dict[Path, int]

_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


class MarkedError(ValueError):
    """A user error in an experiment file, with the file and line it points at."""

    def __init__(self, source: str, line: int | None, message: str) -> None:
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {message}")
        self.line = line


def load_marked(text: str, source: str) -> tuple[Any, Lines]:
    """The document's value and the line of every value in it; MarkedError on bad YAML."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        problem = getattr(e, "problem", None) or str(e)
        raise MarkedError(source, line, f"not valid YAML: {problem}") from None
    lines: Lines = {}
    if node is None:
        return None, lines
    constructor = yaml.constructor.SafeConstructor()

    def convert(n: yaml.Node, path: Path) -> Any:
        lines[path] = n.start_mark.line + 1
        if isinstance(n, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in n.value:
                key = convert(key_node, (*path, "<key>"))
                if not isinstance(key, str | int | float | bool):
                    raise MarkedError(
                        source, key_node.start_mark.line + 1, "mapping keys must be plain values"
                    )
                if key in out:
                    raise MarkedError(
                        source, key_node.start_mark.line + 1, f"duplicate key {key!r}"
                    )
                out[key] = convert(value_node, (*path, str(key)))
            lines.pop((*path, "<key>"), None)
            return out
        if isinstance(n, yaml.SequenceNode):
            return [convert(v, (*path, i)) for i, v in enumerate(n.value)]
        assert isinstance(n, yaml.ScalarNode)
        if n.tag in _NUMBER_TAGS and ":" in n.value:
            return n.value  # a:b is a pair written as text, never sexagesimal
        return constructor.construct_object(n, deep=True)

    return convert(node, ()), lines


def locate(lines: Lines, path: Sequence[str | int]) -> int | None:
    """The line of the longest written prefix of ``path`` (None when nothing of it was)."""
    p = tuple(path)
    while p:
        if p in lines:
            return lines[p]
        p = p[:-1]
    return lines.get(())


def validation_message(exc: ValidationError) -> list[tuple[tuple[str | int, ...], str]]:
    """Each error of a pydantic ValidationError as (location, one-line message)."""
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        msg = " ".join(str(err["msg"]).removeprefix("Value error, ").split())
        if err["type"] == "extra_forbidden":
            msg = f"unknown key {loc[-1]!r}" if loc else msg
        out.append((loc, msg))
    return out

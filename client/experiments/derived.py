"""Derived columns: values an experiment file computes from each trial's row (theory lines).

A theory line that no protocol exports (an attacker's predicted shift, say) is written in the
experiment file as an expression over the row's columns, and its derivation in the file's
comments::

    derived:
      shift: "[estimate] - [truth]"
      predicted_shift: "[behaviour.attackers] * (1 / tanh([epsilon_spent.max] / 2) - [truth])"

``[column]`` is a cell of the row: a number, JSON (``[estimate][3]`` indexes a list,
``[diagnostics.participation.rounds][-1]['received']`` a list of objects) or text.
The rest is arithmetic (``+ - * / **``), comparisons, ``and``/``or``/``not``, ``A if C else B``,
number and text literals, ``nan`` (no value: an empty cell, e.g. where no theory applies) and
the functions ``sqrt log exp tanh abs min max erf``, ``len`` of a list, and two of vectors
(lists of one length): ``sqdist(a, b)`` = Σ (a_i − b_i)² and ``maxdist(a, b)`` = max |a_i − b_i|
(``sqdist([estimate], [truth])``: the squared ℓ2 error of a frequency estimate, whatever norm
its error bar uses). Derived
columns are computed when rows are read for figures and checks (``with_derived``), never stored,
so editing a formula needs no rerun; a row where the expression cannot be evaluated (a missing
column, a failed trial) gets an empty cell. Expressions are parsed when the file is loaded.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["check_expression", "evaluate", "with_derived"]

_COLUMN = re.compile(r"\[([A-Za-z_][A-Za-z0-9_.\-]*)\]")


def _sqdist(a: Sequence[float], b: Sequence[float]) -> float:
    """Σ (a_i − b_i)² of two vectors of one length (the squared ℓ2 error of an estimate)."""
    if len(a) != len(b):
        raise ValueError("sqdist takes two vectors of one length")
    return math.fsum((float(x) - float(y)) ** 2 for x, y in zip(a, b, strict=True))


def _maxdist(a: Sequence[float], b: Sequence[float]) -> float:
    """max |a_i − b_i| of two vectors of one length (the ℓ∞ error of an estimate)."""
    if len(a) != len(b):
        raise ValueError("maxdist takes two vectors of one length")
    return max(abs(float(x) - float(y)) for x, y in zip(a, b, strict=True))


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "log": math.log,
    "exp": math.exp,
    "tanh": math.tanh,
    "abs": abs,
    "min": min,
    "max": max,
    "erf": math.erf,
    "sqdist": _sqdist,
    "maxdist": _maxdist,
    "len": len,
}
_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def _parse(expression: str) -> tuple[ast.expr, list[str]]:
    """The expression's tree (column references as names ``_c0``, ``_c1``, …) and the columns."""
    columns: list[str] = []

    def name(match: re.Match[str]) -> str:
        columns.append(match.group(1))
        return f"_c{len(columns) - 1}"

    try:
        tree = ast.parse(_COLUMN.sub(name, expression), mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"cannot parse {expression!r}: {e.msg}") from None
    _check(tree, len(columns))
    return tree, columns


def _check(node: ast.AST, n_columns: int) -> None:
    allowed = (
        ast.BinOp,
        ast.UnaryOp,
        ast.BoolOp,
        ast.Compare,
        ast.IfExp,
        ast.Call,
        ast.Constant,
        ast.Name,
        ast.Subscript,
        ast.Load,
        ast.operator,
        ast.unaryop,
        ast.boolop,
        ast.cmpop,
    )
    for child in ast.walk(node):
        if not isinstance(child, allowed):
            raise ValueError(f"{type(child).__name__} is not allowed in a derived column")
        if isinstance(child, ast.BinOp) and type(child.op) not in _BINARY:
            raise ValueError("only + - * / ** are allowed")
        if isinstance(child, ast.UnaryOp) and not isinstance(child.op, ast.USub | ast.Not):
            raise ValueError("only - and not are allowed as unary operators")
        if isinstance(child, ast.Compare) and any(type(o) not in _COMPARE for o in child.ops):
            raise ValueError("only == != < <= > >= are allowed")
        if isinstance(child, ast.Call) and not (
            isinstance(child.func, ast.Name) and child.func.id in _FUNCTIONS and not child.keywords
        ):
            raise ValueError(f"functions: {', '.join(_FUNCTIONS)}")
        if isinstance(child, ast.Name) and child.id not in _FUNCTIONS and child.id != "nan":
            index = child.id.removeprefix("_c")
            if not (child.id.startswith("_c") and index.isdigit() and int(index) < n_columns):
                raise ValueError(f"unknown name {child.id!r}: write columns as [column]")


def check_expression(expression: str) -> None:
    """ValueError when ``expression`` is not a valid derived column."""
    _parse(expression)


def _cell(text: str) -> Any:
    if text == "":
        raise ValueError("empty cell")
    try:
        return float(text)
    except ValueError:
        pass
    if text.startswith(("[", "{")):
        return json.loads(text)
    return text


def _eval(node: ast.expr, cells: Callable[[int], Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id == "nan":
            return math.nan
        return cells(int(node.id.removeprefix("_c")))
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_eval(node.left, cells), _eval(node.right, cells))
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, cells)
        return -value if isinstance(node.op, ast.USub) else not value
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, cells) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, cells)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, cells)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        chosen = node.body if _eval(node.test, cells) else node.orelse
        return _eval(chosen, cells)
    if isinstance(node, ast.Subscript):
        key = _eval(node.slice, cells)
        return _eval(node.value, cells)[key if isinstance(key, str) else int(key)]
    assert isinstance(node, ast.Call)
    assert isinstance(node.func, ast.Name)
    return _FUNCTIONS[node.func.id](*(_eval(a, cells) for a in node.args))


def evaluate(expression: str, row: Mapping[str, str]) -> float | None:
    """The expression's number on ``row``; None when it cannot be evaluated there."""
    tree, columns = _parse(expression)
    try:
        # cells are read when used: ``A if C else B`` may name a column only some rows have
        value = _eval(tree, lambda i: _cell(row[columns[i]]))
        return float(value)
    except (KeyError, ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError):
        return None


def with_derived(
    rows: Sequence[Mapping[str, str]], derived: Mapping[str, str]
) -> list[dict[str, str]]:
    """``rows`` with the derived columns added (in order: a later one may use an earlier one)."""
    out = [dict(r) for r in rows]
    for name, expression in derived.items():
        for row in out:
            value = evaluate(expression, row)
            row[name] = "" if value is None or not math.isfinite(value) else repr(value)
    return out

"""Claims of the papers checked on an experiment's trial rows.

A check (``CheckSpec``) is evaluated once per group of its ``per`` values (after keeping the rows
matching its ``where``): ``slope`` fits the log-log slope of ``stat(y)`` against ``x`` (over the
x values ``x_in`` only, when given: one regime of a wider sweep), less the slope of ``minus``
when given (a theory column's, or another protocol's rows'); ``ratio``
divides the numerator's aggregate by the denominator's (each ``stat`` of a column over the rows
of the group matching its own ``where``, or the smallest over the values of its ``best_of``
column: a tuned minimum); ``bound`` takes ``stat(y)`` at every configuration of
the group (every distinct value of the grid columns the check does not fix). A slope's points
and a bound's values are tuned minima when the check has ``best_of``. A group passes when
its value is in [min, max]. Verdict: ``holds`` (every group passes), ``partly`` (some),
``fails`` (none), ``no data`` (no group could be measured).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fedldp.client.experiments.aggregate import (
    loglog_slope,
    matches,
    number,
    one_of,
    stat_band,
    values,
)
from fedldp.client.experiments.spec import CheckSpec, Quantity, cell

__all__ = ["CheckOutcome", "evaluate", "evaluate_all"]

Row = Mapping[str, str]


@dataclass(frozen=True)
class CheckOutcome:
    check: CheckSpec
    measured: list[tuple[str, float, bool]]  # (group, value, passes)

    @property
    def verdict(self) -> str:
        finite = [ok for _, v, ok in self.measured if math.isfinite(v)]
        if not finite:
            return "no data"
        if all(ok for _, _, ok in self.measured):
            return "holds"
        return "partly" if any(finite) else "fails"

    def measured_text(self) -> str:
        parts = []
        for group, v, ok in self.measured:
            mark = "" if ok else " ✗"
            parts.append(f"{group}: {v:.3g}{mark}" if group else f"{v:.3g}{mark}")
        return "; ".join(parts) or "–"

    def range_text(self) -> str:
        lo, hi = self.check.min, self.check.max
        if lo is not None and hi is not None:
            return f"in [{lo:g}, {hi:g}]"
        return f"≥ {lo:g}" if lo is not None else f"≤ {hi:g}"


def _in_range(v: float, check: CheckSpec) -> bool:
    if not math.isfinite(v):
        return False
    if check.min is not None and v < check.min:
        return False
    return not (check.max is not None and v > check.max)


def _groups(rows: Sequence[Row], keys: Sequence[str]) -> list[tuple[str, list[Row]]]:
    out: dict[tuple[str, ...], list[Row]] = {}
    for r in rows:
        out.setdefault(tuple(r.get(k, "") for k in keys), []).append(r)
    return [
        (", ".join(f"{k}={v}" for k, v in zip(keys, g, strict=True)), members)
        for g, members in out.items()
    ]


def _configurations(rows: Sequence[Row], fixed: set[str], columns: Sequence[str]) -> list[str]:
    return [c for c in columns if c not in fixed and len({r.get(c) for r in rows}) > 1]


def evaluate(check: CheckSpec, rows: Sequence[Row], columns: Sequence[str]) -> CheckOutcome:
    """``check`` on ``rows``; ``columns`` are the experiment's configuration columns."""
    measured: list[tuple[str, float, bool]] = []
    if check.kind == "slope":
        for group, everyone in _groups(rows, check.per):
            members = [r for r in everyone if matches(r, check.where)]
            if not members:
                continue
            v = _slope(members, check.y, check.stat, check, check.tuning())
            if check.minus is not None:
                q = check.minus
                mine = [r for r in everyone if matches(r, q.where)]
                v -= _slope(
                    mine, q.y or check.y, q.stat or check.stat, check, q if q.tuned else None
                )
            measured.append((group, v, _in_range(v, check)))
        return CheckOutcome(check, measured)
    kept = [r for r in rows if matches(r, check.where)]
    for group, members in _groups(kept, check.per):
        if check.kind == "ratio":
            assert check.numerator is not None
            assert check.denominator is not None
            sides = [_quantity(q, members, check) for q in (check.numerator, check.denominator)]
            v = sides[0] / sides[1] if sides[1] else math.nan
            measured.append((group, v, _in_range(v, check)))
        else:
            # a where key listing several values ({in: [...]}) still varies: one group each;
            # a tuned bound's best_of column does not (its minimum is taken over it)
            tuning = check.tuning()
            fixed = {*(k for k, v in check.where.items() if not one_of(v)), *check.per}
            fixed |= set(tuning.tuned if tuning else ())
            free = _configurations(members, fixed, columns)
            for sub, at in _groups(members, free):
                v = _value(at, check.y, check.stat, tuning, check)
                name = ", ".join(x for x in (group, sub) if x)
                measured.append((name, v, _in_range(v, check)))
    return CheckOutcome(check, measured)


def _slope(
    rows: Sequence[Row], y: str, stat: str, check: CheckSpec, tuning: Quantity | None
) -> float:
    """The log-log slope of ``stat(y)`` (or its tuned minimum) against the check's x (over
    ``x_in``); NaN if none."""
    assert check.x is not None
    xs = sorted({v for v in (number(r.get(check.x, "")) for r in rows) if v is not None})
    if check.x_in is not None:
        xs = [x for x in xs if x in check.x_in]
    ys = [_value(_at(rows, check.x, x), y, stat, tuning, check) for x in xs]
    slope = loglog_slope(xs, ys)
    return math.nan if slope is None else slope


def _value(
    rows: Sequence[Row], y: str, stat: str, tuning: Quantity | None, check: CheckSpec
) -> float:
    """``stat(y)`` over ``rows``, or its tuned minimum (``CheckSpec.tuning``)."""
    if tuning is None:
        return stat_band(values(rows, y), stat)[0]
    return _quantity(tuning, rows, check)


def _quantity(q: Quantity, rows: Sequence[Row], check: CheckSpec) -> float:
    """One side of a ratio: ``stat(y)`` over the rows matching ``q.where``, or its minimum over
    the values of the ``q.best_of`` column(s) (NaN when none has a value)."""
    mine = [r for r in rows if matches(r, q.where)]
    y, stat = q.y or check.y, q.stat or check.stat
    if not q.tuned:
        return stat_band(values(mine, y), stat)[0]
    wanted = None if q.among is None else {cell(v) for v in q.among}
    options: dict[tuple[str, ...], list[Row]] = {}
    for r in mine:
        key = tuple(r.get(c, "") for c in q.tuned)
        if wanted is None or key[0] in wanted:
            options.setdefault(key, []).append(r)
    found = [stat_band(values(at, y), stat)[0] for at in options.values()]
    finite = [v for v in found if math.isfinite(v)]
    return min(finite) if finite else math.nan


def _at(rows: Sequence[Row], column: str, x: float) -> list[Row]:
    return [r for r in rows if number(r.get(column, "")) == x]


def evaluate_all(
    checks: Sequence[CheckSpec], rows: Sequence[Row], columns: Sequence[str]
) -> list[CheckOutcome]:
    return [evaluate(c, rows, columns) for c in checks]

"""Aggregates of trial rows over seeds: what figures draw and what checks test.

Pure functions of the CSV rows (STYLE rule 16). ``stat`` of a column over the seeds of one
configuration is its mean, its median, its mean square (``mse``, of an error column) or the root
of that (``rmse``). The band is the 95% normal confidence interval of the mean (of the values, or
of their squares for mse/rmse; the rmse band is the root of the mse band), ±1.96 standard errors;
the median has the band of the mean. ``qDIGITS`` is the quantile at level 0.DIGITS (``q99``: 0.99)
with the distribution-free band of order statistics: ranks Rq ± 1.96 √(Rq(1 − q)) over R
values. ``"A - B"`` is the difference of two statistics of the same values (a claim's, e.g.
``"q99 - median"``), with the conservative band [low A − high B, high A − low B] (each end
holds with 95%, so the band with at least 90%). A log-log slope is the least-squares fit of log
stat on log x.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedldp.client.experiments.spec import PlotSpec, cell

__all__ = [
    "Series",
    "loglog_slope",
    "matches",
    "number",
    "one_of",
    "plot_series",
    "quantile_level",
    "stat_band",
    "values",
]

Row = Mapping[str, str]
_Z95 = 1.959963984540054


def number(text: str) -> float | None:
    """A CSV cell as a float (None when empty or not a number)."""
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        return None


def matches(row: Row, where: Mapping[str, Any]) -> bool:
    """Whether ``row`` holds every value of ``where`` (compared as CSV cells); a value
    ``{in: [a, b, ...]}`` matches any of the listed values."""
    return all(
        row.get(k) in {cell(x) for x in v["in"]} if one_of(v) else row.get(k) == cell(v)
        for k, v in where.items()
    )


def one_of(value: Any) -> bool:
    """Whether a ``where`` value is ``{in: [...]}`` (any of several values)."""
    return isinstance(value, Mapping) and set(value) == {"in"} and isinstance(value["in"], list)


def values(rows: Iterable[Row], column: str) -> list[float]:
    """The column's numeric cells over ``rows`` (missing and empty cells left out)."""
    out = []
    for r in rows:
        v = number(r.get(column, ""))
        if v is not None:
            out.append(v)
    return out


def quantile_level(stat: str) -> float | None:
    """The level of a quantile statistic (``q99`` → 0.99), None for the other statistics."""
    if len(stat) > 1 and stat[0] == "q" and stat[1:].isdigit():
        return float("0." + stat[1:])
    return None


def _quantile_band(a: np.ndarray[Any, Any], q: float) -> tuple[float, float, float]:
    """The q-quantile of ``a`` and its 95% band from order statistics (normal approximation
    of the binomial count of values below the true quantile)."""
    ordered = np.sort(a)
    n = ordered.size
    half = _Z95 * math.sqrt(n * q * (1.0 - q))
    lo_rank = max(0, math.floor(n * q - half))
    hi_rank = min(n - 1, math.ceil(n * q + half))
    return (float(np.quantile(a, q)), float(ordered[lo_rank]), float(ordered[hi_rank]))


def stat_band(xs: Sequence[float], stat: str) -> tuple[float, float, float]:
    """(stat, band low, band high) of ``xs`` over seeds; NaN when there is no value."""
    if " - " in stat:
        first, second = stat.split(" - ")
        v1, lo1, hi1 = stat_band(xs, first)
        v2, lo2, hi2 = stat_band(xs, second)
        return (v1 - v2, lo1 - hi2, hi1 - lo2)
    a = np.asarray(xs, dtype=np.float64)
    if a.size == 0:
        return (math.nan, math.nan, math.nan)
    level = quantile_level(stat)
    if level is not None:
        return _quantile_band(a, level)
    v = a * a if stat in ("mse", "rmse") else a
    mean = float(np.mean(v))
    half = _Z95 * float(np.std(v, ddof=1)) / math.sqrt(v.size) if v.size > 1 else 0.0
    lo, hi = mean - half, mean + half
    if stat == "rmse":
        return (math.sqrt(mean), math.sqrt(max(lo, 0.0)), math.sqrt(hi))
    if stat == "median":
        return (float(np.median(a)), lo, hi)
    return (mean, lo, hi)


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Least-squares slope of log y on log x over the positive pairs (None if < 2 of them)."""
    pairs = [(a, b) for a, b in zip(x, y, strict=True) if a > 0 and b > 0]
    if len(pairs) < 2 or len({a for a, _ in pairs}) < 2:
        return None
    lx = np.log([a for a, _ in pairs])
    ly = np.log([b for _, b in pairs])
    return float(np.polyfit(lx, ly, 1)[0])


@dataclass(frozen=True)
class Series:
    """One line of a figure: its label, x positions (numbers) and the aggregates at each."""

    label: str
    x: list[float]
    x_labels: list[str]
    y: list[float]
    lo: list[float]
    hi: list[float]
    seeds: list[int]
    theory: list[float] | None
    slope: float | None


def _x_axis(rows: Sequence[Row], column: str) -> tuple[list[str], bool]:
    """The distinct x cells in order of first appearance, and whether all are numbers."""
    order = list(dict.fromkeys(r.get(column, "") for r in rows))
    numeric = all(number(c) is not None for c in order)
    if numeric:
        order.sort(key=lambda c: float(c))
    return order, numeric


def x_is_numeric(rows: Sequence[Row], plot: PlotSpec) -> bool:
    return _x_axis([r for r in rows if plot.shows(r)], plot.x)[1]


def plot_series(rows: Sequence[Row], plot: PlotSpec) -> list[Series]:
    """The lines of ``plot`` drawn from ``rows``: per hue value, stat(y) over seeds at each x."""
    kept = [r for r in rows if plot.shows(r)]
    xs, numeric = _x_axis(kept, plot.x)
    hues = list(dict.fromkeys(r.get(plot.hue, "") for r in kept)) if plot.hue else [""]
    if plot.hue_in is not None:
        hues = [h for h in (cell(v) for v in plot.hue_in) if h in hues]
    out = []
    for hue in hues:
        mine = [r for r in kept if plot.hue is None or r.get(plot.hue) == hue]
        px: list[float] = []
        labels: list[str] = []
        y: list[float] = []
        lo: list[float] = []
        hi: list[float] = []
        seeds: list[int] = []
        theory: list[float] = []
        for i, xc in enumerate(xs):
            at = [r for r in mine if r.get(plot.x, "") == xc]
            ys = values(at, plot.y)
            if not ys:
                continue
            center, low, high = stat_band(ys, plot.stat)
            px.append(float(xc) if numeric else float(i))
            labels.append(xc)
            y.append(center)
            lo.append(low)
            hi.append(high)
            seeds.append(len(ys))
            if plot.theory is not None:
                th = values(at, plot.theory)
                t = float(np.mean(th)) if th else math.nan
                theory.append(math.sqrt(t) if plot.theory_sqrt and t >= 0 else t)
        if not px:
            continue
        has_theory = plot.theory is not None and any(math.isfinite(t) for t in theory)
        slope = loglog_slope(px, y) if plot.slope and numeric else None
        short = plot.hue.removeprefix("params.").removeprefix("behaviour.") if plot.hue else ""
        label = f"{short} = {hue}" if plot.hue else plot.y
        out.append(
            Series(label, px, labels, y, lo, hi, seeds, theory if has_theory else None, slope)
        )
    return out


def describe_where(where: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} = {cell(v)}" for k, v in where.items())


def population_text(manifest: Mapping[str, Any]) -> str:
    """A short description of the experiment's base population (for titles)."""
    pop = manifest.get("population", {})
    parts = [
        f"{k.replace('_', '-')}={json.dumps(v) if not isinstance(v, str) else v}"
        for k, v in pop.items()
    ]
    return ", ".join(parts)

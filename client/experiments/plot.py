"""Figures of an experiment, drawn from its trials CSV only (``fedldp experiment plot DIR``).

Each declared plot becomes ``DIR/plot-K.png``: per hue value, ``stat`` of the y column over the
seeds against x (``fedldp.client.experiments.aggregate.plot_series``), with its 95% band, the
theory curve dashed where the plot names a theory column the protocol fills, and the fitted
log-log slope in the legend where asked. Needs matplotlib (``pip install 'fedldp[plot]'``).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from fedldp.client.experiments.aggregate import (
    Series,
    describe_where,
    plot_series,
    population_text,
    quantile_level,
    x_is_numeric,
)
from fedldp.client.experiments.derived import with_derived
from fedldp.client.experiments.results import read_rows
from fedldp.client.experiments.spec import PlotSpec
from fedldp.client.extras import optional_import

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["axis_label", "draw", "plot_directory", "read_manifest"]

_COLUMN_TEXT = {
    "epsilon": "privacy budget ε (every user)",
    "epsilon-mix": "ε profile (ε:fraction of users)",
    "epsilon-uniform": "ε uniform on [a:b]",
    "users": "number of users n",
    "samples": "samples per user m",
    "imbalance": "imbalance γ (s_i = ⌈N (i/n)^γ⌉)",
    "dimension": "dimension d",
    "items": "domain size k",
    "private": "private features s*",
    "protocol": "protocol",
    "shape": "Lomax shape a",
    "rate": "exponential rate λ",
    "failed": "fraction of trials the protocol refused",
    "behaviour.dropout": "dropout: probability P that a user leaves before each round",
    "behaviour.attackers": "fraction of fake users (attackers) β",
}
_STAT_TEXT = {
    "mean": "mean over seeds of",
    "median": "median over seeds of",
    "mse": "mean squared",
    "rmse": "root mean squared",
}


def _column_text(column: str) -> str:
    if column.startswith("params."):
        return f"protocol parameter {column.removeprefix('params.')}"
    return _COLUMN_TEXT.get(column, column)


_SHORT_STAT = {"mean": "mean", "median": "median", "mse": "MSE", "rmse": "RMSE"}


def _stat_text(stat: str) -> str:
    level = quantile_level(stat)
    if level is not None:
        return f"{level:g} quantile over seeds of"
    return _STAT_TEXT[stat]


def _short_stat(stat: str) -> str:
    level = quantile_level(stat)
    return f"{level:g} quantile" if level is not None else _SHORT_STAT[stat]


def axis_label(column: str, stat: str | None = None, norm: str | None = None) -> str:
    """A reader's label for a column (and the statistic taken of it)."""
    if column == "error":
        what = {"abs": "|θ̂ − θ|", "l2": "‖θ̂ − θ‖₂", "linf": "‖θ̂ − θ‖∞"}.get(
            norm or "", norm or "error of the estimate"
        )
        if stat in ("mse", "rmse"):
            return f"{_STAT_TEXT[stat]} error over seeds, {what}"
        return f"{_stat_text(stat or 'mean')} error {what}".strip()
    text = _column_text(column)
    return f"{_stat_text(stat)} {text}" if stat else text


def read_manifest(directory: Path) -> dict[str, Any]:
    """``DIR/experiment.yaml`` as written by ``fedldp experiment run``."""
    path = directory / "experiment.yaml"
    try:
        loaded = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror} (run the experiment first)") from None
    if not isinstance(loaded, dict) or "experiment" not in loaded:
        raise ValueError(f"{path} is not an experiment manifest")
    return loaded


_FLAT_LABEL_CHARS = 70
"""Most characters of category labels written flat under the x axis; beyond, they slant."""
_NAMED_PROTOCOLS = 4
"""Most protocols a title names one by one."""


def _title(manifest: Mapping[str, Any], plot: PlotSpec, rows: Sequence[Mapping[str, str]]) -> str:
    exp = manifest["experiment"]
    head = plot.title or (exp.get("title") or exp["name"])
    shown = list(dict.fromkeys(r["protocol"] for r in rows if plot.shows(r)))
    protocols = ", ".join(shown) or "?"
    if len(shown) > _NAMED_PROTOCOLS:
        # e.g. one protocol entry per tuning: the legend names them
        protocols = f"{len(shown)} protocol entries ({shown[0]} … {shown[-1]})"
    swept = set(exp.get("grid", {})) | {k for g in exp.get("zip", []) for k in g}
    fixed = {k: v for k, v in exp.get("population", {}).items() if k not in swept}
    fixed = {k: v for k, v in fixed.items() if k.replace("_", "-") not in swept}
    lines = [head, *textwrap.wrap(f"{protocols} · {population_text({'population': fixed})}", 80)]
    if plot.where:
        lines.append(describe_where(plot.where))
    return "\n".join(lines)


_LEGEND_INSIDE = 5
"""Most lines whose legend goes inside the axes; beyond, it goes to the right of them."""
_TICK_GAP = 0.05
"""Smallest gap between two labelled x ticks, as a fraction of the axis span."""


def _spaced_labels(xs: Sequence[float], *, log: bool) -> list[str]:
    """Tick labels of the grid values, left blank where one would overlap the previous label
    (e.g. ε = 1.5, 1.99, 2 on a log axis up to 400): every tick stays, only its text goes."""
    pos = [math.log(x) if log and x > 0 else x for x in xs]
    span = (max(pos) - min(pos)) or 1.0
    out, last = [], None
    for x, p in zip(xs, pos, strict=True):
        if last is None or (p - last) / span >= _TICK_GAP:
            out.append(f"{x:g}")
            last = p
        else:
            out.append("")
    return out


def draw(
    rows: Sequence[Mapping[str, str]], plot: PlotSpec, manifest: Mapping[str, Any]
) -> tuple[Figure, list[Series]]:
    """The figure of ``plot`` from ``rows`` and the series it draws (for tests and reports)."""
    figure = optional_import("matplotlib.figure", "plot")
    ticker = optional_import("matplotlib.ticker", "plot")
    series = plot_series(rows, plot)
    numeric = x_is_numeric(rows, plot)
    norm = next((r.get("error_norm") for r in rows if r.get("error_norm")), None)
    fig = figure.Figure(figsize=(7.5, 5.0), layout="constrained")
    ax = fig.add_subplot()
    measured = f"measured {_short_stat(plot.stat)}" if plot.y == "error" else "measured"
    # a theory the lines share (one that does not depend on the hue) is drawn once, in grey
    curves = {(tuple(s.x), tuple(s.theory)) for s in series if s.theory is not None}
    shared = plot.hue is not None and len(series) > 1 and len(curves) == 1
    for i, s in enumerate(series):
        color = f"C{i % 10}"
        name = s.label if plot.hue else measured
        label = name if s.slope is None else f"{name} (slope {s.slope:+.2f})"
        # categories are not a continuum: markers and bars, no joining line or band
        style = "-" if numeric else "none"
        # past ten lines the colours repeat: a new marker tells them apart
        marker = "os^Dv"[(i // 10) % 5]
        ax.plot(s.x, s.y, marker=marker, linestyle=style, color=color, label=label)
        if numeric:
            ax.fill_between(s.x, s.lo, s.hi, color=color, alpha=0.2, linewidth=0)
        else:
            ax.vlines(s.x, s.lo, s.hi, color=color, alpha=0.5, linewidth=4)
        if s.theory is not None and plot.theory is not None and not (shared and i > 0):
            root = "√" if plot.theory_sqrt else ""
            what = f"{root}{plot.theory.removeprefix('diagnostics.')}"
            own = plot.hue and not shared
            theory_label = f"{s.label}: theory ({what})" if own else f"theory ({what})"
            ax.plot(
                s.x,
                s.theory,
                linestyle="--" if numeric else "none",
                marker="_",
                markersize=14,
                color="0.35" if shared else color,
                label=theory_label,
            )
    if plot.logx and numeric:
        ax.set_xscale("log")
    if numeric and series:
        # tick the grid values themselves, written plainly (4000, not 4×10³)
        xs = sorted({x for s in series for x in s.x})
        ax.set_xticks(xs, _spaced_labels(xs, log=plot.logx))
        ax.xaxis.set_minor_locator(ticker.NullLocator())
    if plot.logy:
        ax.set_yscale("log")
    if not numeric and series:
        ticks = {x: t for s in series for x, t in zip(s.x, s.x_labels, strict=True)}
        names = [ticks[x] for x in sorted(ticks)]
        # long category names would run into each other: slant them
        slant = sum(len(n) for n in names) > _FLAT_LABEL_CHARS
        ax.set_xticks(
            sorted(ticks), names, rotation=25 if slant else 0, ha="right" if slant else "center"
        )
        ax.set_xlim(-0.5, max(ticks) + 0.5)
    ax.set_xlabel(plot.xlabel or axis_label(plot.x))
    ax.set_ylabel(plot.ylabel or axis_label(plot.y, plot.stat, norm))
    ax.set_title(_title(manifest, plot, rows), fontsize=10)
    seeds = sorted({n for s in series for n in s.seeds})
    if seeds and seeds[-1] > 1:  # one seed per point draws no band: say nothing about one
        seed_text = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]}"
        ax.plot([], [], " ", label=f"bands: 95% CI over {seed_text} seeds")
    if len(series) > _LEGEND_INSIDE:
        # many lines: a legend inside would hide some of them
        fig.set_size_inches(9.5, 5.0)
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    else:
        ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig, series


def plot_directory(directory: Path, *, plots: Sequence[PlotSpec] | None = None) -> list[Path]:
    """Draw every plot the experiment in ``directory`` declares; the paths of the PNG files."""
    manifest = read_manifest(directory)
    if plots is None:
        plots = [PlotSpec.model_validate(p) for p in manifest["experiment"].get("plots", [])]
    derived = manifest["experiment"].get("derived", {})
    rows = with_derived(read_rows(directory / "trials.csv"), derived)
    if not rows:
        raise ValueError(f"{directory}/trials.csv holds no trials (run the experiment first)")
    out = []
    for k, plot in enumerate(plots, start=1):
        fig, _ = draw(rows, plot, manifest)
        path = directory / f"plot-{k}.png"
        fig.savefig(path, dpi=110)
        out.append(path)
    return out

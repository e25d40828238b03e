"""Experiment files: a declarative sweep of in-process simulations (STYLE rule 16).

An experiment file is YAML::

    name: hetero-weights
    protocol: hetero-mean-rr          # or `protocols: [a, b]` to compare several
    population: {users: 20000, distribution: two-point, mean: 0.2}   # fedldp simulate's options
    params: {}                        # protocol parameters
    grid:                             # cartesian product; any population or params key
      epsilon-mix: ["0.1:0.5,1:0.5", "0.2:0.7,3:0.3"]
      params.weights: [paper, uniform]
    zip:                              # axes varied together (one point per position),
      - {users: [16000, 1024000], samples: [64, 1]}   # crossed with the grid and other groups
    seeds: 20                         # seeds 0..19, or an explicit list
    plots:
      - {x: epsilon-mix, y: error, hue: params.weights}
    checks: [...]                     # claims checked on the results (experiments.checks)
    scales: {paper: {seeds: 200}}     # overrides for `fedldp reproduce --scale paper`

Population keys are the ``PopulationSpec`` fields (``fedldp simulate``'s population flags, with
``-`` or ``_``); ``params.K`` is protocol parameter K; ``behaviour`` holds ``fedldp simulate``'s
behaviour options (dropout, attackers, …: ``fedldp.client.experiments.conduct``) and
``behaviour.K`` is one of them on a grid; ``protocol`` may be a grid key too. ``derived`` names
columns computed from each row (``fedldp.client.experiments.derived``), for theory lines. Every
grid point × protocol × seed is one trial. ``zip`` lists groups of axes of equal length that vary
together (e.g. populations of equal n·m but different shapes: user-level against item-level);
``protocol`` may be one of them. ``kind: audit`` makes every trial an empirical privacy audit
(``fedldp.client.experiments.audit``): ``protocol`` names audit cases
(``fedldp.protocol.catalogue.AUDITS``) and ``params`` the audit's settings. The base file is the
quick scale; ``scales.NAME`` overrides ``population``, ``params`` and ``seeds`` key by key and
replaces grid axes and zip groups. Unknown keys
and invalid values (of the experiment, of any trial's population or parameters) are refused by
``fedldp.client.experiments.loading.load_experiment`` before anything runs, naming the file
and line.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fedldp.client.experiments.derived import check_expression

__all__ = [
    "CheckSpec",
    "Experiment",
    "ExperimentSpec",
    "PlotSpec",
    "Trial",
    "cell",
    "manifest_columns",
    "population_key",
]

_ONE_STAT = r"(mean|median|mse|rmse|q[0-9]{1,4})"
Stat = Annotated[str, Field(pattern=rf"^{_ONE_STAT}$")]
"""A statistic over seeds: mean, median, mse, rmse, or ``qDIGITS``, the quantile at level
0.DIGITS (``q95``: the 0.95 quantile, ``q999``: the 0.999 quantile), e.g. of |error| for the
tail bounds of heterogeneous-ldp.md §5 E5."""
CheckStat = Annotated[str, Field(pattern=rf"^{_ONE_STAT}( - {_ONE_STAT})?$")]
"""A claim's statistic: a ``Stat``, or the difference of two over the same seeds, ``"A - B"``
(``"q99 - median"``: how far the tail lies beyond the typical error, heterogeneous-ldp.md §5
E5's second part)."""
_FROZEN = ConfigDict(extra="forbid", frozen=True)


def cell(value: Any) -> str:
    """A value as it is written in the CSV: text as is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def population_key(key: str) -> str:
    return key.replace("-", "_")


def manifest_columns(experiment: dict[str, Any]) -> list[str]:
    """The configuration columns of a resolved experiment (a manifest's ``experiment``)."""
    keys = [*experiment.get("grid", {}), *(k for g in experiment.get("zip", []) for k in g)]
    return ["protocol", *[k for k in keys if k != "protocol"]]


class PlotSpec(BaseModel):
    """One figure: ``stat`` of column ``y`` over the seeds against ``x``, a line per ``hue``."""

    model_config = _FROZEN

    x: str
    y: str = "error"
    hue: str | None = None
    hue_in: list[Any] | None = Field(
        None, description="draw only these values of the hue column, in this order"
    )
    stat: Stat = "mean"
    where: dict[str, Any] = Field(default_factory=dict, description="keep rows with these values")
    logx: bool = False
    logy: bool = False
    slope: bool = Field(False, description="fit log y = a + b log x per line, b in the legend")
    theory: str | None = Field(None, description="a column holding the theory value (mean)")
    theory_sqrt: bool = Field(False, description="draw the square root of the theory column")
    title: str | None = None
    xlabel: str | None = None
    ylabel: str | None = None

    @model_validator(mode="after")
    def _hue_in_needs_hue(self) -> PlotSpec:
        if self.hue_in is not None and (self.hue is None or not self.hue_in):
            raise ValueError("hue_in lists values (one or more) of the hue column")
        return self

    def shows(self, row: Mapping[str, str]) -> bool:
        """Whether ``row`` is drawn: it matches ``where`` and its hue is one of ``hue_in``."""
        if any(row.get(k) != cell(v) for k, v in self.where.items()):
            return False
        if self.hue is None or self.hue_in is None:
            return True
        return row.get(self.hue) in {cell(v) for v in self.hue_in}


class Quantity(BaseModel):
    """``stat`` of column ``y`` over the rows matching ``where`` (inside each checked group).

    With ``best_of``, the smallest such ``stat`` over the values of that column, or over the
    combinations of values of several (those listed in ``among``, or all): the papers' tuned
    minimum, e.g. of a method run at several tunings, each a protocol entry of its own label
    (huber-user-level-dp.md §7.0), or over grid axes of parameters (public-features-ldp.md §6.2).
    """

    model_config = _FROZEN

    y: str | None = None
    stat: CheckStat | None = None
    where: dict[str, Any] = Field(default_factory=dict)
    best_of: str | tuple[str, ...] | None = None
    among: list[Any] | None = None

    @property
    def tuned(self) -> tuple[str, ...]:
        """The columns the minimum is taken over (none without ``best_of``)."""
        if self.best_of is None:
            return ()
        return (self.best_of,) if isinstance(self.best_of, str) else self.best_of

    @model_validator(mode="after")
    def _among_needs_best_of(self) -> Quantity:
        if self.best_of is not None and not self.tuned:
            raise ValueError("best_of names one column or more")
        if self.among is not None and (len(self.tuned) != 1 or not self.among):
            raise ValueError("among lists values of one best_of column: one value or more")
        return self


class CheckSpec(BaseModel):
    """A claim checked on the results, once per group of ``per`` values.

    ``slope``: the log-log slope of ``stat(y)`` against ``x`` (over the x values ``x_in`` when
    given) is in [min, max]; with ``minus``, the slope minus that quantity's slope against the
    same x (a theory column's, e.g. the §5.3 formula's, or another protocol's: "equal slopes
    within ±t"), its ``where`` applied to the group's rows before the check's own. ``ratio``:
    numerator / denominator is in [min, max]. ``bound``: ``stat(y)`` is in [min, max]. The claim
    holds when every group passes, partly when some do, fails when none does. A slope or bound
    with ``best_of`` (and ``among``) takes, at each x or configuration, the smallest ``stat(y)``
    over that column's values, as a ratio's ``Quantity`` does: a tuned method's curve.
    """

    model_config = _FROZEN

    claim: str
    paper: str = Field("", description="the paper's (or the spec's) value, as text")
    tag: str = Field("", description="e.g. MUST or PAPER-CLAIM (huber-user-level-dp.md §7.0)")
    kind: Literal["slope", "ratio", "bound"]
    y: str = "error"
    stat: CheckStat = "mean"
    x: str | None = None
    x_in: tuple[float, ...] | None = Field(
        None, description="slope: fit over these x values only (one regime of a wider sweep)"
    )
    where: dict[str, Any] = Field(default_factory=dict)
    per: tuple[str, ...] = ()
    minus: Quantity | None = Field(
        None, description="slope: subtract this quantity's slope (a tuned one with best_of)"
    )
    numerator: Quantity | None = None
    denominator: Quantity | None = None
    min: float | None = None
    max: float | None = None
    best_of: str | tuple[str, ...] | None = None
    among: list[Any] | None = None

    def tuning(self) -> Quantity | None:
        """A slope's or bound's tuned minimum (``best_of``) as a Quantity, None without one."""
        if self.best_of is None and self.among is None:
            return None
        return Quantity(best_of=self.best_of, among=self.among)

    @model_validator(mode="after")
    def _complete(self) -> CheckSpec:
        if self.kind == "ratio" and (self.best_of is not None or self.among is not None):
            raise ValueError("a ratio takes best_of in its numerator or denominator")
        self.tuning()  # among needs one best_of column
        if self.min is None and self.max is None:
            raise ValueError("a check needs min, max or both")
        if self.kind == "slope" and self.x is None:
            raise ValueError("a slope check needs x")
        if self.x_in is not None and (self.kind != "slope" or len(set(self.x_in)) < 2):
            raise ValueError("x_in belongs to a slope check and needs two x values or more")
        if self.minus is not None and self.kind != "slope":
            raise ValueError("minus belongs to a slope check")
        if self.kind == "ratio" and (self.numerator is None or self.denominator is None):
            raise ValueError("a ratio check needs numerator and denominator")
        return self


class ProtocolEntry(BaseModel):
    """A protocol under a label of its own, with parameters of its own (over ``params``): one
    protocol compared in several settings, e.g. central-huber under both calibrations."""

    model_config = _FROZEN

    name: str
    label: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @property
    def column(self) -> str:
        return self.label or self.name


class ScaleSpec(BaseModel):
    """Overrides of one scale (``quick`` or ``paper``)."""

    model_config = _FROZEN

    population: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)
    behaviour: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    zip: list[dict[str, list[Any]]] | None = None
    seeds: int | list[int] | None = None

    @field_validator("zip")
    @classmethod
    def _zip_groups(cls, v: list[dict[str, list[Any]]] | None) -> list[dict[str, list[Any]]] | None:
        return None if v is None else check_zip(v)


class ExperimentSpec(BaseModel):
    """An experiment file, as written."""

    model_config = _FROZEN

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    title: str | None = None
    description: str = ""
    protocol: str | None = None
    protocols: list[str | ProtocolEntry] | None = None
    kind: Literal["simulate", "audit"] = Field(
        "simulate", description="simulate (fedldp simulate per trial) or audit (a privacy audit)"
    )
    population: dict[str, Any] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)
    behaviour: dict[str, Any] = Field(
        default_factory=dict, description="fedldp simulate's behaviour options (conduct.py)"
    )
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    zip: list[dict[str, list[Any]]] = Field(
        default_factory=list, description="groups of axes varied together (equal lengths)"
    )
    seeds: int | list[int] = 10
    derived: dict[str, str] = Field(
        default_factory=dict, description="columns computed from each row (derived.py)"
    )
    plots: list[PlotSpec] = Field(default_factory=list)
    checks: list[CheckSpec] = Field(default_factory=list)
    scales: dict[Literal["quick", "paper"], ScaleSpec] = Field(default_factory=dict)

    @field_validator("grid")
    @classmethod
    def _axes(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in v.items():
            if not values:
                raise ValueError(f"grid axis {key!r} has no values")
            if len({cell(x) for x in values}) != len(values):
                raise ValueError(f"grid axis {key!r} repeats a value")
        return v

    @field_validator("zip")
    @classmethod
    def _zip_groups(cls, v: list[dict[str, list[Any]]]) -> list[dict[str, list[Any]]]:
        return check_zip(v)

    @field_validator("derived")
    @classmethod
    def _expressions(cls, v: dict[str, str]) -> dict[str, str]:
        for name, expression in v.items():
            try:
                check_expression(expression)
            except ValueError as e:
                raise ValueError(f"derived column {name!r}: {e}") from None
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: int | list[int]) -> int | list[int]:
        if isinstance(v, int) and v < 1:
            raise ValueError("seeds must be >= 1 (a count) or a list of seeds")
        if isinstance(v, list) and (not v or len(set(v)) != len(v) or min(v) < 0):
            raise ValueError("a list of seeds must be non-empty, distinct and >= 0")
        return v

    @model_validator(mode="after")
    def _one_protocol_field(self) -> ExperimentSpec:
        swept = "protocol" in self.grid or any("protocol" in g for g in self.zip)
        if (self.protocol is None) == (self.protocols is None) and not swept:
            raise ValueError("give protocol or protocols (exactly one)")
        if self.protocols is not None and swept:
            raise ValueError("protocols and a protocol grid axis exclude each other")
        zipped = [k for g in self.zip for k in g]
        if len(set(zipped)) != len(zipped) or set(zipped) & set(self.grid):
            raise ValueError("an axis is in two zip groups, or in a zip group and the grid")
        labels = [p if isinstance(p, str) else p.column for p in self.protocols or []]
        if len(set(labels)) != len(labels):
            raise ValueError("two protocols share a label: give each its own label")
        return self

    def entries(self) -> dict[str, ProtocolEntry]:
        """Every protocol by the label its rows carry in the ``protocol`` column."""
        in_zip = next((g["protocol"] for g in self.zip if "protocol" in g), None)
        listed = self.protocols or self.grid.get("protocol") or in_zip or [self.protocol]
        out = {}
        for p in listed:
            entry = (
                ProtocolEntry(name=p)
                if isinstance(p, str)
                else p
                if isinstance(p, ProtocolEntry)
                else ProtocolEntry.model_validate(p)
            )
            out[entry.column] = entry
        return out


@dataclass(frozen=True)
class Trial:
    """One simulation: a grid point of one protocol, with one seed."""

    point: int
    key: str
    config: dict[str, Any]
    seed: int
    protocol: str
    population: dict[str, Any]
    params: dict[str, Any]
    behaviour: dict[str, Any] = field(default_factory=dict)
    kind: str = "simulate"


def check_zip(groups: list[dict[str, list[Any]]]) -> list[dict[str, list[Any]]]:
    """Zip groups: each non-empty, its axes of one length, no axis repeating a position."""
    for group in groups:
        if not group:
            raise ValueError("a zip group needs one axis or more")
        lengths = {len(values) for values in group.values()}
        if len(lengths) != 1 or 0 in lengths:
            raise ValueError(f"the axes of a zip group need one length >= 1, got {sorted(lengths)}")
        points = list(zip(*([cell(x) for x in vs] for vs in group.values()), strict=True))
        if len(set(points)) != len(points):
            raise ValueError(f"zip group {', '.join(group)} repeats a point")
    return groups


@dataclass(frozen=True)
class Experiment:
    """A validated experiment at one scale: its spec, its axes and its trials in order."""

    spec: ExperimentSpec
    scale: str
    source: Path | None
    axes: dict[str, list[Any]]
    seeds: list[int]
    population: dict[str, Any]
    params: dict[str, Any]
    behaviour: dict[str, Any] = field(default_factory=dict)
    zipped: list[dict[str, list[Any]]] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        """The configuration columns of the CSV (``protocol``, then the grid and zip keys)."""
        keys = [*self.axes, *(k for g in self.zipped for k in g)]
        return ["protocol", *[k for k in keys if k != "protocol"]]

    @property
    def protocols(self) -> list[str]:
        """The protocol labels, in order."""
        return list(self.spec.entries())

    def points(self) -> list[dict[str, Any]]:
        """Every configuration: the grid's product, crossed with each zip group's positions."""
        axes: list[list[dict[str, Any]]] = [[{k: v} for v in vs] for k, vs in self.axes.items()]
        for group in self.zipped:
            keys = list(group)
            axes.append(
                [dict(zip(keys, vs, strict=True)) for vs in zip(*group.values(), strict=True)]
            )
        return [
            {k: v for part in parts for k, v in part.items()} for parts in itertools.product(*axes)
        ]

    def trials(self) -> list[Trial]:
        out = []
        for point_index, point in enumerate(self.points()):
            entry = self.spec.entries()[str(point["protocol"])]
            population = dict(self.population)
            params = {**self.params, **entry.params}
            behaviour = dict(self.behaviour)
            for k, v in point.items():
                if k.startswith("params."):
                    params[k.removeprefix("params.")] = v
                elif k.startswith("behaviour."):
                    behaviour[population_key(k.removeprefix("behaviour."))] = v
                elif k != "protocol":
                    population[population_key(k)] = v
            config = {c: point[c] for c in self.columns}
            for seed in self.seeds:
                out.append(
                    Trial(
                        point=point_index,
                        key=trial_key(config, seed),
                        config=config,
                        seed=seed,
                        protocol=entry.name,
                        population=population,
                        params=params,
                        behaviour=behaviour,
                        kind=self.spec.kind,
                    )
                )
        return out

    def resolved(self) -> dict[str, Any]:
        """The experiment as it runs at this scale (scale overrides applied)."""
        base = self.spec.model_dump(mode="json", exclude={"scales"}, exclude_none=True)
        base.update(
            population=self.population,
            params=self.params,
            behaviour=self.behaviour,
            grid=dict(self.axes.items()),
            zip=self.zipped,
            seeds=self.seeds,
        )
        if not self.zipped:
            base.pop("zip", None)
        return base


def trial_key(config: dict[str, Any], seed: int) -> str:
    """A trial's stable key: a hash of its configuration and seed (the CSV's resumption key)."""
    text = json.dumps({"config": {k: cell(v) for k, v in config.items()}, "seed": seed})
    return hashlib.sha256(text.encode()).hexdigest()[:16]

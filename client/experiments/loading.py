"""Loading an experiment file: its YAML read with line marks, validated against the schema of
``fedldp.client.experiments.spec``, resolved at a scale (``scales.NAME`` overrides), and every
trial's population and parameters checked, so that an invalid file is refused before anything
runs, naming the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fedldp.client.experiments.audit import AuditParams
from fedldp.client.experiments.conduct import BehaviourKeyError, conduct_of
from fedldp.client.experiments.spec import (
    Experiment,
    ExperimentSpec,
    Trial,
    cell,
    population_key,
)
from fedldp.client.experiments.yamlmarks import (
    Lines,
    MarkedError,
    load_marked,
    locate,
    validation_message,
)
from fedldp.client.population.build import build_population
from fedldp.client.population.spec import PopulationSpec
from fedldp.client.simulate import fill_from_population
from fedldp.protocol.catalogue import get_audit, get_protocol

__all__ = ["load_experiment", "parse_experiment"]


def _scaled(spec: ExperimentSpec, scale: str, source: Path | None) -> Experiment:
    over = next((v for k, v in spec.scales.items() if k == scale), None)
    population = {population_key(k): v for k, v in spec.population.items()}
    params = dict(spec.params)
    behaviour = {population_key(k): v for k, v in spec.behaviour.items()}
    grid = dict(spec.grid)
    zipped = [dict(g) for g in spec.zip]
    seeds: int | list[int] = spec.seeds
    if over is not None:
        population.update({population_key(k): v for k, v in over.population.items()})
        params.update(over.params)
        behaviour.update({population_key(k): v for k, v in over.behaviour.items()})
        grid.update(over.grid)
        zipped = [dict(g) for g in over.zip] if over.zip is not None else zipped
        seeds = over.seeds if over.seeds is not None else seeds
    csv = population.get("csv")
    if isinstance(csv, str) and source is not None and not Path(csv).is_absolute():
        population["csv"] = str(source.parent / population["csv"])
    grid.pop("protocol", None)
    in_zip = any("protocol" in g for g in zipped)
    axes: dict[str, list[Any]] = {**({} if in_zip else {"protocol": list(spec.entries())}), **grid}
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    return Experiment(
        spec, scale, source, axes, seed_list, population, params, behaviour, zipped=zipped
    )


def _scaled_path(lines: Lines, scale: str, path: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Where a merged value was written: in the scale's overrides if there, else the base."""
    over = ("scales", scale, *path)
    return over if over in lines else path


def _validate_trials(experiment: Experiment, source: str, lines: Lines) -> None:
    """Refuse any trial whose population or parameters are invalid, before anything runs."""
    seen: set[str] = set()
    scale = experiment.scale
    for trial in experiment.trials():
        probe = json.dumps([trial.config, trial.population, trial.params], default=str)
        if probe in seen:
            continue
        seen.add(probe)

        def where(kind: str, key: str | None, _trial: Trial = trial) -> int | None:
            grid_key = None
            if key is not None:
                names = (f"params.{key}",) if kind == "params" else (key, key.replace("_", "-"))
                grid_key = next((g for g in names if g in experiment.axes), None)
            if kind == "behaviour" and key is not None:
                grid_key = next(
                    (
                        g
                        for g in (f"behaviour.{key}", f"behaviour.{key.replace('_', '-')}")
                        if g in experiment.axes
                    ),
                    None,
                )
            if grid_key is not None:
                value = _trial.config.get(grid_key)
                pos = [cell(v) for v in experiment.axes[grid_key]].index(cell(value))
                return locate(lines, _scaled_path(lines, scale, ("grid", grid_key, pos)))
            spelled = [k for k in (key, key and key.replace("_", "-")) if k]
            for k in spelled:
                path = _scaled_path(lines, scale, (kind, k))
                if path in lines:
                    return lines[path]
            return locate(lines, _scaled_path(lines, scale, (kind,)))

        if trial.kind == "audit":
            _validate_audit(trial, source, lines, where)
            continue
        try:
            conduct_of(trial.behaviour)
        except BehaviourKeyError as e:
            raise MarkedError(source, where("behaviour", e.key), f"behaviour: {e}") from None
        try:
            protocol = get_protocol(trial.protocol)
        except ValueError as e:
            line = where("protocol", None)
            for path in (("protocol",), ("protocols",), ("grid", "protocol")):
                line = lines.get(path, line)
            raise MarkedError(source, line, str(e)) from None
        try:
            pop_spec = PopulationSpec.model_validate(trial.population)
        except ValidationError as e:
            loc, msg = validation_message(e)[0]
            key = str(loc[0]) if loc else None
            name = f"{key.replace('_', '-')}: " if key else ""
            raise MarkedError(
                source, where("population", key), f"population: {name}{msg}"
            ) from None
        try:
            population = build_population(pop_spec, trial.seed)
        except ValueError as e:
            raise MarkedError(source, where("population", None), f"population: {e}") from None
        if population.data_kind != protocol.data_kind:
            raise MarkedError(
                source,
                where("population", "distribution"),
                f"protocol {protocol.name} takes {protocol.data_kind} data, the population "
                f"holds {population.data_kind} data",
            )
        try:
            protocol.parse_params(fill_from_population(protocol, trial.params, population))
        except ValidationError as e:
            loc, msg = validation_message(e)[0]
            key = str(loc[0]) if loc else None
            raise MarkedError(
                source, where("params", key), f"params of {protocol.name}: {key}: {msg}"
            ) from None
        except ValueError as e:
            raise MarkedError(source, where("params", None), f"params: {e}") from None


def _validate_audit(trial: Trial, source: str, lines: Lines, where: Any) -> None:
    """An audit trial: a known audit case, valid ``AuditParams``, no population."""
    try:
        get_audit(trial.protocol)
    except ValueError as e:
        line = where("protocol", None)
        for path in (("protocol",), ("protocols",), ("grid", "protocol")):
            line = lines.get(path, line)
        raise MarkedError(source, line, str(e)) from None
    if trial.population or trial.behaviour:
        raise MarkedError(
            source,
            where("population", None),
            "an audit takes no population or behaviour: its settings are params",
        )
    try:
        params = AuditParams.model_validate(trial.params)
    except ValidationError as e:
        loc, msg = validation_message(e)[0]
        key = str(loc[0]) if loc else None
        raise MarkedError(
            source, where("params", key), f"params of an audit: {key}: {msg}"
        ) from None
    if params.collections > 1 and get_audit(trial.protocol).repeated is None:
        raise MarkedError(
            source,
            where("params", "collections"),
            f"params of an audit: collections: audit case {trial.protocol!r} audits one "
            "report (collections must be 1)",
        )


def _check_references(experiment: Experiment, source: str, lines: Lines) -> None:
    """Plot and check keys must name a configuration column or a result column (checked at
    run time, when the results exist); here: ``where``/``per``/``hue`` keys are grid columns."""
    spec = experiment.spec
    columns = set(experiment.columns) | {"seed"} | set(spec.derived)
    for i, plot in enumerate(spec.plots):
        for key in (plot.hue, *plot.where):
            if key is not None and key not in columns:
                raise MarkedError(
                    source,
                    locate(lines, ("plots", i, "hue" if key == plot.hue else "where")),
                    f"plot {i + 1}: {key!r} is not a grid key ({', '.join(sorted(columns))})",
                )
        if plot.hue_in is not None and plot.hue in experiment.axes:
            known = {cell(v) for v in experiment.axes[plot.hue]}
            unknown = [v for v in plot.hue_in if cell(v) not in known]
            if unknown:
                raise MarkedError(
                    source,
                    locate(lines, ("plots", i, "hue_in")),
                    f"plot {i + 1}: hue_in {unknown!r} are not values of {plot.hue!r}",
                )
    for i, check in enumerate(spec.checks):
        tuning = check.tuning()
        used = [*check.per, *check.where, *(tuning.tuned if tuning else ())]
        for q in (check.numerator, check.denominator, check.minus):
            used += [*q.where, *q.tuned] if q is not None else []
        for key in used:
            if key not in columns:
                raise MarkedError(
                    source,
                    locate(lines, ("checks", i)),
                    f"check {i + 1}: {key!r} is not a grid key ({', '.join(sorted(columns))})",
                )


def parse_experiment(text: str, source: str, scale: str = "quick") -> Experiment:
    """The validated experiment of a file's text; MarkedError (a ValueError) naming the line."""
    raw, lines = load_marked(text, source)
    if not isinstance(raw, dict):
        raise MarkedError(source, locate(lines, ()), "an experiment file holds a mapping")
    try:
        spec = ExperimentSpec.model_validate(raw)
    except ValidationError as e:
        loc, msg = validation_message(e)[0]
        raise MarkedError(source, locate(lines, loc), f"{'.'.join(map(str, loc))}: {msg}") from None
    path = Path(source) if Path(source).exists() else None
    experiment = _scaled(spec, scale, path)
    _check_references(experiment, source, lines)
    _validate_trials(experiment, source, lines)
    return experiment


def load_experiment(path: Path, scale: str = "quick") -> Experiment:
    """Read and validate an experiment file at ``scale``; ValueError naming the file and line."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ValueError(f"cannot read experiment file {path}: {e.strerror}") from None
    return parse_experiment(text, str(path), scale)

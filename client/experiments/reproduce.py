"""``fedldp reproduce``: run the papers' experiments, draw their figures, check their claims.

The experiment files live in the repository's ``experiments/`` folder, one per figure or table
of the papers as the specs' reproduction plans lay them out (names start with ``user-level-``,
``heterogeneous-``, ``huber-``, ``semi-feature-``), the robustness experiments of issue 13
(``robustness-``: error against dropout and attackers) and the classic baselines' of issue 26
(``classic-``: Wang et al. 2017's frequency oracles, Wang et al. 2019's mean mechanisms;
docs/classic.md) and the repeated-collection reproductions of issue 29 (``longitudinal-``:
RAPPOR's longitudinal bound, Ding et al. 2017's accuracy and privacy over time;
docs/longitudinal.md). The wheel ships them as package data (``fedldp/experiment_files/``, built
from ``experiments/`` by pyproject.toml's package-dir); an editable install
(``scripts/bootstrap``'s) reads the checkout's ``experiments/`` itself; ``--experiments DIR``
(or ``FEDLDP_EXPERIMENTS``) names another folder. Each experiment runs into ``OUT/NAME/``
(resumable, like ``fedldp experiment run``), its figures are drawn there, and ``OUT/REPORT.md``
shows every figure with a table claim → paper's value → measured → verdict.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedldp.client.experiments.checks import CheckOutcome, evaluate_all
from fedldp.client.experiments.derived import with_derived
from fedldp.client.experiments.loading import load_experiment
from fedldp.client.experiments.plot import plot_directory
from fedldp.client.experiments.results import read_rows
from fedldp.client.experiments.runner import RunSummary, provenance, run_experiment
from fedldp.client.experiments.spec import Experiment, Trial
from fedldp.client.extras import optional_import

__all__ = [
    "ReproducedExperiment",
    "experiment_file",
    "experiments_dir",
    "find_experiments",
    "reproduce",
    "shipped_dir",
    "write_report",
]

_PREFIXES = (
    "user-level-",
    "heterogeneous-",
    "huber-",
    "semi-feature-",
    "robustness-",
    "classic-",
    "longitudinal-",
)


def shipped_dir() -> Path:
    """The experiment files that come with fedldp: an installed wheel's package data
    (``fedldp/experiment_files/``), else, in an editable install, the checkout's
    ``experiments/`` folder the wheel's is built from."""
    here = Path(__file__).resolve().parents[2]  # the installed fedldp/, or the checkout's root
    installed = here / "experiment_files"
    return installed if installed.is_dir() else here / "experiments"


def experiments_dir(given: Path | None = None) -> Path:
    """The folder of experiment files: ``given``, else $FEDLDP_EXPERIMENTS, else the shipped
    ones (``shipped_dir``)."""
    if given is None and os.environ.get("FEDLDP_EXPERIMENTS"):
        given = Path(os.environ["FEDLDP_EXPERIMENTS"])
    path = given or shipped_dir()
    if not path.is_dir():
        where = "--experiments DIR" if given is None else "another folder"
        raise ValueError(f"no experiment folder at {path}; give {where}")
    return path


def find_experiments(folder: Path) -> dict[str, Path]:
    """The reproduction experiments of ``folder`` by name (file stem), sorted."""
    files = sorted(folder.glob("*.yaml"))
    return {p.stem: p for p in files if p.stem.startswith(_PREFIXES)}


def experiment_file(given: Path) -> Path:
    """``given`` when it is a file, else the shipped experiment of that name (with or without
    ``.yaml``: ``fedldp experiment run heterogeneous-e3-frequency`` from any directory).
    ValueError naming both when neither exists."""
    if given.is_file() or given.parent != Path("."):
        return given  # a path: loading it says what is wrong with it
    folder = shipped_dir()
    shipped = folder / (given.name if given.suffix == ".yaml" else f"{given.name}.yaml")
    if shipped.is_file():
        return shipped
    raise ValueError(
        f"no experiment file {given}, nor a shipped experiment of that name in {folder} "
        "(fedldp reproduce --list names them)"
    )


@dataclass(frozen=True)
class ReproducedExperiment:
    experiment: Experiment
    run: RunSummary
    figures: list[Path]
    outcomes: list[CheckOutcome]
    trial_seconds: float
    """The trials' own times summed (``runtime_s`` of the CSV): CPU time on one core."""
    paper_trials: int
    paper_seconds: float
    """An estimate of the paper scale's trial time, from this scale's time per user·sample."""


def _size(trial: Trial) -> float:
    """Users × samples of a trial, the work a simulation's cost is about linear in (a factor
    that is not a number, e.g. a data set's own size, counts as 1)."""
    size = 1.0
    for key in ("users", "samples"):
        value = trial.population.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            size *= float(value)
    return size


def _timing(experiment: Experiment, rows: Sequence[Mapping[str, Any]]) -> tuple[float, int, float]:
    """This scale's summed trial time; the paper scale's trial count and estimated time."""
    seconds = sum(float(r["runtime_s"]) for r in rows if r.get("runtime_s"))
    source = experiment.source
    paper = load_experiment(source, "paper").trials() if source else experiment.trials()
    quick_size = sum(_size(t) for t in experiment.trials())
    per_size = seconds / quick_size if quick_size else 0.0
    return seconds, len(paper), per_size * sum(_size(t) for t in paper)


def reproduce(
    names: Sequence[str],
    *,
    folder: Path,
    out: Path,
    scale: str = "quick",
    jobs: int = 1,
    cluster: str | None = None,
    progress: bool | None = None,
) -> list[ReproducedExperiment]:
    """Run, plot and check the named experiments (all when ``names`` is empty)."""
    known = find_experiments(folder)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown experiment {unknown[0]!r}; see fedldp reproduce --list")
    chosen = list(names) or list(known)
    experiments = [load_experiment(known[n], scale) for n in chosen]  # all validated first
    optional_import("matplotlib.figure", "plot")  # before the trials, not after them
    done = []
    for experiment in experiments:
        directory = out / experiment.spec.name
        run = run_experiment(experiment, directory, jobs=jobs, cluster=cluster, progress=progress)
        if run.interrupted:
            raise KeyboardInterrupt
        figures = plot_directory(directory)
        rows = with_derived(read_rows(directory / "trials.csv"), experiment.spec.derived)
        outcomes = evaluate_all(experiment.spec.checks, rows, experiment.columns)
        timing = _timing(experiment, rows)
        done.append(ReproducedExperiment(experiment, run, figures, outcomes, *timing))
    return done


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_report(done: Sequence[ReproducedExperiment], out: Path, scale: str) -> Path:
    """``OUT/REPORT.md``: a summary, then per experiment its figures and its claims table."""
    info = provenance()
    lines = [
        "# fedldp reproduction report",
        "",
        f"Scale `{scale}` · fedldp {info['fedldp_version'] or '?'} · commit "
        f"`{info['git_commit'] or 'unknown'}`. Every figure and number below is computed from "
        "the `trials.csv` beside it; rerunning `fedldp reproduce` resumes and redraws.",
        "",
        "Trial time is the trials' own times summed (CPU seconds on one core; `--jobs K` divides "
        "the wall time by about K). The paper scale's time is an estimate: this scale's time per "
        "user × sample, times the paper scale's users × samples summed over its trials.",
        "",
        f"| experiment | trials | claims holding | trial time ({scale}) | paper trials "
        "| paper time (estimate) |",
        "|---|---|---|---|---|---|",
    ]
    for d in done:
        held = sum(o.verdict == "holds" for o in d.outcomes)
        lines.append(
            f"| [{d.experiment.spec.name}](#{d.experiment.spec.name}) | {d.run.total} "
            f"| {held} of {len(d.outcomes)} | {_duration(d.trial_seconds)} | {d.paper_trials} "
            f"| {_duration(d.paper_seconds)} |"
        )
    lines.append(
        f"| all | {sum(d.run.total for d in done)} "
        f"| {sum(o.verdict == 'holds' for d in done for o in d.outcomes)} of "
        f"{sum(len(d.outcomes) for d in done)} | {_duration(sum(d.trial_seconds for d in done))} "
        f"| {sum(d.paper_trials for d in done)} "
        f"| {_duration(sum(d.paper_seconds for d in done))} |"
    )
    for d in done:
        spec = d.experiment.spec
        lines += ["", f"## {spec.name}", ""]
        if spec.title:
            lines += [f"**{spec.title}**", ""]
        if spec.description:
            lines += [" ".join(spec.description.split()), ""]
        protocols = ", ".join(d.experiment.protocols)
        lines += [
            f"Protocols {protocols}; {len(d.experiment.seeds)} seeds per configuration; "
            f"{d.run.total} trials ({d.run.skipped} already in the CSV).",
            "",
        ]
        for fig in d.figures:
            lines += [f"![{spec.name}]({fig.relative_to(out).as_posix()})", ""]
        if d.outcomes:
            lines += [
                "| claim | paper's value | pass if | measured | verdict |",
                "|---|---|---|---|---|",
            ]
            for o in d.outcomes:
                tag = f" [{o.check.tag}]" if o.check.tag else ""
                lines.append(
                    f"| {_cell(o.check.claim)}{tag} | {_cell(o.check.paper) or '–'} "
                    f"| {_cell(o.range_text())} | {_cell(o.measured_text())} | **{o.verdict}** |"
                )
    path = out / "REPORT.md"
    path.write_text("\n".join(lines) + "\n")
    return path

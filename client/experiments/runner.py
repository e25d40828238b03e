"""Run an experiment's trials in worker processes (or on a Dask cluster), each row landing in
``trials.csv`` as it ends.

Every trial is one ``fedldp simulate`` run (``build_population`` + ``simulate`` with the trial's
seed), so a row equals what ``fedldp simulate --json`` prints for the same options. Workers are
spawned processes with one BLAS/OpenMP thread each (K workers use K cores, not K × cores);
``jobs=1`` runs the trials in this process; ``cluster`` sends them to the workers of a Dask
scheduler (``fedldp.client.experiments.cluster``). Only this process writes the CSV, appending and
flushing each row as its trial ends, so an interrupted run (Ctrl-C, SIGKILL) loses at most the
trials in flight, and rerunning skips every trial already in the CSV (keyed by configuration and
seed). ``DIR/experiment.yaml`` records the resolved experiment, the package version and the git
commit when known; a directory holding another experiment is refused.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from fedldp.client.cluster import connect
from fedldp.client.experiments.cluster import cluster_rows
from fedldp.client.experiments.conduct import conduct_of
from fedldp.client.experiments.results import TrialsCsv, flatten
from fedldp.client.experiments.spec import Experiment, Trial, cell
from fedldp.threads import VARIABLES, one_blas_thread

__all__ = ["RunSummary", "provenance", "run_experiment", "run_trial"]


@dataclass(frozen=True)
class RunSummary:
    total: int
    skipped: int
    done: int
    interrupted: bool


def run_trial(trial: Trial) -> dict[str, str]:
    """One trial's CSV row (run in a worker process): a simulation, or for an experiment of
    ``kind: audit`` a privacy audit (``fedldp.client.experiments.audit``). A trial the protocol
    refuses (a ValueError from ``simulate``: an infeasible plan, say) or that fails as the server
    would fail it
    (``StudyFailed``: a round below its quorum) is a row with ``failed`` = 1 and the reason in
    ``failure``, and no result columns; others have ``failed`` = 0."""
    from fedldp.client.population.build import build_population
    from fedldp.client.population.spec import PopulationSpec
    from fedldp.client.simulate import StudyFailed, fill_from_population, simulate
    from fedldp.protocol.catalogue import get_protocol

    one_blas_thread()  # a Dask worker's process was started by dask, not by fedldp
    # CPU time of this worker, not wall time: on a shared machine the wall time of a trial
    # measures the other jobs as much as the trial (the report sums these as CPU seconds)
    started = time.process_time()
    if trial.kind == "audit":
        from fedldp.client.experiments.audit import audit_row

        summary = {
            k: cell(v) for k, v in audit_row(trial.protocol, trial.params, trial.seed).items()
        }
        summary.update(failed="0", failure="")
        return _row(trial, summary, started)
    protocol = get_protocol(trial.protocol)
    population = build_population(PopulationSpec.model_validate(trial.population), trial.seed)
    params = protocol.parse_params(fill_from_population(protocol, trial.params, population))
    conduct = conduct_of(trial.behaviour)
    try:
        result = simulate(
            protocol,
            params,
            population,
            trial.seed,
            behaviour=conduct.behaviour,
            round_deadline_s=conduct.round_deadline_s,
            quorum=conduct.quorum,
        )
        summary = flatten(result.to_dict())
        summary.update(failed="0", failure="")
    except (ValueError, StudyFailed) as e:
        # a refusal is a result (e.g. an infeasible plan at this n and ε): a row, not a crash
        summary = {"failed": "1", "failure": " ".join(str(e).split())}
    return _row(trial, summary, started)


def _row(trial: Trial, summary: dict[str, str], started: float) -> dict[str, str]:
    row = {"point": str(trial.point), "key": trial.key, "seed": str(trial.seed)}
    row.update({k: cell(v) for k, v in trial.config.items()})
    for k, v in summary.items():
        row.setdefault(k, v)  # a grid column keeps the value as the experiment wrote it
    row["runtime_s"] = repr(time.process_time() - started)
    return row


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance() -> dict[str, Any]:
    """The package version and the git commit of its source, when known."""
    try:
        version: str | None = metadata.version("fedldp")
    except metadata.PackageNotFoundError:
        version = None
    return {"fedldp_version": version, "git_commit": _git_commit()}


def _write_manifest(experiment: Experiment, out: Path) -> None:
    resolved = experiment.resolved()
    path = out / "experiment.yaml"
    if path.exists():
        old = yaml.safe_load(path.read_text()) or {}
        before = {k: v for k, v in old.get("experiment", {}).items() if k != "seeds"}
        now = {k: v for k, v in resolved.items() if k != "seeds"}
        if before.get("grid") != now.get("grid") or before.get("name") != now.get("name"):
            raise ValueError(
                f"{out} holds the results of another experiment (name or grid differs); "
                "give another --out"
            )
    document = {
        "experiment": resolved,
        "scale": experiment.scale,
        "source": None if experiment.source is None else str(experiment.source),
        **provenance(),
    }
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    os.replace(tmp, path)


@contextmanager
def _one_thread_each() -> Iterator[None]:
    """Spawned workers inherit the environment: one BLAS/OpenMP thread each."""
    saved = {k: os.environ.get(k) for k in VARIABLES}
    os.environ.update(dict.fromkeys(VARIABLES, "1"))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _progress(show: bool, total: int, skipped: int) -> tuple[Any, Any]:
    if not show:
        return nullcontext(), None
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("trials"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )
    task = bar.add_task("running", total=total, completed=skipped)
    return bar, task


def _pool_rows(todo: list[Trial], jobs: int) -> Generator[dict[str, str]]:
    """Rows of ``todo`` from ``jobs`` spawned worker processes, as they finish."""
    spawn = multiprocessing.get_context("spawn")
    with (
        _one_thread_each(),
        cf.ProcessPoolExecutor(max_workers=jobs, mp_context=spawn) as pool,
    ):
        futures = [pool.submit(run_trial, t) for t in todo]
        try:
            for future in cf.as_completed(futures):
                yield future.result()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def run_experiment(
    experiment: Experiment,
    out: Path,
    *,
    jobs: int = 1,
    cluster: str | None = None,
    progress: bool | None = None,
) -> RunSummary:
    """Run every trial of ``experiment`` not yet in ``out/trials.csv``; resumable. The trials
    run in this process (``jobs=1``), in ``jobs`` worker processes, or on the workers of the
    Dask scheduler at ``cluster`` (``fedldp.client.experiments.cluster``); the CSV is the same."""
    if jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    if cluster is not None and jobs != 1:
        raise ValueError(
            "give --jobs or --cluster, not both (the cluster's workers run the trials)"
        )
    out.mkdir(parents=True, exist_ok=True)
    _write_manifest(experiment, out)
    table = TrialsCsv(out / "trials.csv", experiment.columns)
    trials = experiment.trials()
    todo = [t for t in trials if t.key not in table]
    done = 0
    interrupted = False
    with connect(cluster) if cluster is not None and todo else nullcontext() as client:
        rows: Generator[dict[str, str]]
        if client is not None:
            rows = cluster_rows(client, run_trial, todo)
        elif jobs == 1 or len(todo) <= 1:
            rows = (run_trial(t) for t in todo)
        else:
            rows = _pool_rows(todo, jobs)
        show = sys.stderr.isatty() if progress is None else progress
        context, bar_task = _progress(show, len(trials), len(trials) - len(todo))
        with context:
            try:
                for row in rows:
                    table.append(row)
                    done += 1
                    if bar_task is not None:
                        context.advance(bar_task)
            except KeyboardInterrupt:
                interrupted = True
            finally:
                rows.close()  # cancels the trials still in flight
                table.finish()
    return RunSummary(len(trials), len(trials) - len(todo), done, interrupted)

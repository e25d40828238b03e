"""``fedldp experiment run|plot|check`` and ``fedldp reproduce`` (fedldp.client.experiments)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["EXPERIMENT_COMMANDS"]

Subparsers = Any

_RUN_EPILOG = """\
examples:
  fedldp experiment run heterogeneous-e1-weighting --out results/hw --jobs 2
  fedldp experiment plot results/hw
  fedldp experiment check results/hw
  fedldp experiment run heterogeneous-e1-weighting --cluster tcp://scheduler:8786

FILE is an experiment file (your own, say my-sweep.yaml), or the name of one that comes with
fedldp (fedldp reproduce --list names them; in a checkout, they are the files of
experiments/). The run writes DIR/trials.csv (one row per
trial, appended as each ends) and DIR/experiment.yaml; rerunning skips the trials already in
the CSV, so an interrupted run resumes. With --cluster the trials run on the workers of an
existing Dask scheduler (pip install 'fedldp[cluster]'; the workers must run the same fedldp)
and this process writes the same CSV.
"""


def _run(args: argparse.Namespace) -> int:
    from fedldp.client.experiments.loading import load_experiment
    from fedldp.client.experiments.reproduce import experiment_file
    from fedldp.client.experiments.runner import run_experiment

    experiment = load_experiment(experiment_file(args.file), args.scale)
    out = args.out or Path("results") / experiment.spec.name
    summary = run_experiment(
        experiment,
        out,
        jobs=args.jobs,
        cluster=args.cluster,
        progress=True if args.progress else None,
    )
    ran = f"{summary.done} trials run, {summary.skipped} already done, of {summary.total}"
    if summary.interrupted:
        sys.stderr.write(f"interrupted: {ran}; rerun the same command to resume\n")
        return 130
    sys.stderr.write(f"{ran}: {out / 'trials.csv'}\n")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from fedldp.client.experiments.plot import plot_directory

    for path in plot_directory(args.directory):
        print(path)
    return 0


def _check(args: argparse.Namespace) -> int:
    from fedldp.client.experiments.checks import evaluate_all
    from fedldp.client.experiments.derived import with_derived
    from fedldp.client.experiments.plot import read_manifest
    from fedldp.client.experiments.results import read_rows
    from fedldp.client.experiments.spec import CheckSpec, manifest_columns

    manifest = read_manifest(args.directory)["experiment"]
    checks = [CheckSpec.model_validate(c) for c in manifest.get("checks", [])]
    columns = manifest_columns(manifest)
    rows = with_derived(read_rows(args.directory / "trials.csv"), manifest.get("derived", {}))
    outcomes = evaluate_all(checks, rows, columns)
    for o in outcomes:
        print(f"{o.verdict:8} {o.check.claim} ({o.range_text()}): {o.measured_text()}")
    return 0 if all(o.verdict == "holds" for o in outcomes) else 1


def add_experiment_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "experiment",
        help="run, plot and check a declarative sweep of simulations",
        description="Experiments: a YAML file declares protocols, a population (fedldp "
        "simulate's options), parameters, a grid and seeds; every grid point × seed is a trial.",
    )
    sub = parser.add_subparsers(title="experiment commands", metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="run every trial not yet in DIR/trials.csv",
        epilog=_RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "file",
        type=Path,
        metavar="FILE",
        help="experiment file (YAML), or the name of a shipped one (fedldp reproduce --list)",
    )
    run.add_argument("--out", type=Path, metavar="DIR", help="run directory (default results/NAME)")
    run.add_argument("--jobs", type=int, default=1, metavar="K", help="worker processes (1)")
    run.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="run the trials on the workers of this Dask scheduler (tcp://host:8786)",
    )
    run.add_argument(
        "--scale", choices=("quick", "paper"), default="quick", help="the file's scale (quick)"
    )
    run.add_argument("--progress", action="store_true", help="progress bar even without a tty")
    run.set_defaults(handler=_run)
    plot = sub.add_parser("plot", help="draw the declared plots of a run directory")
    plot.add_argument("directory", type=Path, metavar="DIR")
    plot.set_defaults(handler=_plot)
    check = sub.add_parser("check", help="evaluate the declared claims (exit 1 unless all hold)")
    check.add_argument("directory", type=Path, metavar="DIR")
    check.set_defaults(handler=_check)
    parser.set_defaults(handler=lambda _a: (parser.print_help(sys.stderr), 2)[1])


def _reproduce(args: argparse.Namespace) -> int:
    from fedldp.client.experiments.loading import load_experiment
    from fedldp.client.experiments.reproduce import (
        experiments_dir,
        find_experiments,
        reproduce,
        write_report,
    )

    folder = experiments_dir(args.experiments)
    if args.list:
        for name, path in find_experiments(folder).items():
            spec = load_experiment(path, args.scale).spec
            print(f"{name:40} {spec.title or ''}")
        return 0
    done = reproduce(
        args.names,
        folder=folder,
        out=args.out,
        scale=args.scale,
        jobs=args.jobs,
        cluster=args.cluster,
        progress=True if args.progress else None,
    )
    report = write_report(done, args.out, args.scale)
    print(report)
    return 0


def add_reproduce_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "reproduce",
        help="reproduce the papers' figures and check their claims",
        description="Run the papers' experiment files (those that come with fedldp: the "
        "repository's experiments/ folder, shipped in the wheel), draw their figures and write "
        "OUT/REPORT.md with every claim: paper's value, measured value, holds/partly/fails.",
        epilog="examples:\n  fedldp reproduce --list\n"
        "  fedldp reproduce heterogeneous-e1-weighting --out results/reproduce\n"
        "  fedldp reproduce --scale paper --jobs 2",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="experiments (default: all)")
    parser.add_argument("--list", action="store_true", help="list the experiments")
    parser.add_argument(
        "--scale", choices=("quick", "paper"), default="quick", help="quick (default) or paper"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("results/reproduce"), metavar="DIR", help="output folder"
    )
    parser.add_argument("--jobs", type=int, default=1, metavar="K", help="worker processes (1)")
    parser.add_argument(
        "--cluster", metavar="ADDRESS", help="run the trials on the workers of this Dask scheduler"
    )
    parser.add_argument(
        "--experiments",
        type=Path,
        metavar="DIR",
        help="folder of experiment files (default: the shipped ones; or $FEDLDP_EXPERIMENTS)",
    )
    parser.add_argument("--progress", action="store_true", help="progress bar even without a tty")
    parser.set_defaults(handler=_reproduce)


EXPERIMENT_COMMANDS = [add_experiment_parser, add_reproduce_parser]

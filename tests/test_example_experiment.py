"""The example plugin (examples/protocol-plugin) in an experiment file (issue 25 item 5):
``examples/protocol-plugin/experiments/krr-epsilon.yaml``, run by ``fedldp experiment run`` in
the project's environment with the distribution installed (new processes: only they see what pip
installs), its claim checked by ``fedldp experiment check`` (the squared ℓ2 error against the
file's exact theory, a tolerance derived in the file) and its figure drawn by ``fedldp experiment
plot``; and the same file on a Dask LocalCluster of worker processes (``--cluster``), which load
the plugin through its entry point as the driver does, giving the local run's CSV to the last
digit."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedldp.client.experiments.results import TIMING_COLUMNS
from tests.plugins import pip_installed

pytestmark = pytest.mark.slow  # a minute or two: scheduled first in the parallel run

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "protocol-plugin"
EXPERIMENT = EXAMPLE / "experiments" / "krr-epsilon.yaml"
PROJECT = tomllib.loads((EXAMPLE / "pyproject.toml").read_text(encoding="utf-8"))["project"]
FEDLDP = str(Path(sys.executable).parent / "fedldp")
TRIALS = 5 * 40
"""The file's quick scale: 5 ε's × 40 seeds."""


def fedldp(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FEDLDP, *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=600
    )


def without_timing(path: Path) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(path.read_text())))
    keep = [i for i, name in enumerate(rows[0]) if name not in TIMING_COLUMNS]
    return [[r[i] for i in keep] for r in rows]


@pytest.fixture(scope="module")
def installed() -> Iterator[None]:
    with pip_installed(EXAMPLE, PROJECT["name"]):
        yield


@pytest.fixture(scope="module")
def local_run(installed: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The file run locally (two worker processes): its run directory."""
    out = tmp_path_factory.mktemp("krr") / "local"
    ran = fedldp("experiment", "run", EXPERIMENT, "--out", out, "--jobs", "2")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"{TRIALS} trials run, 0 already done, of {TRIALS}" in ran.stdout + ran.stderr
    return out


def test_the_experiment_file_runs_its_claim_holds_and_its_figure_is_drawn(
    local_run: Path,
) -> None:
    rows = list(csv.DictReader(io.StringIO((local_run / "trials.csv").read_text())))
    assert len(rows) == TRIALS
    assert {r["protocol"] for r in rows} == {"example-krr"}
    assert {r["failed"] for r in rows} <= {"", "0"}, "a trial failed"
    checked = fedldp("experiment", "check", local_run)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith("holds"), checked.stdout
    plotted = fedldp("experiment", "plot", local_run)
    assert plotted.returncode == 0, plotted.stdout + plotted.stderr
    figure = local_run / "plot-1.png"
    assert figure.read_bytes().startswith(b"\x89PNG")
    assert figure.stat().st_size > 20_000


def test_the_experiment_file_on_a_dask_cluster_gives_the_local_csv(
    local_run: Path, tmp_path: Path
) -> None:
    distributed = pytest.importorskip("distributed")
    # worker processes (not threads): new interpreters that find the plugin as any program does
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        out = tmp_path / "dask"
        ran = fedldp(
            "experiment", "run", EXPERIMENT, "--out", out, "--cluster", cluster.scheduler_address
        )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert without_timing(out / "trials.csv") == without_timing(local_run / "trials.csv")

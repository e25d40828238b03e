"""``--cluster``: trials on a Dask scheduler's workers give the CSV of local processes; a missing
extra or an unreachable scheduler is a clear error before any trial runs."""

from __future__ import annotations

import csv
import io
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedldp.client import cluster as cluster_module
from fedldp.client.cli.main import main
from fedldp.client.experiments.loading import load_experiment
from fedldp.client.experiments.results import TIMING_COLUMNS, read_rows
from fedldp.client.experiments.runner import run_experiment

distributed = pytest.importorskip("distributed")

# Two protocols, a grid and seeds whose rows finish in any order on two worker threads.
SWEEP = """\
name: sweep
protocols: [hetero-mean-rr, hetero-mean-laplace]
population: {users: 400, distribution: two-point, mean: 0.2}
grid:
  epsilon-mix: ["0.1:0.5,1:0.5", "0.5:0.5,2:0.5"]
seeds: 4
"""


def _without_timing(path: Path) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(path.read_text())))
    keep = [i for i, name in enumerate(rows[0]) if name not in TIMING_COLUMNS]
    return [[r[i] for i in keep] for r in rows]


@pytest.fixture
def scheduler() -> Iterator[str]:
    """A two-worker LocalCluster in this process (threads, no subprocesses): its address."""
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
    ) as local:
        yield local.scheduler_address


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_cluster_run_writes_the_csv_of_local_processes(tmp_path: Path, scheduler: str) -> None:
    (tmp_path / "e.yaml").write_text(SWEEP)
    experiment = load_experiment(tmp_path / "e.yaml")
    summary = run_experiment(experiment, tmp_path / "dask", cluster=scheduler, progress=False)
    assert (summary.total, summary.done, summary.skipped) == (16, 16, 0)
    run_experiment(experiment, tmp_path / "local", jobs=1, progress=False)
    on_cluster = _without_timing(tmp_path / "dask" / "trials.csv")
    assert on_cluster == _without_timing(tmp_path / "local" / "trials.csv")
    assert len(on_cluster) == 17
    # resumable like a local run: nothing left to send
    again = run_experiment(experiment, tmp_path / "dask", cluster=scheduler, progress=False)
    assert (again.done, again.skipped) == (0, 16)


def test_a_cluster_run_resumes_a_partial_csv(tmp_path: Path, scheduler: str) -> None:
    (tmp_path / "e.yaml").write_text(SWEEP)
    experiment = load_experiment(tmp_path / "e.yaml")
    run_experiment(experiment, tmp_path / "local", progress=False)
    kept = (tmp_path / "local" / "trials.csv").read_text().splitlines(keepends=True)[:6]
    (tmp_path / "dask").mkdir()
    (tmp_path / "dask" / "trials.csv").write_text("".join(kept))
    summary = run_experiment(experiment, tmp_path / "dask", cluster=scheduler, progress=False)
    assert (summary.skipped, summary.done) == (5, 11)
    assert [r["key"] for r in read_rows(tmp_path / "dask" / "trials.csv")] == [
        t.key for t in experiment.trials()
    ]


def test_an_unreachable_scheduler_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cluster_module, "CONNECT_TIMEOUT_S", 1.0)
    (tmp_path / "e.yaml").write_text(SWEEP)
    address = f"tcp://127.0.0.1:{_closed_port()}"
    status = main(["experiment", "run", str(tmp_path / "e.yaml"), "--out", str(tmp_path / "o")])
    assert status == 0  # the same file runs locally
    out = tmp_path / "other"
    status = main(
        ["experiment", "run", str(tmp_path / "e.yaml"), "--out", str(out), "--cluster", address]
    )
    assert status == 2
    err = capsys.readouterr().err
    assert f"cannot reach the Dask scheduler at {address}" in err
    assert read_rows(out / "trials.csv") == []


def test_jobs_and_cluster_exclude_each_other(tmp_path: Path) -> None:
    (tmp_path / "e.yaml").write_text(SWEEP)
    experiment = load_experiment(tmp_path / "e.yaml")
    with pytest.raises(ValueError, match="not both"):
        run_experiment(experiment, tmp_path / "o", jobs=2, cluster="tcp://127.0.0.1:1")


def test_without_the_extra_the_error_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in sys.modules if n == "distributed" or n.startswith("distributed.")]:
        monkeypatch.setitem(sys.modules, name, None)  # the import system refuses them
    (tmp_path / "e.yaml").write_text(SWEEP)
    experiment = load_experiment(tmp_path / "e.yaml")
    with pytest.raises(ValueError, match=r"pip install 'fedldp\[cluster\]'"):
        run_experiment(experiment, tmp_path / "o", cluster="tcp://127.0.0.1:1", progress=False)

"""Trials land in the CSV one by one; a killed run resumes; results do not depend on --jobs."""

from __future__ import annotations

import csv
import io
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fedldp.client.experiments.loading import load_experiment
from fedldp.client.experiments.results import TIMING_COLUMNS, read_rows
from fedldp.client.experiments.runner import run_experiment

TINY = """\
name: tiny
protocol: hetero-mean-rr
population: {users: 300, distribution: two-point, mean: 0.2}
grid:
  epsilon-mix: ["0.1:0.5,1:0.5", "0.2:0.7,3:0.3"]
  params.weights: [paper, uniform]
seeds: 3
"""

SLOW = """\
name: slow
protocol: user-mean
population: {users: 4000, samples: 64, distribution: two-point, mean: 0.3}
grid:
  epsilon: [0.5, 1, 2]
seeds: 20
"""


def _without_timing(path: Path) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(path.read_text())))
    keep = [i for i, name in enumerate(rows[0]) if name not in TIMING_COLUMNS]
    return [[r[i] for i in keep] for r in rows]


def test_rows_are_one_per_trial_with_the_grid_seed_and_summary(tmp_path: Path) -> None:
    (tmp_path / "e.yaml").write_text(TINY)
    experiment = load_experiment(tmp_path / "e.yaml")
    summary = run_experiment(experiment, tmp_path / "out", progress=False)
    assert (summary.total, summary.done, summary.skipped) == (12, 12, 0)
    rows = read_rows(tmp_path / "out" / "trials.csv")
    assert [r["key"] for r in rows] == [t.key for t in experiment.trials()]
    first = rows[0]
    assert first["epsilon-mix"] == "0.1:0.5,1:0.5"
    assert first["params.weights"] == "paper"
    assert first["seed"] == "0"
    assert first["error_bar.kind"] == "hoeffding"
    assert float(first["error"]) == pytest.approx(abs(float(first["estimate"]) - 0.2))
    assert float(first["runtime_s"]) > 0
    manifest = yaml.safe_load((tmp_path / "out" / "experiment.yaml").read_text())
    assert manifest["experiment"]["seeds"] == [0, 1, 2]
    assert manifest["fedldp_version"] == "0.1.0"
    again = run_experiment(experiment, tmp_path / "out", progress=False)
    assert (again.done, again.skipped) == (0, 12)


def test_an_audit_trial_is_a_row_of_the_audit(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "name: audit\nkind: audit\nprotocol: baseline-clipped-laplace\n"
        "params: {draws: 20000, epsilon: 1}\ngrid:\n  params.noise: [1, 0.5]\nseeds: 1\n"
    )
    experiment = load_experiment(tmp_path / "a.yaml")
    run_experiment(experiment, tmp_path / "out", progress=False)
    honest, control = read_rows(tmp_path / "out" / "trials.csv")
    assert (honest["params.noise"], honest["failed"], honest["tight"]) == ("1", "0", "1")
    assert float(honest["lower_ratio"]) == pytest.approx(float(honest["lower"]))
    # a Laplace mechanism: lower <= ε <= upper (joint confidence 0.999); half the noise: caught
    assert float(honest["lower"]) <= 1.0 <= float(honest["upper"])
    assert float(control["lower_ratio"]) > 1.0
    assert float(honest["draws"]) == 20000


def test_an_audit_of_repeated_collections_records_t_and_the_exact_loss(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "name: audit\nkind: audit\n"
        "protocols: [memo-1bitmean-memoized, memo-1bitmean-change-memoized]\n"
        "params: {draws: 20000, epsilon: 1}\ngrid:\n  params.collections: [1, 4]\nseeds: 1\n"
    )
    run_experiment(load_experiment(tmp_path / "a.yaml"), tmp_path / "out", progress=False)
    rows = {
        (r["protocol"], r["collections"]): r for r in read_rows(tmp_path / "out" / "trials.csv")
    }
    # memoized, one value: the same bit T times, ε whatever T (exact); the change: infinite
    for t in ("1", "4"):
        memo = rows[("memo-1bitmean-memoized", t)]
        assert float(memo["exact"]) == pytest.approx(1.0)
        assert float(memo["lower"]) <= 1.0 <= float(memo["upper"])  # joint confidence 0.999
    assert float(rows[("memo-1bitmean-change-memoized", "1")]["exact"]) == pytest.approx(1.0)
    changed = rows[("memo-1bitmean-change-memoized", "4")]
    assert changed["exact"] == ""  # infinite: the change shows with certainty
    assert float(changed["lower"]) > 3.0  # ln(0.6·20000/≈13): the change is caught


def test_a_directory_of_another_experiment_is_refused(tmp_path: Path) -> None:
    (tmp_path / "e.yaml").write_text(TINY)
    run_experiment(load_experiment(tmp_path / "e.yaml"), tmp_path / "out", progress=False)
    (tmp_path / "e.yaml").write_text(TINY.replace("uniform]", "inverse_variance]"))
    with pytest.raises(ValueError, match="another experiment"):
        run_experiment(load_experiment(tmp_path / "e.yaml"), tmp_path / "out", progress=False)


@pytest.mark.slow
def test_the_csv_does_not_depend_on_jobs(tmp_path: Path) -> None:
    (tmp_path / "e.yaml").write_text(TINY)
    experiment = load_experiment(tmp_path / "e.yaml")
    run_experiment(experiment, tmp_path / "one", jobs=1, progress=False)
    run_experiment(experiment, tmp_path / "two", jobs=2, progress=False)
    one = _without_timing(tmp_path / "one" / "trials.csv")
    assert one == _without_timing(tmp_path / "two" / "trials.csv")
    assert len(one) == 13


@pytest.mark.slow
def test_a_killed_run_resumes_losing_only_the_trials_in_flight(tmp_path: Path) -> None:
    (tmp_path / "e.yaml").write_text(SLOW)
    out = tmp_path / "out"
    fedldp = Path(sys.executable).parent / "fedldp"
    command = [str(fedldp), "experiment", "run", str(tmp_path / "e.yaml"), "--out", str(out)]
    proc = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    csv_path = out / "trials.csv"
    deadline = time.monotonic() + 60
    while len(read_rows(csv_path)) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {r["key"]: r for r in read_rows(csv_path)}
    assert 3 <= len(before) < 60, "the run must be killed mid-way"
    experiment = load_experiment(tmp_path / "e.yaml")
    resumed = run_experiment(experiment, out, progress=False)
    assert resumed.skipped == len(before)
    assert resumed.done == 60 - len(before)
    after = read_rows(csv_path)
    assert [r["key"] for r in after] == [t.key for t in experiment.trials()]
    assert all(before[r["key"]] == r for r in after if r["key"] in before)
    fresh = tmp_path / "fresh"
    run_experiment(experiment, fresh, progress=False)
    assert _without_timing(csv_path) == _without_timing(fresh / "trials.csv")


def test_a_refused_trial_is_a_row_with_its_reason(tmp_path: Path) -> None:
    # stage one of user-mean needs Σ min(ε², 1) >= 300 over its half of the users once the data
    # needs more than two bins (m > 16): 400 users at ε = 0.5 score 50, so m = 256 is refused
    text = SLOW.replace("users: 4000", "users: 400").replace("[0.5, 1, 2]", "[0.5]")
    (tmp_path / "e.yaml").write_text(text.replace("samples: 64", "samples: 256"))
    experiment = load_experiment(tmp_path / "e.yaml")
    run_experiment(experiment, tmp_path / "out", progress=False)
    rows = read_rows(tmp_path / "out" / "trials.csv")
    assert len(rows) == 20
    assert {r["failed"] for r in rows} == {"1"}
    assert all("infeasible plan" in r["failure"] for r in rows)
    assert all("error" not in r for r in rows)  # no result columns for a refusal

"""fedldp reproduce: the repository's experiment files, one run end to end at a tiny scale."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fedldp.client.cli.main import main
from fedldp.client.experiments.loading import load_experiment
from fedldp.client.experiments.reproduce import experiments_dir, find_experiments, reproduce

PREFIXES = (
    "user-level-",
    "heterogeneous-",
    "huber-",
    "semi-feature-",
    "robustness-",
    "classic-",
)


@pytest.mark.parametrize("scale", ["quick", "paper"])
def test_every_shipped_experiment_file_is_valid(scale: str) -> None:
    found = find_experiments(experiments_dir())
    assert {p for p in PREFIXES if any(n.startswith(p) for n in found)} == set(PREFIXES)
    for name, path in found.items():
        experiment = load_experiment(path, scale)
        assert experiment.spec.name == name
        assert experiment.spec.plots
        assert experiment.spec.checks


def test_reproduce_one_experiment_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = experiments_dir() / "heterogeneous-e3-frequency.yaml"
    text = (
        source.read_text().replace("users: 20000", "users: 2000").replace("seeds: 10", "seeds: 2")
    )
    folder = tmp_path / "experiments"
    folder.mkdir()
    (folder / source.name).write_text(text)
    out = tmp_path / "out"
    assert main(["reproduce", "--list", "--experiments", str(folder)]) == 0
    assert "heterogeneous-e3-frequency" in capsys.readouterr().out
    code = main(
        ["reproduce", "heterogeneous-e3-frequency", "--experiments", str(folder), "--out", str(out)]
    )
    assert code == 0
    report = (out / "REPORT.md").read_text()
    assert "![heterogeneous-e3-frequency](heterogeneous-e3-frequency/plot-1.png)" in report
    assert (out / "heterogeneous-e3-frequency" / "plot-1.png").exists()
    assert "| claim | paper's value | pass if | measured | verdict |" in report
    assert report.count("| **") == 3  # one verdict per declared claim
    assert main(["reproduce", "no-such", "--experiments", str(folder), "--out", str(out)]) == 2


def test_the_report_times_each_experiment_and_estimates_the_paper_scale(tmp_path: Path) -> None:
    """Quick and paper scales of this file differ in seeds only, so the paper estimate is the
    quick trial time scaled by the ratio of trial counts, and the time is the CSV's sum."""
    source = experiments_dir() / "heterogeneous-e3-frequency.yaml"
    text = (
        source.read_text().replace("users: 20000", "users: 2000").replace("seeds: 10", "seeds: 2")
    )
    folder = tmp_path / "experiments"
    folder.mkdir()
    path = folder / source.name
    path.write_text(text)
    (done,) = reproduce([], folder=folder, out=tmp_path / "out", progress=False)
    quick, paper = load_experiment(path, "quick"), load_experiment(path, "paper")
    assert paper.population == quick.population
    assert len(paper.seeds) > len(quick.seeds)
    assert done.paper_trials == len(paper.trials()) == 200 * len(quick.trials()) // 2
    with (tmp_path / "out" / "heterogeneous-e3-frequency" / "trials.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert done.trial_seconds == pytest.approx(sum(float(r["runtime_s"]) for r in rows))
    assert done.paper_seconds == pytest.approx(
        done.trial_seconds * done.paper_trials / len(quick.trials())
    )

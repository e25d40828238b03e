"""A figure is a pure function of the CSV rows: its plotted data equals the CSV's aggregates."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest

from fedldp.client.experiments.loading import load_experiment
from fedldp.client.experiments.plot import draw, plot_directory, read_manifest
from fedldp.client.experiments.results import read_rows
from fedldp.client.experiments.runner import run_experiment
from fedldp.client.experiments.spec import PlotSpec

EXPERIMENT = """\
name: plotted
protocol: hetero-mean-rr
population: {users: 400, distribution: two-point, mean: 0.2}
grid:
  users: [200, 400, 800]
  params.weights: [paper, uniform]
seeds: 4
plots:
  - {x: users, y: error, stat: rmse, hue: params.weights, logx: true, logy: true, slope: true,
     theory: diagnostics.variance_bound, theory_sqrt: true}
  - {x: params.weights, y: error, stat: mean, where: {users: 400}}
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plot")
    (root / "e.yaml").write_text(EXPERIMENT)
    run_experiment(load_experiment(root / "e.yaml"), root / "out", progress=False)
    return root / "out"


def test_each_line_is_the_csv_aggregate_over_seeds(run_dir: Path) -> None:
    manifest = read_manifest(run_dir)
    rows = read_rows(run_dir / "trials.csv")
    frame = pd.read_csv(run_dir / "trials.csv")
    plot = PlotSpec.model_validate(manifest["experiment"]["plots"][0])
    fig, series = draw(rows, plot, manifest)
    (ax,) = fig.axes
    lines = {str(line.get_label()): line for line in ax.get_lines()}
    for weights, group in frame.groupby("params.weights"):
        agg = group.groupby("users").agg(
            rmse=("error", lambda e: math.sqrt(float(np.mean(np.square(e))))),
            theory=("diagnostics.variance_bound", "mean"),
            seeds=("seed", "count"),
        )
        label = next(k for k in lines if k.startswith(f"weights = {weights} (slope"))
        line = lines[label]
        np.testing.assert_allclose(
            np.asarray(line.get_xdata(), dtype=float), agg.index.to_numpy(dtype=float)
        )
        np.testing.assert_allclose(
            np.asarray(line.get_ydata(), dtype=float), agg["rmse"].to_numpy(), rtol=1e-12
        )
        slope = np.polyfit(np.log(agg.index.to_numpy(float)), np.log(agg["rmse"]), 1)[0]
        assert label == f"weights = {weights} (slope {slope:+.2f})"
        theory = lines[f"weights = {weights}: theory (√variance_bound)"]
        np.testing.assert_allclose(
            np.asarray(theory.get_ydata(), dtype=float), np.sqrt(agg["theory"]), rtol=1e-12
        )
        assert set(agg["seeds"]) == {4}
    assert ax.get_xscale() == "log"
    assert ax.get_yscale() == "log"
    assert "hetero-mean-rr" in ax.get_title()
    assert "users=" not in ax.get_title()  # swept, so not a fact of the population
    assert "mean=0.2" in ax.get_title()
    assert "ε" not in ax.get_xlabel()
    assert ax.get_xlabel() == "number of users n"
    assert ax.get_ylabel() == "root mean squared error over seeds, |θ̂ − θ|"
    assert len(series) == 2


def test_a_categorical_axis_and_a_filter(run_dir: Path) -> None:
    manifest = read_manifest(run_dir)
    rows = read_rows(run_dir / "trials.csv")
    frame = pd.read_csv(run_dir / "trials.csv")
    plot = PlotSpec.model_validate(manifest["experiment"]["plots"][1])
    fig, _ = draw(rows, plot, manifest)
    (ax,) = fig.axes
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "measured mean"]
    expected = frame[frame["users"] == 400].groupby("params.weights", sort=False)["error"].mean()
    np.testing.assert_allclose(
        np.asarray(line.get_ydata(), dtype=float), expected.to_numpy(), rtol=1e-12
    )
    assert [t.get_text() for t in ax.get_xticklabels()] == list(expected.index)


def test_plot_directory_writes_one_png_per_plot(run_dir: Path) -> None:
    paths = plot_directory(run_dir)
    assert [p.name for p in paths] == ["plot-1.png", "plot-2.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)


def test_hue_in_draws_only_the_listed_lines(run_dir: Path) -> None:
    manifest = read_manifest(run_dir)
    rows = read_rows(run_dir / "trials.csv")
    frame = pd.read_csv(run_dir / "trials.csv")
    raw = dict(manifest["experiment"]["plots"][0]) | {"hue_in": ["uniform"]}
    _, series = draw(rows, PlotSpec.model_validate(raw), manifest)
    (line,) = series
    assert line.label == "weights = uniform"
    mine = frame[frame["params.weights"] == "uniform"]
    rmse = mine.groupby("users")["error"].apply(lambda e: math.sqrt(float(np.mean(e**2))))
    np.testing.assert_allclose(line.y, rmse.to_numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="hue_in"):
        PlotSpec.model_validate({"x": "users", "hue_in": ["uniform"]})


def test_hue_in_names_values_of_the_hue_column(tmp_path: Path) -> None:
    bad = EXPERIMENT.replace("slope: true,", "slope: true, hue_in: [paper, median],")
    (tmp_path / "e.yaml").write_text(bad)
    with pytest.raises(ValueError, match=r"e\.yaml:9: plot 1: hue_in \['median'\]"):
        load_experiment(tmp_path / "e.yaml")


def test_a_theory_every_line_shares_is_drawn_once(run_dir: Path) -> None:
    manifest = read_manifest(run_dir)
    rows = read_rows(run_dir / "trials.csv")
    raw = dict(manifest["experiment"]["plots"][0]) | {"theory": "population.n"}
    raw.pop("theory_sqrt")
    fig, series = draw(rows, PlotSpec.model_validate(raw), manifest)
    labels = [str(line.get_label()) for line in fig.axes[0].get_lines()]
    assert len(series) == 2
    assert [label for label in labels if "theory" in label] == ["theory (population.n)"]


def test_the_legend_names_the_seeds_behind_the_bands_and_only_when_there_are_bands(
    run_dir: Path,
) -> None:
    manifest = read_manifest(run_dir)
    rows = read_rows(run_dir / "trials.csv")
    plot = PlotSpec.model_validate(manifest["experiment"]["plots"][0])
    one_seed = [r for r in rows if r["seed"] == rows[0]["seed"]]
    for trials, bands in ((rows, ["bands: 95% CI over 4 seeds"]), (one_seed, [])):
        fig, _ = draw(trials, plot, manifest)
        legend = fig.axes[0].get_legend()
        assert legend is not None
        labels = [str(t.get_text()) for t in legend.get_texts()]
        assert [label for label in labels if label.startswith("bands")] == bands

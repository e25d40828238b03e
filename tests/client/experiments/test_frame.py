"""Trials as a DataFrame (client/experiments/frame.py, ``fedldp.experiments``): ``run`` gives what
``load`` reads back, every column typed from its cells, the rows those of the CSV."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import fedldp
import fedldp.experiments
from fedldp.client.experiments.frame import column_type
from fedldp.client.experiments.results import read_rows

TINY = """\
name: tiny
protocols: [hetero-mean-rr, user-mean]
population: {users: 400, samples: 8, distribution: two-point, mean: 0.2}
grid:
  epsilon: [0.5, 2]
seeds: 2
"""


@pytest.mark.parametrize(
    ("cells", "kind"),
    [
        (["1", "-2", ""], "int"),
        (["1", "2.5", "1e-3", "nan"], "float"),
        (["", ""], "float"),
        (["true", "False", ""], "bool"),
        (["[1, 2]", "[]", ""], "list"),
        (["user-mean", "1"], "string"),
        (["[1", "2]"], "string"),
    ],
)
def test_column_types_come_from_every_cell(cells: list[str], kind: str) -> None:
    assert column_type(cells) == kind


def test_run_and_load_give_the_csv_with_typed_columns(tmp_path: Path) -> None:
    (tmp_path / "e.yaml").write_text(TINY)
    trials = fedldp.experiments.run(tmp_path / "e.yaml", tmp_path / "out")
    rows = read_rows(tmp_path / "out" / "trials.csv")
    assert len(trials) == len(rows) == 2 * 2 * 2
    assert trials["key"].tolist() == [r["key"] for r in rows]  # the CSV's order
    assert trials["epsilon"].dtype == "float64"
    assert trials["seed"].dtype == "int64"
    assert trials["point"].dtype == "int64"
    assert trials["failed"].dtype == "boolean"
    assert not trials["failed"].any()
    assert trials["protocol"].dtype == "string"
    assert trials["error"].tolist() == [float(r["error"]) for r in rows]
    # a column the other protocol lacks: missing cells, still numbers
    only_user_mean = trials["diagnostics.predicted_mse"]
    assert only_user_mean.dtype == "float64"
    assert only_user_mean.isna().tolist() == [r["protocol"] != "user-mean" for r in rows]
    assert fedldp.experiments.load(tmp_path / "out").equals(trials)
    assert fedldp.experiments.load(tmp_path / "out" / "trials.csv").equals(trials)
    assert fedldp.experiments is fedldp.__getattr__("experiments")


def test_load_keeps_lists_and_drops_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "trials.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["point", "key", "seed", "estimate", "failed"])
        writer.writerow(["0", "a", "1", "[0.5, 0.25]", "0"])
        writer.writerow(["1", "b", "1", "[1.0, 2.0]", ""])
    path.write_text(path.read_text() + "2,c,1,[0.")  # a row cut short by a killed process
    trials = fedldp.experiments.load(path)
    assert trials["estimate"].tolist() == [[0.5, 0.25], [1.0, 2.0]]
    assert trials["failed"].tolist()[0] is False
    assert trials["failed"].isna().tolist() == [False, True]


def test_load_without_trials_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no trials CSV at"):
        fedldp.experiments.load(tmp_path)

"""Run summaries as DataFrames (client/frames.py): a scalar run is one row, a vector run one row
per coordinate, the nested sections flattened, and frames of runs stack."""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]

from fedldp.client.frames import run_frame

SCALAR = {
    "protocol": "user-mean",
    "params": {"samples_per_user": 16, "grid": [1, 2]},
    "n": 100,
    "seed": 3,
    "estimate": 0.25,
    "truth": 0.3,
    "error": 0.05,
    "error_bar": {"half_width": 0.2, "level": 0.95},
    "epsilon_spent": {"max": 1.0},
    "diagnostics": {"participation": {"rounds": []}},
    "population": {"n": 100},
    "warnings": ["w"],
    "elapsed_s": 0.5,
}


def test_a_scalar_run_is_one_row_without_the_nested_objects() -> None:
    frame = run_frame(SCALAR)
    assert list(frame.columns) == [
        "estimate",
        "truth",
        "protocol",
        "params.samples_per_user",
        "params.grid",
        "n",
        "seed",
        "error",
        "error_bar.half_width",
        "error_bar.level",
        "epsilon_spent.max",
        "elapsed_s",
    ]
    assert frame.iloc[0]["params.grid"] == [1, 2]
    assert frame["n"].dtype == "int64"
    assert frame["estimate"].dtype == "float64"


def test_a_vector_run_is_one_row_per_coordinate_and_runs_stack() -> None:
    vector = {**SCALAR, "estimate": [0.1, 0.2, 0.3], "truth": None}
    frame = run_frame(vector)
    assert frame["coordinate"].tolist() == [0, 1, 2]
    assert frame["estimate"].tolist() == [0.1, 0.2, 0.3]
    assert frame["truth"].isna().all()  # the truth is unknown, and says so
    assert frame["seed"].tolist() == [3, 3, 3]
    both = pd.concat([run_frame(SCALAR), frame], ignore_index=True)
    assert len(both) == 4
    assert both["coordinate"].isna().sum() == 1


def test_a_failed_result_without_an_estimate_is_one_row() -> None:
    frame = run_frame({"study_id": "s", "phase": "failed", "estimate": None, "error_bar": None})
    assert frame.to_dict("records") == [{"estimate": None, "study_id": "s", "phase": "failed"}]

"""Result summaries and their table (client/cli/output.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fedldp.client.cli.output import jsonable, render_table
from fedldp.client.results import estimation_error, result_summary
from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.diagnostics import DIAGNOSTICS


def summary(**overrides: object) -> dict[str, object]:
    args: dict[str, object] = {
        "protocol": "p",
        "params": {"m": 4},
        "n": 4,
        "seed": 1,
        "estimate": 0.5,
        "truth": 0.25,
        "error_bar": None,
        "charges": np.array([1.0, 1.0, 0.5, 0.0]),
        "diagnostics": {"weights": np.array([0.5, 0.5]), "nan": math.nan},
        "warnings": ("careful",),
        "elapsed_s": 0.1,
    }
    args.update(overrides)
    return result_summary(**args)  # type: ignore[arg-type]


def test_summary_keys_and_epsilon_spent() -> None:
    s = summary()
    assert s["error"] == 0.25
    assert s["error_norm"] == "abs"
    assert s["error_bar"] is None
    assert s["epsilon_spent"] == {
        "participants": 4,
        "charged": 3,
        "max": 1.0,
        "median": 0.75,
        "mean": 0.625,
    }
    assert s["diagnostics"] == {"weights": [0.5, 0.5], "nan": None}
    json.dumps(s, allow_nan=False)  # strictly valid JSON


@pytest.mark.parametrize(
    ("estimate", "truth", "bar", "kind", "norm", "error"),
    [
        ([0.0, 3.0], [4.0, 0.0], None, "vector", "l2", 5.0),
        ([0.1, 0.5, 0.4], [0.2, 0.2, 0.6], None, "categorical", "linf", 0.3),
        ([0.0, 3.0], [4.0, 0.0], {"norm": "linf", "half_width": 1.0}, "vector", "linf", 4.0),
    ],
)
def test_error_norms(
    estimate: list[float],
    truth: list[float],
    bar: dict[str, object] | None,
    kind: str,
    norm: str,
    error: float,
) -> None:
    s = summary(estimate=estimate, truth=truth, error_bar=bar, data_kind=kind)
    assert s["error_norm"] == norm
    assert s["error"] == pytest.approx(error, rel=1e-12)


def test_errors_and_jsonable_edge_cases() -> None:
    assert estimation_error(None, 1.0, "abs") is None
    with pytest.raises(ValueError, match="norm"):
        estimation_error(1.0, 1.0, "l7")
    assert jsonable({"a": (np.int64(2), np.float32(math.inf), np.bool_(True))}) == {
        "a": [2, None, True]
    }


def test_table_shows_every_part() -> None:
    bar = {"half_width": 0.1, "level": 0.95, "kind": "clt", "approximate": True, "norm": "abs"}
    s = summary(error_bar=bar, estimate=list(range(10)), truth=list(range(10)))
    s["study_id"] = "abc123"
    text = render_table(s)
    for part in (
        "abc123",
        "± 0.1 at level 0.95",
        "clt, approximate",
        "(10 entries)",
        "careful",
        "weights",
        "max 1, median 0.75",
    ):
        assert part in text


def test_table_shows_counts_and_seeds_exactly() -> None:
    """Integers are counts or seeds: a million users is 1000000, not the 6-digit 1e+06."""
    s = summary(n=1_000_000, seed=1_693_125_408_465_869_867)
    s["users_served"] = 250_000
    text = render_table(s, width=200)
    for part in ("1000000", "1693125408465869867", "250000"):
        assert part in text
    assert "e+" not in text


def test_table_explains_diagnostics_evaluation_and_unequal_epsilons() -> None:
    s = summary(protocol="hetero-mean-rr", diagnostics={"S_RR": 12.5, "sum_w2": 0.01, "odd": 1})
    s["evaluation"] = {"excess_risk": 0.0125}
    s["users_served"] = 0
    text = " ".join(render_table(s, width=400).split())
    assert f"S_RR │ 12.5 │ {DIAGNOSTICS['S_RR']}" in text
    assert f"sum_w2 │ 0.01 │ {DIAGNOSTICS['sum_w2']}" in text
    assert "odd │ 1 │ │" in text  # an undescribed diagnostic still shows, with no line
    assert "evaluation: excess_risk │ 0.0125" in text
    assert "users served │ 0 │" in text
    rule = CATALOGUE["hetero-mean-rr"].heterogeneity.split()
    assert f"unequal ε │ {' '.join(rule[:8])}" in text  # its start: the rule folds over lines


def test_table_shows_what_the_swarm_users_did() -> None:
    """A swarm's summary carries its users' counts (``SwarmResult.to_dict()["stats"]``)."""
    s = summary()
    s["stats"] = {"reports": 1180, "late": 3, "dropped": 17, "refused": 40, "joined_late": 2}
    text = " ".join(render_table(s, width=400).split())
    assert "reports sent │ 1180 │ late 3, dropped 17, refused 40, joined late 2" in text
    assert "reports sent" not in " ".join(render_table(summary(), width=400).split())

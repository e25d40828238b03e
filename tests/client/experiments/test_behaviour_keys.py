"""Experiment files with behaviour keys (dropout, attackers, …) and derived columns: validated
with the file's line, run as ``fedldp simulate`` with the same options runs, and derived
columns computed from each row."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fedldp.client.behaviour import Behaviour
from fedldp.client.experiments.conduct import conduct_of
from fedldp.client.experiments.derived import check_expression, evaluate, with_derived
from fedldp.client.experiments.loading import parse_experiment
from fedldp.client.experiments.results import read_rows
from fedldp.client.experiments.runner import run_experiment, run_trial
from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.protocol.catalogue import get_protocol

ATTACKED = """\
name: attacked
protocol: hetero-mean-rr
population: {users: 2000, distribution: two-point, mean: 0.2}
behaviour: {attack: output, round-deadline: 30}
grid:
  behaviour.attackers: [0, 0.1]
seeds: 2
derived:
  shift: "[estimate] - [truth]"
  bound: "[behaviour.attackers] * (1 / tanh([epsilon_spent.max] / 2) - [truth])"
"""


def _error(text: str) -> str:
    with pytest.raises(ValueError, match=r"^exp\.yaml:\d+: ") as info:
        parse_experiment(text, "exp.yaml")
    return str(info.value)


def test_behaviour_keys_reach_the_trials_and_zero_attackers_is_honest() -> None:
    trials = parse_experiment(ATTACKED, "exp.yaml").trials()
    assert [t.behaviour for t in trials[:1]] == [
        {"attack": "output", "round_deadline": 30, "attackers": 0}
    ]
    assert conduct_of(trials[0].behaviour).behaviour is None
    attacked = conduct_of(trials[-1].behaviour)
    assert attacked.behaviour == Behaviour(attack="output", attackers=0.1)
    assert attacked.round_deadline_s == 30.0


def test_a_trial_row_equals_simulate_with_the_same_behaviour(tmp_path: Path) -> None:
    trial = parse_experiment(ATTACKED, "exp.yaml").trials()[-1]
    row = run_trial(trial)
    protocol = get_protocol("hetero-mean-rr")
    population = build_population(PopulationSpec.model_validate(trial.population), trial.seed)
    params = protocol.parse_params(fill_from_population(protocol, {}, population))
    direct = simulate(
        protocol,
        params,
        population,
        trial.seed,
        behaviour=Behaviour(attack="output", attackers=0.1),
        round_deadline_s=30,
    )
    assert float(row["estimate"]) == direct.result.estimate
    honest = run_trial(parse_experiment(ATTACKED, "exp.yaml").trials()[1])
    assert float(row["estimate"]) > float(honest["estimate"])


def test_a_study_that_misses_its_quorum_is_a_failed_row(tmp_path: Path) -> None:
    text = ATTACKED.replace("{attack: output, round-deadline: 30}", "{quorum: 0.9}").replace(
        "behaviour.attackers: [0, 0.1]", "behaviour.dropout: [0.5]"
    )
    (tmp_path / "e.yaml").write_text(text)
    experiment = parse_experiment(text, str(tmp_path / "e.yaml"))
    run_experiment(experiment, tmp_path / "out", progress=False)
    rows = read_rows(tmp_path / "out" / "trials.csv")
    assert {r["failed"] for r in rows} == {"1"}
    assert all("the quorum 0.9 needs 1800" in r["failure"] for r in rows)


def test_invalid_behaviour_names_its_line() -> None:
    assert _error(ATTACKED.replace("attack: output", "attack: nonsense")).startswith("exp.yaml:4: ")
    grid = ATTACKED.replace("[0, 0.1]", "[0, 1.5]")
    message = _error(grid)
    assert message.startswith("exp.yaml:6: ")
    assert "attackers must lie in [0, 1]" in message
    assert "unknown behaviour key 'colour'" in _error(
        ATTACKED.replace("round-deadline: 30", "colour: 1")
    )
    assert _error(ATTACKED.replace("{attack: output,", "{quorum: 0,")).startswith("exp.yaml:4: ")


def test_a_bad_derived_expression_names_its_line() -> None:
    message = _error(ATTACKED.replace("[estimate] - [truth]", "__import__('os')"))
    assert message.startswith("exp.yaml:9: ")
    assert "derived column 'shift': functions: sqrt" in message
    assert "write columns as [column]" in _error(ATTACKED.replace("[estimate]", "estimate"))
    assert "cannot parse" in _error(ATTACKED.replace("[estimate] - [truth]", "[estimate] -"))


def test_derived_columns_are_arithmetic_on_the_row() -> None:
    row = {
        "estimate": "[0.25, 0.5]",
        "truth": "[0.2, 0.4]",
        "protocol": "hetero-frequency",
        "x": "4",
        "rounds": '[{"received": 7}, {"received": 3}]',
    }
    assert evaluate("[estimate][1] - [truth][1]", row) == pytest.approx(0.1)
    assert evaluate("sqrt([x]) if [protocol] == 'hetero-frequency' else [missing]", row) == 2.0
    assert evaluate("[rounds][-1]['received'] / [x]", row) == 0.75
    assert evaluate("[missing] + 1", row) is None
    assert evaluate("1 / ([x] - 4)", row) is None
    assert math.isnan(evaluate("nan", row) or math.nan)
    derived = with_derived([row, {"x": ""}], {"half": "[x] / 2", "quarter": "[half] / 2"})
    assert [(r["half"], r["quarter"]) for r in derived] == [("2.0", "1.0"), ("", "")]
    # the vector distances of a frequency estimate: squared ℓ2 and ℓ∞, whatever the bar's norm
    assert evaluate("sqdist([estimate], [truth])", row) == pytest.approx(0.05**2 + 0.1**2)
    assert evaluate("maxdist([estimate], [truth])", row) == pytest.approx(0.1)
    assert evaluate("len([estimate])", row) == 2
    assert evaluate("sqdist([estimate], [rounds])", row) is None  # not numbers: no value
    assert evaluate("maxdist([estimate], [three])", {**row, "three": "[1, 2, 3]"}) is None
    for bad in ("[x].real", "open('f')", "lambda: 1", "[x] // 2", "[x] if [x] in [x] else 1"):
        with pytest.raises(ValueError, match=r"allowed|unknown name|cannot parse|functions"):
            check_expression(bad)

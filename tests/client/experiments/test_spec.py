"""Experiment files are validated before anything runs; every error names the file's line."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedldp.client.experiments.loading import load_experiment, parse_experiment

GOOD = """\
name: tiny
protocol: hetero-mean-rr
population: {users: 50, distribution: two-point, mean: 0.2}
grid:
  epsilon-mix: ["0.1:0.5,1:0.5", "1:2"]
  params.weights: [paper, uniform]
seeds: 2
"""


def _error(text: str) -> str:
    with pytest.raises(ValueError, match=r"^exp\.yaml:\d+: ") as info:
        parse_experiment(text, "exp.yaml")
    return str(info.value)


def test_a_good_file_expands_to_the_cartesian_product_times_seeds() -> None:
    text = GOOD.replace('"1:2"', '"0.2:0.7,3:0.3"')
    experiment = parse_experiment(text, "exp.yaml")
    trials = experiment.trials()
    assert len(trials) == 2 * 2 * 2
    assert experiment.columns == ["protocol", "epsilon-mix", "params.weights"]
    assert trials[0].population["epsilon_mix"] == "0.1:0.5,1:0.5"
    assert {t.params["weights"] for t in trials} == {"paper", "uniform"}
    assert len({t.key for t in trials}) == len(trials)


def test_an_unknown_top_level_key_names_its_line() -> None:
    assert _error(GOOD + "colour: blue\n").startswith("exp.yaml:8: ")
    assert "unknown key 'colour'" in _error(GOOD + "colour: blue\n")


def test_an_unknown_plot_key_names_its_line() -> None:
    text = GOOD + "plots:\n  - {x: epsilon-mix, y: error}\n  - {x: users, colour: red}\n"
    assert _error(text).startswith("exp.yaml:10: ")


def test_an_invalid_grid_value_names_the_line_of_that_value() -> None:
    # "1:2" is a pair, not an ε mix whose fractions sum to one (and never base-60 1*60+2)
    message = _error(GOOD)
    assert message.startswith("exp.yaml:5: ")
    assert "sum to 1" in message


def test_an_unknown_population_option_names_its_line() -> None:
    text = GOOD.replace("mean: 0.2}", "mean: 0.2, colour: 3}")
    assert _error(text).startswith("exp.yaml:3: ")


def test_an_invalid_protocol_parameter_names_the_grid_line() -> None:
    text = GOOD.replace('"1:2"', '"0.2:0.7,3:0.3"').replace("uniform]", "fancy]")
    message = _error(text)
    assert message.startswith("exp.yaml:6: ")
    assert "weights" in message


def test_an_unknown_protocol_and_a_wrong_data_kind_are_refused() -> None:
    ok = GOOD.replace('"1:2"', '"0.2:0.7,3:0.3"')
    assert _error(ok.replace("hetero-mean-rr", "no-such")).startswith("exp.yaml:2: ")
    categorical = ok.replace("hetero-mean-rr", "hetero-frequency")
    assert "categorical data" in _error(categorical)


def test_duplicate_keys_and_bad_yaml_name_their_lines() -> None:
    assert _error(GOOD + "seeds: 3\n").startswith("exp.yaml:8: ")
    assert _error(GOOD + "grid: [\n").startswith("exp.yaml:")


def test_a_scale_overrides_and_its_errors_point_into_it(tmp_path: Path) -> None:
    ok = GOOD.replace('"1:2"', '"0.2:0.7,3:0.3"')
    path = tmp_path / "e.yaml"
    path.write_text(ok + "scales:\n  paper: {seeds: 5, population: {users: 80}}\n")
    paper = load_experiment(path, "paper")
    assert paper.seeds == [0, 1, 2, 3, 4]
    assert paper.population["users"] == 80
    assert load_experiment(path, "quick").seeds == [0, 1]
    path.write_text(ok + "scales:\n  paper:\n    population: {users: -1}\n")
    with pytest.raises(ValueError, match=r"e\.yaml:10: population: "):
        load_experiment(path, "paper")


def test_plot_and_check_keys_must_be_grid_columns() -> None:
    ok = GOOD.replace('"1:2"', '"0.2:0.7,3:0.3"')
    assert _error(ok + "plots:\n  - {x: epsilon-mix, hue: users}\n").startswith("exp.yaml:9: ")
    check = "checks:\n  - {claim: c, kind: bound, per: [nope], max: 1}\n"
    assert "'nope' is not a grid key" in _error(ok + check)


ZIPPED = """\
name: shapes
population: {distribution: two-point, mean: 0.3, epsilon: 1}
zip:
  - protocol: [user-mean, baseline-clipped-laplace]
    users: [1000, 64000]
    samples: [64, 1]
grid:
  params.level: [0.9, 0.95]
seeds: 2
derived:
  total: "[users] * [samples]"
checks:
  - {claim: c, kind: ratio, per: [total], numerator: {where: {protocol: user-mean}},
     denominator: {where: {protocol: baseline-clipped-laplace}}, max: 1}
"""


def test_a_zip_group_varies_its_axes_together_crossed_with_the_grid() -> None:
    experiment = parse_experiment(ZIPPED, "exp.yaml")
    trials = experiment.trials()
    assert len(trials) == 2 * 2 * 2  # 2 zipped points × 2 levels × 2 seeds
    assert experiment.columns == ["protocol", "params.level", "users", "samples"]
    assert experiment.protocols == ["user-mean", "baseline-clipped-laplace"]
    shapes = {(t.protocol, t.population["users"], t.population["samples"]) for t in trials}
    assert shapes == {("user-mean", 1000, 64), ("baseline-clipped-laplace", 64000, 1)}
    assert experiment.resolved()["zip"] == [
        {
            "protocol": ["user-mean", "baseline-clipped-laplace"],
            "users": [1000, 64000],
            "samples": [64, 1],
        }
    ]


def test_zip_groups_are_refused_when_ragged_repeated_or_overlapping() -> None:
    ragged = ZIPPED.replace("samples: [64, 1]", "samples: [64]")
    assert "one length" in _error(ragged)
    repeated = (
        ZIPPED.replace("users: [1000, 64000]", "users: [1000, 1000]")
        .replace(
            "protocol: [user-mean, baseline-clipped-laplace]", "protocol: [user-mean, user-mean]"
        )
        .replace("samples: [64, 1]", "samples: [64, 64]")
    )
    assert "repeats a point" in _error(repeated)
    overlapping = ZIPPED.replace("params.level: [0.9, 0.95]", "users: [5, 6]")
    assert "zip group and the grid" in _error(overlapping)


AUDIT = """\
name: audit
kind: audit
protocols: [alg1-stage-two, baseline-one-sample]
params: {draws: 2000}
grid:
  params.epsilon: [0.5, 1]
seeds: 1
"""


def test_an_audit_file_takes_audit_cases_and_audit_params() -> None:
    experiment = parse_experiment(AUDIT, "exp.yaml")
    trials = experiment.trials()
    assert [t.kind for t in trials] == ["audit"] * 4
    assert trials[0].params == {"draws": 2000, "epsilon": 0.5}
    assert "unknown audit case" in _error(AUDIT.replace("baseline-one-sample", "nope"))
    assert "params of an audit: draws" in _error(AUDIT.replace("draws: 2000", "draws: 3"))
    assert "no population" in _error(AUDIT + "population: {users: 10}\n")
    # T repeated collections: only a case of a repeated collection takes collections > 1
    one_shot = AUDIT.replace("draws: 2000", "draws: 2000, collections: 4")
    assert "audits one report (collections must be 1)" in _error(one_shot)
    repeated = one_shot.replace(
        "[alg1-stage-two, baseline-one-sample]", "[memo-rappor-f0.5-memoized]"
    )
    assert parse_experiment(repeated, "exp.yaml").trials()[0].params["collections"] == 4

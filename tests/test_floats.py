"""The cross-environment comparison (tests/floats.py) tells rounding from a real change."""

from __future__ import annotations

from tests.floats import same, same_rows


def test_last_digit_differences_pass_and_real_changes_fail() -> None:
    assert same({"estimate": [0.47342075693379126, 0.1]}, {"estimate": [0.4734207569337913, 0.1]})
    # an element that cancelled to near zero is compared at its vector's size
    assert same([0.47, -3.792498703506434e-08], [0.47, -3.792498707007358e-08])
    assert not same([0.47, -3.8e-08], [0.47, -3.8e-08 + 1e-12])
    assert not same(1.0, 1.0 + 1e-11)
    assert not same(1, 1.0)  # an integer stays an integer
    assert not same({"a": 1.0}, {"a": 1.0, "b": 2.0})


def test_csv_cells_compare_as_json_values_or_text() -> None:
    header = ["protocol", "error", "estimate"]
    want = [header, ["user-mean", "0.1", "[0.5, -3.8e-08]"]]
    assert same_rows([header, ["user-mean", "0.10000000000000002", "[0.5, -3.8e-08]"]], want)
    assert not same_rows([header, ["user-sgd", "0.1", "[0.5, -3.8e-08]"]], want)
    assert not same_rows([header, ["user-mean", "0.1"]], want)

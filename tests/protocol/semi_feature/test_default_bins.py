"""HistOfTree's ε-aware default histogram (issue 11 item 7): t = 1 at small ε, t = 2 above."""

from __future__ import annotations

import numpy as np
import pytest

from fedldp.client.population.features import synthetic_population
from fedldp.protocol.semi_feature.histoftree import SMALL_EPSILON, HistOfTree, default_bins


def test_default_bins_follow_the_median_epsilon() -> None:
    assert default_bins(np.array([0.5, 1.0, 2.9])) == 1
    assert default_bins(np.array([1.0, SMALL_EPSILON, 8.0])) == 2
    # the median, not the mean: one large ε does not switch the histogram on
    assert default_bins(np.array([1.0, 1.0, 100.0])) == 1


@pytest.mark.parametrize(("epsilon", "bins"), [(1.0, 1), (2.0, 1), (4.0, 2), (8.0, 2)])
def test_the_plan_uses_the_default_unless_bins_are_given(epsilon: float, bins: int) -> None:
    pop = synthetic_population(400, 3, epsilon, private=1, test_size=10)
    hot = HistOfTree()
    plan = hot.plan(hot.parse_params(pop.params()), pop.epsilon, pop.metadata, 5)
    assert plan.public["bins"] == bins
    given = hot.plan(hot.parse_params(pop.params(bins=3)), pop.epsilon, pop.metadata, 5)
    assert given.public["bins"] == 3

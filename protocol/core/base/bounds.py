"""Bounds that protocol parameter models share: finite values every run can compute with.

A parameter outside its bound is refused when the study is created (the server's
``invalid_params``), never at a round close. The bounds come from the computations:

* Every catalogue noise scale is a parameter scale S (a data bound, radius, label range, clip
  radius) over an ε in [``EPSILON_MIN``, ``EPSILON_MAX``] = [1e-6, 1e3] times protocol constants
  within 1e6 of 1 (sensitivity factors, budget shares such as ρ, sample counts): for S in
  [``SCALE_MIN``, ``SCALE_MAX``] = [1e-50, 1e50] a report variance lies in [1e-124, 1e124]. The
  inverse-variance weights w of the estimators then lie in [1e-124, 1e124] and the sums their
  error bars take, Σw and Σw² over up to 2^63 reports, between 1e-248 and 1e267: normal float64
  numbers (2.2e-308 to 1.8e308), none 0, none infinite, with a further factor of 1e20 either
  way in the variances for larger constants (Alg 2 splits ε over up to 2^14 components).
  (Measured at S = 1e100: Σw² underflows to 0 and an Alg-2 mean's error bar is 0/0.)
* A failure probability (β) of at least ``PROBABILITY_MIN`` keeps 1 − β below 1 in float64
  (spacing 1.1e-16 there) to four significant digits of β: quantiles at level 1 − β are finite.
* ε-valued parameters (a cap, a reference ε) lie in the ε range the server enrolls,
  [``EPSILON_MIN``, ``EPSILON_MAX``], where every randomizer's scales were checked finite.

Sizes (dimensions, bins, domain sizes, rounds) are bounded by each protocol with its own reason.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from fedldp.protocol.core.wire.common import EPSILON_MAX, EPSILON_MIN

__all__ = [
    "MAX_MOMENT_P",
    "PROBABILITY_MIN",
    "SCALE_MAX",
    "SCALE_MIN",
    "SHARE_MIN",
    "EpsilonParam",
    "FailureProbability",
    "Level",
    "Location",
    "Scale",
    "check_range",
]

SCALE_MAX = 1e50
"""Largest data bound, radius, range end or other positive scale a parameter takes."""

SCALE_MIN = 1e-50
"""Smallest positive scale a parameter takes (and the smallest width of a range)."""

PROBABILITY_MIN = 1e-12
"""Smallest failure probability β (error bars at level 1 − β); the largest level is 1 − this."""

SHARE_MIN = 1e-6
"""Smallest share of a participant's ε a protocol may spend on one part (ρ of histoftree): the
share's noise scale is at most 1/SHARE_MIN = 1e6 times the whole ε's, inside the factor 1e6 of
protocol constants the scale bound allows for."""

MAX_MOMENT_P = 64.0
"""Largest p of a moment bound E|X|^p <= M_p (the heavy-tail variants): beyond it the condition
gives a run nothing more. s = M_p^{1/p} is within SCALE_MAX^{1/64} < 6.1 of 1 whatever the
``Scale`` M_p, and the (Σ ε_i²)^{1/(2p)} factor of Alg 1-HT's Δ within (2^63·EPSILON_MAX²)^{1/128}
< 1.8 of 1: the design is that of bounded data at D ≈ 2s."""

Scale = Annotated[float, Field(ge=SCALE_MIN, le=SCALE_MAX)]
"""A positive scale: a data bound, a radius, a moment bound, a constant of a condition."""

Location = Annotated[float, Field(ge=-SCALE_MAX, le=SCALE_MAX)]
"""An end of a data or label range (the pair is checked with ``check_range``)."""

FailureProbability = Annotated[float, Field(ge=PROBABILITY_MIN, lt=1)]
"""β of an error bar at level 1 − β."""

Level = Annotated[float, Field(gt=0, le=1 - PROBABILITY_MIN)]
"""The level of an error bar (its quantile is finite below 1 − PROBABILITY_MIN)."""

EpsilonParam = Annotated[float, Field(ge=EPSILON_MIN, le=EPSILON_MAX)]
"""An ε given as a parameter (a cap, a reference ε): inside the enrolment range."""


def check_range(low: float, high: float, condition: str) -> None:
    """ValueError naming ``condition`` (e.g. "hi > lo") unless ``high - low`` is at least
    ``SCALE_MIN`` (ends given as ``Location``: the width is then at most 2·SCALE_MAX, finite,
    and a map onto [-1, 1] divides by a normal float)."""
    if not high - low >= SCALE_MIN:
        raise ValueError(f"need {condition} by at least {SCALE_MIN:g}, got [{low:g}, {high:g}]")

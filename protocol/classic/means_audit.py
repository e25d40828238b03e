"""The classic mean protocols' client steps on their worst-case neighbours, for the end-to-end
privacy audit (``fedldp.protocol.api.ClientAudit``; the driver is ``run_client_audit``).

Each case plans a study at ε, runs the protocol's own ``privatize`` on one user whose samples
all sit at +1 against all at −1 (the ends of [−1, 1], every coordinate for vectors: the user's
clipped mean, which is what the mechanism sees), and reduces each report to a statistic that is
a monotone function of the exact privacy loss, so that every case is tight (some event has
probability ratio exactly e^ε):

* Laplace: the ℓ1 Laplace loss (``scaled_loss``, scalar; per sampled coordinate, vectors);
* Duchi (scalar): sign(Y), π against 1 − π;
* PM and HM: sign(Y)·1[|Y| > 1]: PM's high-density piece at t = 1 is [1, C], at t = −1 it is
  [−C, −1], and HM's Duchi atoms ±c lie beyond 1 too (c = coth(ε/2) > 1), so both pieces of
  HM's mixture have ratio e^ε on the same event;
* vectors through Alg. 4: the sum over coordinates of that statistic on Y_j·k/d (the sampled set
  is the same law under both datasets; the k sampled coordinates each lose ε/k);
* Duchi (multidimensional): sign(Σ_j Y_j): at t = ±(1, …, 1), v = t, and a report with positive
  sum lies in T⁺ of the first and T⁻ of the second (ties, for even d, in both: ratio 1).

One more case feeds samples at ±100 to PM, which the client clips to [−1, 1] first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fedldp.protocol.api import (
    ClientAudit,
    ClientStep,
    FloatArray,
    Protocol,
    UserData,
    client_step,
    laplace_loss_statistic,
    one_user,
    scaled_loss,
)
from fedldp.protocol.classic import means as cm
from fedldp.protocol.classic import means_theory as th

__all__ = ["AUDIT_DIMENSION", "CLIENT_AUDITS"]

AUDIT_DIMENSION = 4
"""d of the vector cases (even: Duchi's ties ⟨z, v⟩ = 0 occur)."""
_SAMPLES = 4
"""Samples of the audited user (the protocols take its local mean)."""
_OUTSIDE = 100.0


def _user(value: float, d: int | None) -> UserData:
    shape = (_SAMPLES,) if d is None else (_SAMPLES, d)
    return one_user(np.full(shape, value))


def _setup(protocol: Protocol[Any], d: int | None) -> Callable[[float], ClientStep]:
    params = {} if d is None else {"dimension": d}
    background = _user(0.0, d)

    def setup(eps: float) -> ClientStep:
        return client_step(protocol, params, eps, background.take(np.zeros(2, np.int64)), 0)

    return setup


def _k_over_d(step: ClientStep) -> float:
    d = int(step.task.broadcast["dimension"])
    return float(th.sampled_coordinates(np.array([step.epsilon]), d)[0]) / d


def _piece(step: ClientStep, a: UserData, b: UserData) -> Callable[[FloatArray], FloatArray]:
    unit = _k_over_d(step)

    def statistic(z: FloatArray) -> FloatArray:
        y = z * unit
        return np.asarray(np.sum(np.sign(y) * (np.abs(y) > 1.0), axis=1), dtype=np.float64)

    return statistic


def _sign(step: ClientStep, a: UserData, b: UserData) -> Callable[[FloatArray], FloatArray]:
    return lambda z: np.asarray(np.sign(np.sum(z, axis=1)), dtype=np.float64)


def _laplace_sampled(
    step: ClientStep, a: UserData, b: UserData
) -> Callable[[FloatArray], FloatArray]:
    unit = _k_over_d(step)
    d = int(step.task.broadcast["dimension"])
    return lambda z: laplace_loss_statistic(z * unit, np.ones(d), -np.ones(d))


def _case(
    protocol: cm.ClassicMean, statistic: Any, d: int | None, value: float = 1.0, variant: str = ""
) -> ClientAudit:
    where = "every sample" if d is None else f"every sample and coordinate (d = {d})"
    return ClientAudit(
        protocol.name,
        "report",
        f"{protocol.summary} {where} at +{value:g} against -{value:g}",
        _setup(protocol, d),
        _user(value, d),
        _user(-value, d),
        statistic,
        variant=variant,
    )


_D = AUDIT_DIMENSION
CLIENT_AUDITS: tuple[ClientAudit, ...] = (
    _case(cm.ClassicLaplace(), scaled_loss, None),
    _case(cm.ClassicDuchi(), _sign, None),
    _case(cm.ClassicPM(), _piece, None),
    _case(cm.ClassicPM(), _piece, None, _OUTSIDE, "outside"),
    _case(cm.ClassicHM(), _piece, None),
    _case(cm.ClassicLaplaceVector(), _laplace_sampled, _D),
    _case(cm.ClassicDuchiVector(), _sign, _D),
    _case(cm.ClassicPMVector(), _piece, _D),
    _case(cm.ClassicHMVector(), _piece, _D),
)
"""The classic means' end-to-end cases (``fedldp.protocol.catalogue.CLIENT_AUDITS``)."""

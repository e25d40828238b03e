"""The randomizers of Aliakbarpour, Fallah, Roy, Stevens 2025 (arXiv:2510.11895) on their
worst-case neighbouring inputs, for the empirical privacy audit (heterogeneous-ldp.md §3 and
§5 E4; the audit itself is ``fedldp.protocol.mechanisms.audit``).

Each case runs the client code the protocols run (``laplace_mean_report``,
``randomized_response``, ``one_bit_report``, ``duchi_report``, ``jl_report``) on the two inputs
of §3's tight events, and reduces each output to its privacy-loss statistic (a monotone function
of log p(y|A)/p(y|B), the most powerful statistic; DP survives this post-processing):

* Alg 1 (Laplace): x = +1 against x = −1 (the ends of [−1, 1]), statistic
  ``laplace_loss_statistic``: |y + 1| − |y − 1| on y clipped to [−1, 1]; the event Y ≥ 1 has
  probabilities 1/2 and e^{−ε}/2. ``…-outside`` feeds ±100 (the client clips to [−1, 1] first).
* Alg 2 (RR) and Alg 2′ (one bit for [−1, 1]): x = ±1, statistic the bit: π against 1 − π.
* Alg 4 (Duchi, d = 5, r = 1): x = e_1 against −e_1, statistic sign(Y_1): the density is
  constant on each hemisphere of x (§3), π against 1 − π.
* Alg 5's local randomizer (k = 4 items, m = 64 rows, a fixed public seed): items 0 and 1,
  statistic ς·σ[j, 0] where the two items' signs differ at row j and 0 where they agree (the
  loss there is 0): π/m against (1 − π)/m on the rows that differ.

Every case is tight: some event has probability ratio exactly e^ε.

``CLIENT_AUDITS``: the same inputs and statistics end to end
(``fedldp.protocol.mechanisms.audit.ClientAudit``): each catalogue protocol's own ``privatize``
(the user's local mean, or one of its items, into the mechanism) at the ε its plan charges
(min(ε_i, eps_cap)), the neighbours two whole local datasets (the protocols' user-level claim):
every sample at one input against every sample at the other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fedldp.protocol.api import (
    AuditCase,
    ClientAudit,
    ClientStep,
    Draw,
    FloatArray,
    Protocol,
    UserData,
    client_step,
    duchi_report,
    jl_report,
    jl_sign,
    laplace_loss_statistic,
    laplace_mean_report,
    one_bit_report,
    one_user,
    randomized_response,
    scaled_loss,
)
from fedldp.protocol.heterogeneous.frequency import HeteroFrequency
from fedldp.protocol.heterogeneous.means import HeteroDuchiMean, HeteroLaplaceMean, HeteroRRMean

__all__ = ["AUDITS", "CLIENT_AUDITS", "DUCHI_DIMENSION", "JL_ITEMS", "JL_ROWS", "JL_SEED"]

DUCHI_DIMENSION = 5
"""d of the Duchi case (the spec's E4 reference run)."""
JL_ITEMS = 4
JL_ROWS = 64
JL_SEED = 45678
"""k, m and the public seed of the sign matrix in the Alg 5 case."""
_OUTSIDE = 100.0


def _laplace(scale: float) -> Draw:
    def draw(eps: float, draws: int, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
        e = np.full(draws, eps)
        ya = laplace_mean_report(np.full(draws, scale), e, rng)
        yb = laplace_mean_report(np.full(draws, -scale), e, rng)
        return laplace_loss_statistic(ya, [1.0], [-1.0]), laplace_loss_statistic(yb, [1.0], [-1.0])

    return draw


def _bit(one_bit: bool) -> Draw:
    report = one_bit_report if one_bit else randomized_response

    def draw(eps: float, draws: int, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
        e = np.full(draws, eps)
        return report(np.ones(draws), e, rng), report(-np.ones(draws), e, rng)

    return draw


def _duchi(eps: float, draws: int, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
    e = np.full(draws, eps)
    x = np.zeros((draws, DUCHI_DIMENSION))
    x[:, 0] = 1.0
    ya = duchi_report(x, e, rng)
    yb = duchi_report(-x, e, rng)
    return np.sign(ya[:, 0]), np.sign(yb[:, 0])


def _jl_statistic(
    j: FloatArray, sign: FloatArray, seed: int = JL_SEED, m: int = JL_ROWS, k: int = JL_ITEMS
) -> FloatArray:
    rows = j.astype(np.int64)
    s0 = jl_sign(seed, m, k, rows, np.zeros_like(rows)).astype(np.float64)
    s1 = jl_sign(seed, m, k, rows, np.ones_like(rows)).astype(np.float64)
    return np.asarray(np.where(s0 != s1, sign * s0, 0.0), dtype=np.float64)


def _jl(eps: float, draws: int, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
    e = np.full(draws, eps)
    out = []
    for item in (0, 1):
        j, sign = jl_report(np.full(draws, item), e, JL_ROWS, JL_SEED, rng, d=JL_ITEMS)
        out.append(_jl_statistic(j.astype(np.float64), sign))
    return out[0], out[1]


AUDITS: tuple[AuditCase, ...] = (
    AuditCase("hetero-laplace", "Alg 1: clip(x, −1, 1) + Lap(2/ε), x = ±1", _laplace(1.0)),
    AuditCase(
        "hetero-laplace-outside",
        "Alg 1 on x = ±100: the client's clip to [−1, 1] keeps the law",
        _laplace(_OUTSIDE),
    ),
    AuditCase("hetero-rr", "Alg 2: randomized response on x = ±1", _bit(one_bit=False)),
    AuditCase("hetero-one-bit", "Alg 2′: round x ∈ [−1, 1] to ±1, then RR; x = ±1", _bit(True)),
    AuditCase(
        "hetero-duchi",
        f"Alg 4 (d = {DUCHI_DIMENSION}, r = 1): x = ±e_1, statistic the hemisphere sign(Y_1)",
        _duchi,
    ),
    AuditCase(
        "hetero-jl",
        f"Alg 5's local randomizer (k = {JL_ITEMS}, m = {JL_ROWS}): items 0 and 1",
        _jl,
    ),
)
"""The heterogeneous-ε randomizers' audit cases (``fedldp.protocol.catalogue.AUDITS``)."""


# --------------------------------------------------------------------------- end to end


_SAMPLES = 4
"""Samples per user of the end-to-end cases (the protocols take the user's local mean)."""


def _setup(
    protocol: Protocol[Any], params: Mapping[str, Any], background: UserData, n: int = 2
) -> Callable[[float], ClientStep]:
    def setup(eps: float) -> ClientStep:
        return client_step(protocol, params, eps, background.take(np.zeros(n, np.int64)), 0)

    return setup


def _bit_statistic(
    step: ClientStep, a: UserData, b: UserData
) -> Callable[[FloatArray], FloatArray]:
    return lambda z: np.asarray(z[:, 0], dtype=np.float64)


def _hemisphere(step: ClientStep, a: UserData, b: UserData) -> Callable[[FloatArray], FloatArray]:
    return lambda z: np.asarray(np.sign(z[:, 0]), dtype=np.float64)


def _jl_client(step: ClientStep, a: UserData, b: UserData) -> Callable[[FloatArray], FloatArray]:
    m, seed, k = (int(step.task.broadcast[key]) for key in ("m", "jl_seed", "k"))
    return lambda z: _jl_statistic(z[:, 0], z[:, 1], seed, m, k)


def _scalars(value: float) -> UserData:
    return one_user(np.full(_SAMPLES, value))


def _duchi_point(sign: float) -> UserData:
    x = np.zeros((_SAMPLES, DUCHI_DIMENSION))
    x[:, 0] = sign
    return one_user(x)


CLIENT_AUDITS: tuple[ClientAudit, ...] = (
    ClientAudit(
        "hetero-mean-laplace",
        "report",
        "Alg 1 on [−1, 1]: every sample at +1 against −1, statistic the ℓ1 Laplace loss",
        _setup(HeteroLaplaceMean(), {}, _scalars(0.0)),
        _scalars(1.0),
        _scalars(-1.0),
        scaled_loss,
    ),
    ClientAudit(
        "hetero-mean-laplace",
        "report",
        "Alg 1 on [−1, 1] with samples at ±100 (the client clips the mean to [−1, 1])",
        _setup(HeteroLaplaceMean(), {}, _scalars(0.0)),
        _scalars(_OUTSIDE),
        _scalars(-_OUTSIDE),
        scaled_loss,
        variant="outside",
    ),
    ClientAudit(
        "hetero-mean-laplace",
        "report",
        "Alg 1 with eps_cap = 0.5 (enrolled at ε = 1: the plan charges, and the client runs at, "
        "min(ε_i, eps_cap))",
        _setup(HeteroLaplaceMean(), {"eps_cap": 0.5}, _scalars(0.0)),
        _scalars(1.0),
        _scalars(-1.0),
        scaled_loss,
        variant="eps-cap",
    ),
    ClientAudit(
        "hetero-mean-rr",
        "report",
        "Alg 2′ (input='interval'): every sample at +1 against −1, statistic the bit",
        _setup(HeteroRRMean(), {}, _scalars(0.0)),
        _scalars(1.0),
        _scalars(-1.0),
        _bit_statistic,
    ),
    ClientAudit(
        "hetero-mean-rr",
        "report",
        "Alg 2 (input='binary'): every sample at +1 against −1, statistic the bit",
        _setup(HeteroRRMean(), {"input": "binary"}, _scalars(1.0)),
        _scalars(1.0),
        _scalars(-1.0),
        _bit_statistic,
        variant="binary",
    ),
    ClientAudit(
        "hetero-mean-duchi",
        "report",
        f"Alg 4 (d = {DUCHI_DIMENSION}, r = 1): every sample at e_1 against −e_1, statistic "
        "the hemisphere sign(Y_1)",
        _setup(HeteroDuchiMean(), {"dimension": DUCHI_DIMENSION}, _duchi_point(0.0)),
        _duchi_point(1.0),
        _duchi_point(-1.0),
        _hemisphere,
    ),
    ClientAudit(
        "hetero-frequency",
        "report",
        f"Alg 5 (k = {JL_ITEMS}, 200 participants: m ≈ 50 and the sign matrix's seed from the "
        "plan): every sample item 0 against item 1, statistic ς·σ[j, 0] on the rows where the "
        "items' signs differ",
        _setup(
            HeteroFrequency(), {"domain_size": JL_ITEMS}, one_user(np.arange(_SAMPLES) % 4), 200
        ),
        one_user(np.zeros(_SAMPLES, dtype=np.int64)),
        one_user(np.ones(_SAMPLES, dtype=np.int64)),
        _jl_client,
    ),
)
"""The heterogeneous-ε protocols' end-to-end cases (``fedldp.protocol.catalogue.CLIENT_AUDITS``)."""

"""``memo-rappor``: RAPPOR (Erlingsson, Pihur, Korolova, CCS 2014, §3) for the frequencies of a
categorical value over k items, with its permanent randomized response memoized per
(device, value) and a fresh instantaneous randomized response each collection.

Encoding: one-hot over k bits, the Bloom filter of one hash function (h = 1) with the identity
as hash and m = k bits, so no two items collide and the decoder needs no regression (a
simplification of the paper's Bloom filters with h hashes and cohorts; docs/longitudinal.md §2).

* Permanent randomized response (PRR), per bit j of the one-hot B of the value v:
  B'_j = 1 with probability f/2, 0 with probability f/2, B_j with probability 1 − f; drawn from
  the device's persistent stream under label v (``common.device_uniforms``), so the same device
  holding v answers the same B' in every study (memoization).
* Instantaneous randomized response (IRR), fresh each collection from the round's stream:
  S_j = 1 with probability q if B'_j = 1, with probability p if B'_j = 0, with the paper's
  (p, q) chosen symmetric, p = 1 − q, and q calibrated to the participant's ε_i:
  q* = P(S_j = 1 | B_j = 1) = f/2 + (1 − f)·q and p* = P(S_j = 1 | B_j = 0) = 1 − q*, so the
  one-shot ε of the paper, ε_1 = h·ln(q*(1 − p*) / (p*(1 − q*))), is 2·ln(q*/(1 − q*)) (h = 1),
  and q* = e^{ε_i/2} / (1 + e^{ε_i/2}) makes it ε_i exactly. This needs q ≤ 1, i.e. ε_i ≤
  ε_∞ = 2·ln((1 − f/2)/(f/2)), the PRR's own (longitudinal) ε; a participant with ε_i > ε_∞
  gets q = 1 (the IRR is the identity) and spends ε_∞ < ε_i.

The decoder: (S_ij − p*_i)/(q*_i − p*_i) is unbiased for 1[v_i = j], with variance exactly
q*_i(1 − q*_i)/(2q*_i − 1)² whatever v_i (Var S_ij = q*(1 − q*) as p* = 1 − q*); the estimate
is the plain average over participants, its variance the average of those over n.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from fedldp.protocol.api import (
    JSON,
    BoolArray,
    DataKind,
    FloatArray,
    IntArray,
    PayloadKind,
    RandomSource,
    ReportChunk,
    RoundTask,
    UserData,
    valid_payloads,
)
from fedldp.protocol.longitudinal.common import (
    MemoParams,
    MemoProtocol,
    device_uniforms,
    first_values,
)

__all__ = [
    "PROTOCOLS",
    "PRR_PURPOSE",
    "MemoRappor",
    "RapporParams",
    "longitudinal_epsilon",
    "one_shot_epsilon",
    "permanent_response",
    "repeated_rappor_epsilon",
    "report_gap",
    "report_probabilities",
]

PRR_PURPOSE = 0x5250
"""Purpose word of the device streams of RAPPOR's permanent randomized response."""


class RapporParams(MemoParams):
    domain_size: int = Field(ge=2, le=1 << 12, description="k: items are 0..k−1 (k report bits)")
    f: float = Field(
        0.5, gt=0.0, lt=1.0, description="PRR: each bit is replaced by a fair coin w.p. f"
    )


def longitudinal_epsilon(f: float, h: int = 1) -> float:
    """RAPPOR's ε_∞ = 2h·ln((1 − f/2)/(f/2)): the PRR's ε, a bound on everything a memoized
    device reveals about a value it keeps, over any number of collections."""
    return 2.0 * h * math.log((1.0 - f / 2.0) / (f / 2.0))


def one_shot_epsilon(p: float, q: float, f: float, h: int = 1) -> float:
    """The paper's ε_1 = h·ln(q*(1 − p*)/(p*(1 − q*))) of one report, for IRR probabilities
    p = P(S = 1 | B' = 0), q = P(S = 1 | B' = 1) and PRR parameter f."""
    q_star = f / 2.0 * (p + q) + (1.0 - f) * q
    p_star = f / 2.0 * (p + q) + (1.0 - f) * p
    return h * math.log(q_star * (1.0 - p_star) / (p_star * (1.0 - q_star)))


def report_probabilities(epsilon: FloatArray, f: float) -> tuple[FloatArray, FloatArray]:
    """(q*, q): P(S_j = 1 | B_j = 1) of the whole report and the IRR's P(S_j = 1 | B'_j = 1)
    for participants at ε (module docstring; p* = 1 − q*, p = 1 − q), q* capped at 1 − f/2."""
    eps = np.asarray(epsilon, dtype=np.float64)
    q_star = np.minimum(1.0 / (1.0 + np.exp(-eps / 2.0)), 1.0 - f / 2.0)
    q = np.minimum((q_star - f / 2.0) / (1.0 - f), 1.0)
    return q_star, q


def report_gap(epsilon: FloatArray, f: float) -> FloatArray:
    """q* − p* = 2q* − 1 = min(tanh(ε/4), 1 − f) of ``report_probabilities``, computed without
    the cancellation of 2q* − 1 (at f = 1 − 2⁻⁵³, q* rounds to 1/2 and 2q* − 1 to 0, where the
    gap is 1.1e-16: the de-biasing divides by it)."""
    eps = np.asarray(epsilon, dtype=np.float64)
    return np.minimum(np.tanh(eps / 4.0), 1.0 - f)


def _bit_loss(t: float, f: float) -> float:
    """ln g(e^t), g(y) = ((1 − f/2)y + f/2)/((f/2)y + 1 − f/2): the largest log-ratio, between
    B_j = 1 and B_j = 0, of one report bit's reports over collections whose IRR log-odds
    ln(q/(1 − q)) sum to t (docs/longitudinal.md §5); ε_∞/2 at t = ∞."""
    a, b = math.log1p(-f / 2.0), math.log(f / 2.0)
    if math.isinf(t):
        return a - b
    return _logaddexp(a + t, b) - _logaddexp(b + t, a)


def _logaddexp(x: float, y: float) -> float:
    """ln(e^x + e^y) without overflow."""
    top = max(x, y)
    return top + math.log1p(math.exp(-abs(x - y)))


@functools.lru_cache(maxsize=1024)
def _irr_log_odds(epsilon: float, f: float) -> float:
    """ln(q/(1 − q)) of the IRR calibrated to ε (∞ when q = 1: ε ≥ ε_∞)."""
    _, q = report_probabilities(np.array([epsilon]), f)
    qq = float(q[0])
    return math.inf if qq >= 1.0 else math.log(qq / (1.0 - qq))


def repeated_rappor_epsilon(
    epsilon: Sequence[float], states: Sequence[int] | None, f: float, k: int
) -> float:
    """The longitudinal ε of memoized RAPPOR (docs/longitudinal.md §5). The device: per distinct
    value v, 2·ln g(e^{t_v}) with t_v the sum of the IRR log-odds of v's collections (at most
    min(c·ε_1, ε_∞) for c collections at one ε), summed over values. The server, values
    unknown: at one ε, the collections split as evenly as possible over min(T, k) values (the
    largest sum, the per-value loss being concave in the count); at unequal ε's, the smaller of
    Σ_t ε_t-sums of one-collection values and min(T, k)·ε_∞."""
    eps = [float(e) for e in epsilon]
    if not eps:
        return 0.0
    t = [_irr_log_odds(e, f) for e in eps]
    if states is not None:
        if len(states) != len(eps):
            raise ValueError(f"one state per collection: {len(eps)} ε's, {len(states)} states")
        by: dict[int, float] = {}
        for odds, state in zip(t, states, strict=True):
            by[int(state)] = by.get(int(state), 0.0) + odds
        return math.fsum(2.0 * _bit_loss(v, f) for v in by.values())
    parts = min(len(eps), k)
    if max(eps) == min(eps):
        count, extra = divmod(len(eps), parts)
        return extra * 2.0 * _bit_loss((count + 1) * t[0], f) + (parts - extra) * 2.0 * _bit_loss(
            count * t[0], f
        )
    singles = math.fsum(2.0 * _bit_loss(odds, f) for odds in t)
    return min(singles, parts * longitudinal_epsilon(f))


def permanent_response(values: IntArray, k: int, f: float, u: FloatArray) -> FloatArray:
    """The PRR B' of the one-hot encodings of ``values`` from uniforms ``u`` (n, k): bit j is 1
    if u_j < f/2, 0 if f/2 ≤ u_j < f, the one-hot bit otherwise."""
    one_hot = np.arange(k)[None, :] == np.asarray(values)[:, None]
    return np.where(u < f / 2.0, 1.0, np.where(u < f, 0.0, one_hot.astype(np.float64)))


class MemoRappor(MemoProtocol[RapporParams]):
    name: ClassVar[str] = "memo-rappor"
    summary: ClassVar[str] = (
        "Item frequencies over k items by RAPPOR: one-hot permanent randomized response "
        "memoized per (device, value), fresh instantaneous randomized response per collection."
    )
    source: ClassVar[str] = (
        "Erlingsson, Pihur, Korolova, CCS 2014, §3 (one-hot: Bloom filter with h = 1; symmetric "
        "IRR calibrated to ε_i; docs/longitudinal.md §2)"
    )
    heterogeneity: ClassVar[str] = (
        "each participant's IRR is calibrated to its ε_i (up to ε_∞ of the shared f) and its "
        "report debiased with its own q*; plain average of the per-user unbiased estimates"
    )
    data_kind: ClassVar[DataKind] = "categorical"
    payload_kind: ClassVar[PayloadKind] = "vector"
    params_model = RapporParams
    population_probe: ClassVar[Mapping[str, Any]] = {"domain_size": 2}
    broadcast_fields: ClassVar[Mapping[str, str]] = {
        "k": "items 0..k−1: the report is k bits, the one-hot of the value through PRR and IRR",
        "f": "the PRR's probability of replacing each bit by a fair coin",
        "memoize": "draw the PRR from the device's persistent stream under label v (true) or "
        "afresh (false)",
    }

    def payload_shape(self, params: RapporParams) -> tuple[int, ...]:
        return (params.domain_size,)

    def public(self, params: RapporParams) -> JSON:
        return {"k": params.domain_size, "f": params.f, "memoize": params.memoize}

    def privatize(
        self,
        params: RapporParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        k, f = int(task.broadcast["k"]), float(task.broadcast["f"])
        v = first_values(data)
        if v.size and (v.min() < 0 or v.max() >= k):
            raise ValueError(f"items must lie in 0..{k - 1}")
        u = device_uniforms(rng, bool(task.broadcast["memoize"]), PRR_PURPOSE, v, k)
        b_prime = permanent_response(v, k, f, u)
        _, q = report_probabilities(epsilon, f)
        keep = np.where(b_prime > 0, q[:, None], 1.0 - q[:, None])
        w = rng.random((data.n_users, k))
        return np.asarray(w < keep, dtype=np.float64)

    def memo_state(
        self, params: RapporParams, data: UserData, epsilon: FloatArray, rng: RandomSource
    ) -> IntArray | None:
        """The value: its PRR is memoized under it."""
        if not params.memoize:
            return None
        v = first_values(data)
        if v.size and (v.min() < 0 or v.max() >= params.domain_size):
            raise ValueError(f"items must lie in 0..{params.domain_size - 1}")
        return v

    def repeated_epsilon(
        self, params: RapporParams, epsilon: Sequence[float], states: Sequence[int] | None = None
    ) -> float:
        """Memoized: ``repeated_rappor_epsilon``; fresh: T·ε (docs/longitudinal.md §5)."""
        if not params.memoize:
            return super().repeated_epsilon(params, epsilon, states)
        return repeated_rappor_epsilon(epsilon, states, params.f, params.domain_size)

    def check(
        self, params: RapporParams, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        ok = valid_payloads(task, payloads)
        s = np.nan_to_num(np.asarray(payloads, dtype=np.float64))
        bits = np.all((s == 0.0) | (s == 1.0), axis=1)
        return np.asarray(ok & bits, dtype=np.bool_)

    def contributions(
        self, params: RapporParams, chunk: ReportChunk
    ) -> tuple[FloatArray, FloatArray]:
        gap = report_gap(chunk.epsilon, params.f)
        p_star = (1.0 - gap) / 2.0
        s = chunk.payloads
        total = np.sum((s - p_star[:, None]) / gap[:, None], axis=0)
        var = float(np.sum((1.0 - gap**2) / (4.0 * gap**2)))
        return total, np.full(params.domain_size, var)


PROTOCOLS = (MemoRappor(),)

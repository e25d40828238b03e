"""``memo-1bitmean`` and ``memo-dbitflip``: Ding, Kulkarni, Yekhanin, "Collecting Telemetry Data
Privately" (NeurIPS 2017), §2 (1BitMean, dBitFlip) with §3's memoization (α-point rounding for
1BitMean; a permanent response per state for dBitFlip). docs/longitudinal.md §3–§4 derives each
report's ε and the longitudinal guarantee. 1BitMean also has the paper's mitigation of the change
leak, output perturbation (``flip`` γ: the memoized bit is flipped afresh with probability γ in
every collection; the server debiases (b − γ)/(1 − 2γ)).

**1BitMean** (values in [0, m]; a participant's value is the mean of its samples, clipped to
[0, m]). α-point rounding to the grid {0, m/s, …, m} (s = ``levels``): the device draws α ~ U[0, 1)
once (its persistent stream); x with x·s/m = ℓ + r (ℓ integer, 0 ≤ r < 1) rounds to the grid
point ℓ + 1 when r > α, else ℓ, so the rounded value x̃ is unbiased over α. Its 1-bit response
to grid point g is 1 with probability 1/(e^ε + 1) + (g/s)·(e^ε − 1)/(e^ε + 1) and is memoized per
(device, g). The server's x̂_i = m·((e^ε + 1)·b_i − 1)/(e^ε − 1) is unbiased for x_i (over α
and the bit), and b_i is Bernoulli(P(x_i)) with P linear in x, so Var x̂_i = m²(e^ε + 1)²
P(1 − P)/(e^ε − 1)² ≤ m²(e^ε + 1)²/(4(e^ε − 1)²): the variance (and predicted MSE) reported is
that bound (with output perturbation: m²(e^ε + 1)²/(4(e^ε − 1)²(1 − 2γ)²)).

**dBitFlip** (k buckets; a participant's value is its first sample). The device samples d
distinct buckets j_1..j_d uniformly (persistent: once per device), and reports for each the bit
b_p = 1 with probability e^{ε/2}/(e^{ε/2} + 1) if its value is j_p, 1/(e^{ε/2} + 1) otherwise.
The response depends on the value only through its *state* (the position p of the value among
the sampled buckets, or "none"), and is memoized per (device, state). The server's
ĥ_i(j_p) = (k/d)·(b_p(e^{ε/2} + 1) − 1)/(e^{ε/2} − 1) (0 on unsampled buckets) is unbiased for
1[v_i = j], with Var = (k/d)·e^{ε/2}/(e^{ε/2} − 1)² + (k/d − 1)·1[v_i = j]; the error bar plugs
the estimated count into the second term, and the total MSE Σ_j is exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike
from pydantic import Field, model_validator

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
    per_state_epsilon,
)

__all__ = [
    "ALPHA_PURPOSE",
    "BIT_PURPOSE",
    "BUCKETS_PURPOSE",
    "FLIP_PURPOSE",
    "PROTOCOLS",
    "BitFlipParams",
    "MemoDBitFlip",
    "MemoOneBitMean",
    "OneBitMeanParams",
    "alpha_round",
    "bitflip_variance",
    "one_bit_probability",
    "one_bit_scale",
]

ALPHA_PURPOSE = 0x4D41
BIT_PURPOSE = 0x4D42
BUCKETS_PURPOSE = 0x4D43
FLIP_PURPOSE = 0x4D44
"""Purpose words of the device streams: 1BitMean's α and memoized bits, dBitFlip's buckets and
memoized bits."""


def one_bit_probability(grid: ArrayLike, levels: int, epsilon: ArrayLike) -> FloatArray:
    """P(b = 1) of 1BitMean for the grid point ``grid`` (0..levels) at ε."""
    e = np.exp(-np.asarray(epsilon, dtype=np.float64))  # e^{−ε}: no overflow at large ε
    low = e / (1.0 + e)  # 1/(e^ε + 1)
    return np.asarray(low + (np.asarray(grid) / levels) * (1.0 - 2.0 * low), dtype=np.float64)


def one_bit_scale(epsilon: FloatArray) -> FloatArray:
    """(e^ε + 1)/(e^ε − 1) = 1/tanh(ε/2): the debiasing factor of 1BitMean (per unit of m)."""
    return np.asarray(1.0 / np.tanh(np.asarray(epsilon, dtype=np.float64) / 2.0))


def alpha_round(x: FloatArray, bound: float, levels: int, alpha: FloatArray) -> IntArray:
    """α-point rounding: the grid index (0..levels) of x ∈ [0, bound]: ℓ + 1[r > α] for
    x·levels/bound = ℓ + r; unbiased over α ~ U[0, 1)."""
    # x/bound after clipping: levels/bound overflows at a subnormal bound (5e-324), and ∞·0 is NaN
    t = np.clip(np.asarray(x, dtype=np.float64), 0.0, bound) / bound * levels
    low = np.minimum(np.floor(t), levels)
    return np.asarray(low + ((t - low) > alpha), dtype=np.int64)


def _scalar_values(data: UserData) -> FloatArray:
    """Each participant's value: the mean of its samples (ValueError unless finite)."""
    x = np.asarray(data.user_means(), dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(x)):
        raise ValueError("1BitMean needs finite values")
    return x


def _rounded(x: FloatArray, m: float, s: int, memoize: bool, rng: RandomSource) -> IntArray:
    """The grid points of α-point rounding of ``x``, with the device's persistent α when
    ``memoize`` (else a fresh α from the round's stream)."""
    none = np.zeros(x.shape[0], dtype=np.int64)
    alpha = device_uniforms(rng, memoize, ALPHA_PURPOSE, none, 1)[:, 0]
    return alpha_round(x, m, s, alpha)


class OneBitMeanParams(MemoParams):
    bound: float = Field(1.0, gt=0.0, le=1e12, description="m: values lie in [0, m] (clipped)")
    levels: int = Field(
        1, ge=1, le=1 << 12, description="s: α-point rounding to the grid {0, m/s, …, m}"
    )
    flip: float = Field(
        0.0,
        ge=0.0,
        lt=0.5,
        description="γ: output perturbation, the memoized bit flipped afresh w.p. γ each time",
    )


class MemoOneBitMean(MemoProtocol[OneBitMeanParams]):
    name: ClassVar[str] = "memo-1bitmean"
    summary: ClassVar[str] = (
        "Mean of values in [0, m] by 1BitMean, one bit per device, with α-point rounding and "
        "the bit memoized per (device, rounded value) across studies."
    )
    source: ClassVar[str] = (
        "Ding, Kulkarni, Yekhanin, NeurIPS 2017, §2.1 (1BitMean) and §3.1 (α-point rounding, "
        "memoization); docs/longitudinal.md §3"
    )
    heterogeneity: ClassVar[str] = (
        "each bit debiased with its sender's ε_i (x̂_i = m((e^ε_i + 1)b_i − 1)/(e^ε_i − 1)); "
        "plain average. A participant's value is the mean of its samples, clipped to [0, m]."
    )
    data_kind: ClassVar[DataKind] = "scalar"
    payload_kind: ClassVar[PayloadKind] = "bit"
    params_model = OneBitMeanParams
    broadcast_fields: ClassVar[Mapping[str, str]] = {
        "m": "values lie in [0, m] (a participant's mean is clipped to it)",
        "s": "α-point rounding to the grid {0, m/s, …, m}",
        "flip": "γ: the memoized bit is flipped afresh with this probability",
        "memoize": "draw α and the bit per grid point from the device's persistent stream "
        "(true) or afresh (false)",
    }

    def payload_shape(self, params: OneBitMeanParams) -> tuple[int, ...]:
        return ()

    def data_range(self, params: OneBitMeanParams) -> tuple[float, float]:
        """[0, m]: a value outside is clipped into it, so on a law reaching outside (the default
        two-point law on ±1) the estimate is not the law's mean."""
        return (0.0, params.bound)

    def public(self, params: OneBitMeanParams) -> JSON:
        return {
            "m": params.bound,
            "s": params.levels,
            "flip": params.flip,
            "memoize": params.memoize,
        }

    def privatize(
        self,
        params: OneBitMeanParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        m, s = float(task.broadcast["m"]), int(task.broadcast["s"])
        memoize = bool(task.broadcast["memoize"])
        x = _scalar_values(data)
        grid = _rounded(x, m, s, memoize, rng)
        u = device_uniforms(rng, memoize, BIT_PURPOSE, grid, 1)[:, 0]
        bit = u < one_bit_probability(grid, s, epsilon)
        flipped = rng.random((data.n_users, 1))[:, 0] < float(task.broadcast["flip"])
        return np.where(bit != flipped, 1.0, -1.0)

    def memo_state(
        self, params: OneBitMeanParams, data: UserData, epsilon: FloatArray, rng: RandomSource
    ) -> IntArray | None:
        """The grid point of α-point rounding (0..s), under the device's own α."""
        if not params.memoize:
            return None
        return _rounded(_scalar_values(data), params.bound, params.levels, True, rng)

    def repeated_epsilon(
        self,
        params: OneBitMeanParams,
        epsilon: Sequence[float],
        states: Sequence[int] | None = None,
    ) -> float:
        """Memoized: ε per distinct grid point revealed (with or without output perturbation,
        whose flips are post-processing of the memoized bit); the server's bound
        min(T, s + 1)·ε. Fresh: T·ε (docs/longitudinal.md §5)."""
        if not params.memoize:
            return super().repeated_epsilon(params, epsilon, states)
        return per_state_epsilon(self.name, epsilon, states, params.levels + 1)

    def check(
        self, params: OneBitMeanParams, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        ok = valid_payloads(task, payloads)
        y = np.nan_to_num(np.asarray(payloads, dtype=np.float64))
        return np.asarray(ok & (np.abs(y) == 1.0), dtype=np.bool_)

    def contributions(
        self, params: OneBitMeanParams, chunk: ReportChunk
    ) -> tuple[FloatArray, FloatArray]:
        c = one_bit_scale(chunk.epsilon)
        b = (np.asarray(chunk.payloads, dtype=np.float64).reshape(-1) + 1.0) / 2.0
        m, gamma = params.bound, params.flip
        # E[b] = γ + (1 − 2γ)P(x), P(x) = p₀ + (x/m)/c with p₀ = 1/(e^ε + 1) = (c − 1)/(2c)
        unflipped = (b - gamma) / (1.0 - 2.0 * gamma)
        total = float(np.sum(m * (c * unflipped - (c - 1.0) / 2.0)))
        var = float(np.sum((m * c / (1.0 - 2.0 * gamma)) ** 2 / 4.0))
        return np.array([total]), np.array([var])


def bitflip_variance(epsilon: FloatArray, k: int, d: int) -> FloatArray:
    """(k/d)·e^{ε/2}/(e^{ε/2} − 1)²: the variance of dBitFlip's ĥ_i(j) on a bucket j that is not
    the participant's value (add k/d − 1 on its own bucket)."""
    half = np.asarray(epsilon, dtype=np.float64) / 2.0
    # e^{ε/2}/(e^{ε/2} − 1)² = 1/(4 sinh²(ε/4))
    return np.asarray((k / d) / (4.0 * np.sinh(half / 2.0) ** 2), dtype=np.float64)


def _buckets(data: UserData, k: int) -> IntArray:
    """Each participant's bucket, its first sample (ValueError outside 0..k−1)."""
    v = first_values(data)
    if v.size and (v.min() < 0 or v.max() >= k):
        raise ValueError(f"buckets must lie in 0..{k - 1}")
    return v


def _bitflip_state(
    v: IntArray, k: int, d: int, memoize: bool, rng: RandomSource
) -> tuple[IntArray, BoolArray, IntArray]:
    """The d sampled buckets (sorted), which of them is v, and the state (v's position among
    them, d for none): persistent when ``memoize``, else fresh from the round's stream."""
    none = np.zeros(v.shape[0], dtype=np.int64)
    # d distinct buckets, uniformly: the d smallest of k uniforms (ties have probability 0)
    order = np.argsort(device_uniforms(rng, memoize, BUCKETS_PURPOSE, none, k), axis=1)
    sampled = np.sort(order[:, :d], axis=1)
    hit = sampled == v[:, None]
    state = np.where(hit.any(axis=1), np.argmax(hit, axis=1), d).astype(np.int64)
    return sampled, np.asarray(hit, dtype=np.bool_), state


class BitFlipParams(MemoParams):
    domain_size: int = Field(ge=2, le=1 << 12, description="k: buckets are 0..k−1")
    buckets: int = Field(1, ge=1, le=1 << 12, description="d: buckets each device samples")

    @model_validator(mode="after")
    def _d_at_most_k(self) -> BitFlipParams:
        if self.buckets > self.domain_size:
            raise ValueError(f"d = {self.buckets} buckets exceeds k = {self.domain_size}")
        return self


class MemoDBitFlip(MemoProtocol[BitFlipParams]):
    name: ClassVar[str] = "memo-dbitflip"
    summary: ClassVar[str] = (
        "Histogram over k buckets by dBitFlip: each device samples d buckets once and sends one "
        "randomized bit per sampled bucket, memoized per (device, state of its value)."
    )
    source: ClassVar[str] = (
        "Ding, Kulkarni, Yekhanin, NeurIPS 2017, §2.2 (dBitFlip) and §3 (memoization); "
        "docs/longitudinal.md §4"
    )
    heterogeneity: ClassVar[str] = (
        "each bit debiased with its sender's ε_i; plain average of the per-user unbiased "
        "histograms. A participant's value is its first sample."
    )
    data_kind: ClassVar[DataKind] = "categorical"
    payload_kind: ClassVar[PayloadKind] = "vector"
    params_model = BitFlipParams
    population_probe: ClassVar[Mapping[str, Any]] = {"domain_size": 2}
    broadcast_fields: ClassVar[Mapping[str, str]] = {
        "k": "buckets 0..k−1",
        "d": "buckets each device samples: the report is their d indices, sorted, then d bits",
        "memoize": "draw the buckets and the bits per state from the device's persistent "
        "stream (true) or afresh (false)",
    }

    def payload_shape(self, params: BitFlipParams) -> tuple[int, ...]:
        return (2 * params.buckets,)

    def public(self, params: BitFlipParams) -> JSON:
        return {"k": params.domain_size, "d": params.buckets, "memoize": params.memoize}

    def privatize(
        self,
        params: BitFlipParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        k, d = int(task.broadcast["k"]), int(task.broadcast["d"])
        memoize = bool(task.broadcast["memoize"])
        v = _buckets(data, k)
        sampled, hit, state = _bitflip_state(v, k, d, memoize, rng)
        u = device_uniforms(rng, memoize, FLIP_PURPOSE, state, d)
        e = np.exp(-np.asarray(epsilon, dtype=np.float64) / 2.0)[:, None]  # e^{−ε/2}
        p_one = np.where(hit, 1.0 / (1.0 + e), e / (1.0 + e))
        bits = np.asarray(u < p_one, dtype=np.float64)
        return np.concatenate([sampled.astype(np.float64), bits], axis=1)

    def memo_state(
        self, params: BitFlipParams, data: UserData, epsilon: FloatArray, rng: RandomSource
    ) -> IntArray | None:
        """The position of the value among the device's d sampled buckets, or d for none."""
        if not params.memoize:
            return None
        k, d = params.domain_size, params.buckets
        return _bitflip_state(_buckets(data, k), k, d, True, rng)[2]

    def repeated_epsilon(
        self, params: BitFlipParams, epsilon: Sequence[float], states: Sequence[int] | None = None
    ) -> float:
        """Memoized: ε per distinct state revealed; the server's bound min(T, S)·ε with S the
        number of states (d + 1, or k when d = k and the value is always sampled). Fresh: T·ε
        (docs/longitudinal.md §5)."""
        if not params.memoize:
            return super().repeated_epsilon(params, epsilon, states)
        k, d = params.domain_size, params.buckets
        return per_state_epsilon(self.name, epsilon, states, d + 1 if d < k else k)

    def check(
        self, params: BitFlipParams, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        ok = valid_payloads(task, payloads)
        y = np.nan_to_num(np.asarray(payloads, dtype=np.float64))
        d, k = params.buckets, params.domain_size
        j, b = y[:, :d], y[:, d:]
        index = np.all((j == np.floor(j)) & (j >= 0) & (j < k), axis=1)
        distinct = np.all(np.diff(j, axis=1) > 0, axis=1)  # the client sends them sorted
        bits = np.all((b == 0.0) | (b == 1.0), axis=1)
        return np.asarray(ok & index & distinct & bits, dtype=np.bool_)

    def contributions(
        self, params: BitFlipParams, chunk: ReportChunk
    ) -> tuple[FloatArray, FloatArray]:
        k, d = params.domain_size, params.buckets
        y = chunk.payloads
        j = y[:, :d].astype(np.int64)
        b = y[:, d:]
        half = np.asarray(chunk.epsilon, dtype=np.float64) / 2.0
        c = (1.0 / np.tanh(half / 2.0))[:, None]  # (e^{ε/2} + 1)/(e^{ε/2} − 1)
        g = c * b - (c - 1.0) / 2.0  # (b(e^{ε/2} + 1) − 1)/(e^{ε/2} − 1)
        flat = (k / d * g).reshape(-1)
        total = np.asarray(np.bincount(j.reshape(-1), weights=flat, minlength=k), np.float64)
        base = float(np.sum(bitflip_variance(chunk.epsilon, k, d)))
        return total, np.full(k, base) + (k / d - 1.0) * total


PROTOCOLS = (MemoOneBitMean(), MemoDBitFlip())

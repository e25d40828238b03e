"""Alg 5 of Aliakbarpour, Fallah, Roy, Stevens 2025 (arXiv:2510.11895; spec heterogeneous-ldp.md
§2.5) as the catalogue protocol ``hetero-frequency``: a distribution over k items in ℓ∞ from
1-bit randomized responses of one coordinate of a public Johnson-Lindenstrauss sign matrix, each
user at its own ε_i, on the one-round flow of ``fedldp.protocol.heterogeneous.flow``.

A user with several samples reports one item drawn uniformly from its own samples with its own
stream, so the report is ε_i-LDP for the whole local dataset (user-level privacy).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from fedldp.protocol.api import (
    JL_MAX_ENTRIES,
    JSON,
    BoolArray,
    DataKind,
    FloatArray,
    PayloadKind,
    Plan,
    Protocol,
    RandomSource,
    ReportChunk,
    RoundTask,
    UserData,
    jl_dimension,
    jl_estimate,
    jl_report,
    rr_debias,
    valid_payloads,
)
from fedldp.protocol.core.broadcast import described
from fedldp.protocol.heterogeneous import estimators as est
from fedldp.protocol.heterogeneous.flow import WEIGHTS_TEXT, HeteroParams, HeteroProtocol

__all__ = [
    "PROTOCOLS",
    "FrequencyParams",
    "HeteroFrequency",
    "jl_public_seed",
]


class FrequencyParams(HeteroParams):
    # the estimate is a k-vector (8 MiB at 2^20); the plan also caps the sign matrix, m·k
    domain_size: int = Field(ge=1, le=1 << 20, description="k: items are 0..k−1")
    m_at_least_s_rr: bool = Field(False, description="also enforce m ≥ ceil(S_RR) (§2.5)")


def jl_public_seed(seed: int) -> int:
    """The public seed of Alg 5's sign matrix, derived from the study seed (53 bits, JSON-safe)."""
    ss = np.random.SeedSequence(seed, spawn_key=(0x4A4C,))
    return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(11))


# --------------------------------------------------------------------------- Alg 5


class HeteroFrequency(HeteroProtocol[FrequencyParams]):
    """Alg 5 (§2.5, γ and m [FIX]): public JL sign matrix Φ = σ/√m, 1-bit RR of one coordinate.

    The plan sizes m from S_RR of all enrolled ε's (§2.9: enrollment must close first) and
    derives the public seed of σ from the study seed. Each user reports one item chosen uniformly
    at random from its samples (one uniform of its own stream, always drawn). The estimate is the
    raw p̂ (its ℓ∞ guarantee, §6 item 15); the simplex projection is a diagnostic. Error bar:
    §4.2(d) in ℓ∞, rigorous over Φ and the data."""

    name: ClassVar[str] = "hetero-frequency"
    broadcast_fields: ClassVar[Mapping[str, str]] = described(
        "m",
        "jl_seed",
        "k",
        m="dimension of the Johnson-Lindenstrauss projection (the index payload is in 0..m-1)",
    )
    summary: ClassVar[str] = (
        "Distribution over k items in ℓ∞ under per-user ε: Bassily–Smith JL frequency oracle, "
        "each user sends (row j, sign) for one item drawn from its samples."
    )
    source: ClassVar[str] = (
        "Aliakbarpour et al. 2025 (arXiv:2510.11895), Alg. 5, Thm 4.1 (γ and m corrected, "
        "spec §2.5)"
    )
    heterogeneity: ClassVar[str] = (
        "z̄ = Σ a_i z_i / Σ a_i, p̂ = Φᵀz̄, with z_i = ς_i c_i √m e_{j_i}, c_i = 1/tanh(ε_i/2) "
        "and a_i = tanh²(ε_i/2) (paper and inverse_variance); m is sized from S_RR of all enrolled "
        "ε's, so enrollment must close first. " + WEIGHTS_TEXT + " A user with several samples "
        "reports one of them chosen uniformly at random with its own stream (user-level ε_i-LDP)."
    )
    data_kind: ClassVar[DataKind] = "categorical"
    params_model = FrequencyParams
    population_probe: ClassVar[Mapping[str, Any]] = {"domain_size": 2}
    mechanism: ClassVar[est.Mechanism] = "jl"
    payload_kind: ClassVar[PayloadKind] = "index-sign"

    def payload_shape(self, params: FrequencyParams) -> tuple[int, ...]:
        return (2,)

    def public(self, params: FrequencyParams, run_eps: FloatArray, seed: int) -> JSON:
        k = params.domain_size
        s_rr = est.effective_sizes(run_eps)["S_RR"]
        m = jl_dimension(k, params.beta, s_rr, at_least_s_rr=params.m_at_least_s_rr)
        if m * k > JL_MAX_ENTRIES:
            raise ValueError(f"m·k = {m}·{k} is too large for the public sign matrix")
        return {"m": m, "jl_seed": jl_public_seed(seed), "k": k}

    def message(self, params: FrequencyParams, plan: Plan) -> JSON:
        return {key: plan.public[key] for key in ("m", "jl_seed", "k")}

    def report(
        self,
        params: FrequencyParams,
        task: RoundTask,
        data: UserData,
        eps: FloatArray,
        rng: RandomSource,
    ) -> FloatArray:
        m, seed, k = (int(task.broadcast[key]) for key in ("m", "jl_seed", "k"))
        values = np.asarray(data.values)
        if values.ndim != 1:
            raise ValueError("categorical data is one item per sample")
        u = np.asarray(rng.random(size=(data.n_users,)), dtype=np.float64)
        counts = data.counts
        pick = data.offsets[:-1] + np.minimum(np.floor(u * counts).astype(np.int64), counts - 1)
        j, sign = jl_report(values[pick], eps, m, seed, rng, d=k)
        return np.column_stack([j.astype(np.float64), sign])

    def check(
        self, params: FrequencyParams, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        ok = valid_payloads(task, payloads)
        p = np.nan_to_num(np.asarray(payloads, dtype=np.float64))
        m = int(task.broadcast["m"])
        j, sign = p[:, 0], p[:, 1]
        good = (np.floor(j) == j) & (j >= 0) & (j < m) & (np.abs(sign) == 1.0)
        return np.asarray(ok & good, dtype=np.bool_)

    bar_kind: ClassVar[str] = "hoeffding-jl"
    bar_norm: ClassVar[str] = "linf"

    def num_shape(self, params: FrequencyParams, broadcast: JSON) -> tuple[int, ...]:
        return (int(broadcast["m"]),)

    def add(
        self, params: FrequencyParams, broadcast: JSON, acc: est.Accumulator, chunk: ReportChunk
    ) -> None:
        m = int(broadcast["m"])
        c_i = rr_debias(chunk.epsilon)
        a = est.weights("jl", chunk.epsilon, params.weights)
        j = chunk.payloads[:, 0].astype(np.int64)
        z = chunk.payloads[:, 1] * c_i * math.sqrt(m)  # z_{i,j_i} = ς_i·c_i·√m (§1.3)
        acc.add_sparse(chunk.epsilon, a, c_i, j, z, m)

    def finish(
        self, params: FrequencyParams, broadcast: JSON, acc: est.Accumulator
    ) -> tuple[Any, float, JSON]:
        m, seed, k = (int(broadcast[key]) for key in ("m", "jl_seed", "k"))
        p_hat = jl_estimate(acc.mean(), m, k, seed)
        extra = {
            "projected": est.as_float_list(est.project_simplex(p_hat)),
            "m": m,
            "jl_seed": seed,
            "variance_bound": acc.sum_w2_spread2,
        }
        width = est.jl_half_width(acc.sum_w2_spread2, k, m, params.beta)
        return est.as_float_list(p_hat), width, extra


PROTOCOLS: tuple[Protocol[Any], ...] = (HeteroFrequency(),)

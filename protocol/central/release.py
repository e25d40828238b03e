"""The release flow both central estimators share (Zhao et al., NeurIPS 2024; spec
huber-user-level-dp.md §1.3, §9.1): one upload round of user-wise statistics, the server's noise
stream, the release ε, and the parameters and checks common to ``central-wme`` and
``central-huber`` (their estimators are in ``fedldp.protocol.central.protocols``).

**Trust model.** Unlike every local protocol of the catalogue, nothing is privatized on the client:
each participant sends its user-wise statistic, [its local mean (d values), its sample count m_i]
(spec §1.3, §9.1), in the clear, and the trusted server releases one user-level (ε, δ)-DP
estimate. The server keeps the n statistics in memory for the one aggregation call (the server
keeps contributions encrypted in their own table, never returned by any endpoint, and deletes
them and destroys their key when the study ends: docs/reliability.md, "Trust"); a round's
output, which is public, holds only the DP release and aggregate, public constants (n, N, the
noise constants), never a participant's statistic. The m_i are public information in the paper
(§1.1); they enter the noise of WME through max_i m_i/N.

**One low ε sets everyone's noise.** The release is (ε, δ)-DP at ε = min_i ε_i, the smallest
declared ε (``release_epsilon``, ``HETEROGENEITY``), charged to everyone; the noise scales like
1/ε, so a single participant with a tiny ε (10⁻³ among ε = 1) inflates every participant's
error a thousandfold (one such enrollee among 20 turned a ``central-wme`` estimate of a mean in
[−1, 1] into −1847). A server study should set ``epsilon_min`` (protocol.wire.StudyCreate) to
the smallest ε its release can live with; enrollment then refuses lower ones. A release whose
noise scale overflows (a subnormal ε) raises ValueError rather than publishing a null estimate.

**Rounds.** One upload round ("statistic", shape (d + 1,)) for both estimators: the WME's two
stages use the same users (no split into halves, §3.2) and run on the server (§9.1, the one-round
option); HLM is single-round (§9.1).

**Noise randomness.** Drawn on the server from
``default_rng(SeedSequence(seed, spawn_key=(0xCE, round)))`` where ``seed`` (the one ``plan``
receives) is the study's *secret noise seed*, not its public seed: the server draws it at random,
or takes the creator's ``noise_seed`` (which the swarm derives from its private seed, so that
``fedldp simulate`` reproduces the release), stores it apart and never shows it. Whoever knew it
could regenerate and remove the noise.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
from numpy.typing import NDArray
from pydantic import ConfigDict, Field

from fedldp.protocol.api import (
    JSON,
    BoolArray,
    FloatArray,
    IntArray,
    Params,
    Plan,
    Protocol,
    RandomSource,
    ReportChunk,
    Result,
    RoundPlan,
    RoundTask,
    Trust,
    UserData,
    check_epsilons,
    jsonable,
    valid_payloads,
)

__all__ = [
    "HETEROGENEITY",
    "MAX_ABS_MEAN",
    "MAX_COUNT",
    "NOISE_KEY",
    "CentralParams",
    "CentralProtocol",
    "release_epsilon",
    "server_rng",
]

NOISE_KEY = 0xCE
"""Spawn-key word of the server's noise stream: (NOISE_KEY, round index) under the study seed."""

MAX_ABS_MEAN = 1e12
"""Numerical sanity bound on a reported mean (not a privacy bound: neither estimator needs one)."""

MAX_COUNT = 1e12
"""Largest admissible sample count m_i."""

HETEROGENEITY = (
    "Central DP releases one (ε, δ) for everyone: the release uses ε = min_i ε_i over the "
    "enrolled participants and charges every participant that ε, so each gets at least its "
    "declared protection (spec §9.1 [PROPOSAL]); δ is the study parameter."
)

_TRUST_WARNING = (
    "central trust: every participant sends its local mean and sample count in the clear to the "
    "server, which must be trusted; only the released estimate is user-level (ε, δ)-DP, and the "
    "sample counts m_i are treated as public (spec §1.1, §9.1)"
)


def server_rng(seed: int, round_index: int) -> np.random.Generator:
    """The server's noise stream for a round, reproducible from the study seed."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(NOISE_KEY, round_index)))


def release_epsilon(epsilon: FloatArray) -> float:
    """The release's ε: the smallest declared ε_i (``HETEROGENEITY``)."""
    eps = check_epsilons(epsilon)
    if eps.ndim != 1 or eps.size < 2:
        raise ValueError(f"a central release needs at least 2 participants, got {eps.size}")
    return float(eps.min())


# --------------------------------------------------------------------------- parameters


class CentralParams(Params):
    """Parameters shared by the central protocols."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    delta: float = Field(
        1e-5,
        # ln(1/δ) <= 116: the calibrations divide by it and by its root (at δ = 1e-308 the
        # smooth-sensitivity β underflows and the release divides by zero)
        ge=1e-50,
        le=0.1,
        description="δ of the release's user-level (ε, δ)-DP guarantee",
    )


P = TypeVar("P", bound=CentralParams)


# --------------------------------------------------------------------------- shared flow


class CentralProtocol(Protocol[P]):
    """One upload round of user-wise statistics; the server releases in ``aggregate``."""

    dropout: ClassVar[str] = (
        "The release is computed from the responders' statistics alone (n and N are theirs, so "
        "the noise is calibrated to them); the ε released is still the smallest declared one."
    )
    population_rule: ClassVar[str] = (
        "at least 2 participants (a central release needs 2), whatever its parameters"
    )

    trust: ClassVar[Trust] = "central"
    heterogeneity: ClassVar[str] = HETEROGENEITY

    def dimension(self, params: P) -> int:
        return 1

    def extra_warnings(self, params: P) -> tuple[str, ...]:
        return ()

    def extra_public(self, params: P, epsilon: float) -> JSON:
        """Public constants of the release known at plan time."""
        return {}

    def plan(
        self, params: P, epsilon: FloatArray, metadata: Mapping[str, NDArray[Any]], seed: int
    ) -> Plan:
        eps = check_epsilons(epsilon)
        release = release_epsilon(eps)
        n, d = int(eps.size), self.dimension(params)
        warnings = [_TRUST_WARNING, *self.extra_warnings(params)]
        if float(eps.max()) > release:
            warnings.append(
                f"participants declared ε from {release:g} to {float(eps.max()):g}; the release "
                f"uses ε = {release:g} and charges it to everyone"
            )
        if params.delta >= 1.0 / n:
            warnings.append(f"δ = {params.delta:g} is not below 1/n = {1.0 / n:g}")
        cohort = np.arange(n, dtype=np.int64)
        rounds = (RoundPlan(0, "statistic", cohort, np.full(n, release), "statistic", (d + 1,)),)
        public: JSON = {
            "trust": "central",
            "seed": int(seed),
            "epsilon": release,
            "delta": params.delta,
            "d": d,
            "n": n,
        } | self.extra_public(params, release)
        return Plan(n, rounds, public, tuple(warnings))

    def broadcast(self, params: P, plan: Plan, round_index: int, outputs: Sequence[JSON]) -> JSON:
        if round_index != 0:
            raise ValueError(f"{self.name} has a single round 0, not {round_index}")
        return {
            "trust": "central",
            "statistic": "local mean of all samples, then the sample count",
            "d": plan.public["d"],
        }

    def privatize(
        self,
        params: P,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        """NOT a privatization: the user-wise statistic [local mean, m_i] sent in the clear."""
        d = self.dimension(params)
        values = np.asarray(data.values, dtype=np.float64)
        if values.ndim == 1 and d == 1:
            values = values[:, None]
        if values.ndim != 2 or values.shape[1] != d:
            raise ValueError(f"{self.name} needs samples of dimension {d}, got {values.shape[1:]}")
        means = data.user_means(values)
        counts = data.counts.astype(np.float64)[:, None]
        return np.asarray(np.concatenate((means, counts), axis=1), dtype=np.float64)

    def check(
        self, params: P, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        ok = valid_payloads(task, payloads)
        p = np.asarray(payloads, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            means_ok = np.all(np.abs(p[:, :-1]) <= MAX_ABS_MEAN, axis=1)
            m = p[:, -1]
            count_ok = (m >= 1) & (m <= MAX_COUNT) & (m == np.floor(m))
        return np.asarray(ok & means_ok & count_ok, dtype=np.bool_)

    def collect(self, params: P, chunks: Iterable[ReportChunk]) -> tuple[FloatArray, FloatArray]:
        """Every report's (means (n, d), counts (n,)), in slot order (held in memory only)."""
        d = self.dimension(params)
        slots: list[IntArray] = []
        rows: list[FloatArray] = []
        for chunk in chunks:
            slots.append(np.asarray(chunk.slots, dtype=np.int64))
            rows.append(np.asarray(chunk.payloads, dtype=np.float64).reshape(-1, d + 1))
        if not rows:
            raise ValueError("no reports to aggregate")
        order = np.argsort(np.concatenate(slots), kind="stable")
        table = np.concatenate(rows)[order]
        if table.shape[0] < 2:
            raise ValueError("a central release needs at least 2 reports")
        return table[:, :d], table[:, d]

    def aggregate(
        self,
        params: P,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        if round_index != 0:
            raise ValueError(f"{self.name} has a single round 0, not {round_index}")
        means, counts = self.collect(params, chunks)
        rng = server_rng(int(plan.public["seed"]), round_index)
        out = self.release(params, plan, means, counts, rng)
        if not np.all(np.isfinite(np.asarray(out["estimate"], dtype=np.float64))):
            # e.g. a subnormal ε: the noise scale overflows; a clean refusal, not a null estimate
            raise ValueError(
                f"the release is not finite: ε = {float(plan.public['epsilon']):g} (the smallest "
                "declared ε) is too small for the noise scale"
            )
        n, total = int(counts.size), int(counts.sum())
        common: JSON = {
            "n": n,
            "N": total,
            "balanced": bool(np.all(counts == counts[0])),
            "epsilon": float(plan.public["epsilon"]),
            "delta": params.delta,
            "d": self.dimension(params),
        }
        public: JSON = jsonable(common | out)
        return public

    def internal(
        self, params: P, plan: Plan, round_index: int, chunks: Sequence[ReportChunk]
    ) -> JSON:
        """``release_internals`` of the round's reports (simulation only)."""
        means, counts = self.collect(params, chunks)
        internal: JSON = jsonable(self.release_internals(params, plan, means, counts))
        return internal

    def release_internals(
        self, params: P, plan: Plan, means: FloatArray, counts: FloatArray
    ) -> JSON:
        """The release's data-dependent quantities that its public output leaves out
        (``Protocol.internal``: the in-process simulator's diagnostics, never served)."""
        return {}

    @abstractmethod
    def release(
        self,
        params: P,
        plan: Plan,
        means: FloatArray,
        counts: FloatArray,
        rng: np.random.Generator,
    ) -> JSON:
        """The round's public output from every user's (mean, count), with the server's noise."""

    def finalize(self, params: P, plan: Plan, outputs: Sequence[JSON]) -> Result:
        if len(outputs) != 1:
            raise ValueError(f"{self.name} finalizes after its single round")
        out = dict(outputs[0])
        raw = out.pop("estimate")
        if raw is None or any(v is None for v in raw):  # jsonable turned a non-finite value None
            raise ValueError(f"{self.name}: the release is not finite")
        extra = tuple(str(w) for w in out.pop("warnings", []))
        estimate: float | list[float] = (
            float(raw[0]) if self.data_kind == "scalar" else [float(v) for v in raw]
        )
        diagnostics: JSON = out | {"trust": "central"}
        warnings = tuple(dict.fromkeys(plan.warnings + extra))  # each warning once, in order
        return Result(estimate, None, diagnostics, warnings)

"""The classic frequency oracles as catalogue protocols: ``classic-grr``, ``classic-sue``,
``classic-oue``, ``classic-blh``, ``classic-olh``, ``classic-hr``, ``classic-ss`` (the papers:
``fedldp.protocol.classic``; the theory: ``fedldp.protocol.classic.oracles``).

Each is one round, one report per user, every user at its own ε_i (the ε it enrolled with,
charged in full). A user with several samples reports one of them, chosen uniformly with its own
stream, so the report is ε_i-LDP for its whole local dataset (user-level privacy). The server
de-biases each report with its sender's (p_i, q_i) and combines them with the weights of
``oracles`` (``weights``: ``inverse-variance``, the default, or ``uniform``): at equal ε both are
exactly the textbook estimator of Wang et al. 2017 (eq. (1) over n). The estimate is the unbiased
one (it may leave [0, 1]); ``projected`` is its Euclidean projection onto the simplex.

Diagnostics: ``predicted_mse`` is Σ_x Var[f̂_x], the paper's exact variance (eq. (2), the
f(1 − p − q)/(p − q) term included, which sums to a data-free constant) for the weighted
estimate of a fixed population: Σ_i w_i²·(k·V_i + (1 − p_i − q_i)/(p_i − q_i)) / (Σ_i w_i)²; a
population drawn from a law f and compared with f adds ``sampling_factor``·Σ_x f_x(1 − f_x)
(``oracles``). The error bar is CLT in ℓ∞ with Bonferroni over the k items, from the bound
Var[z_i[x]] ≤ 1/(4(p_i − q_i)²) (a Bernoulli indicator's variance is at most 1/4), which holds
for a fixed population and for one drawn from a law alike.

The reports (payloads) and what the server accepts (``check``; ``report_bounds`` is the range of
every entry):

* GRR: the reported item, an integer in 0..k−1;
* SUE, OUE: the k perturbed bits of the one-hot vector, each 0 or 1;
* SS: the chosen subset as k bits, exactly d_i of them set;
* BLH, OLH: (a_0, …, a_{L−1}, b, y): the user's hash function of ``hashing`` and the perturbed
  hash value, integers in 0..g_i − 1;
* HR: a column y of the Hadamard matrix of order K, an integer in 0..K − 1.

**Attacks** (``fedldp.client.behaviour``; every attacker's report passes ``check``). A report Y
of a sender at (p, q) adds z[x] = (1[x ∈ S(Y)] − q)/(p − q) to the estimate of each item x
(times its weight), whatever it supports besides: how much a report raises item x depends only
on whether it supports x.

* ``output`` (``output_attack_reports``): the admissible report whose support is largest from
  the top of the domain, i.e. that maximizes the estimated frequency of the top item k − 1,
  then of k − 2, and so on down (lexicographically: it compares the supports' indicator vectors
  from item k − 1 down). When some admissible report supports every item it is that one, which
  raises every f̂_x by its most at once, (1 − q)/(p − q), and so the total Σ_x f̂_x: unary
  encoding's all-ones vector (the generic upper end of ``report_bounds``, no hook), local
  hashing's constant hash a = 0 with y = b = 0 (the generic all-(g − 1) report supports only the
  items of popcount ≡ 0 mod g), HR's column 0, all +1 (the generic column K − 1 supports only
  about half the items). Otherwise: GRR's item k − 1 (the generic report, no hook) and SS's d_i
  items k − d_i..k − 1 (the generic all-ones vector is not a d_i-subset, ``check`` refuses it).
* ``max-gain`` (``max_gain_reports``; Cao, Jia, Gong, USENIX Security 2021, maximal gain
  attack): the admissible report that maximizes the targets' total estimated frequency
  Σ_{t ∈ T} f̂_t over the r distinct targets T, i.e. G = (|S(Y) ∩ T| − r·q)/(p − q) per attacker:
  its support holds as many targets as the oracle allows (``oracles.max_gain_support``: one for
  GRR, min(r, d_i) for SS, all r for the others). ``promote`` builds it per oracle; among the
  reports of that gain it draws one from the attacker's stream as each docstring says.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from fedldp.protocol.api import (
    JSON,
    BoolArray,
    DataKind,
    ErrorBar,
    FloatArray,
    IntArray,
    Params,
    PayloadKind,
    Plan,
    Protocol,
    RandomSource,
    ReportChunk,
    Result,
    RoundPlan,
    RoundTask,
    UserData,
    random_blocks,
    valid_payloads,
    z_quantile,
)
from fedldp.protocol.classic import oracles as th

__all__ = [
    "LEVEL",
    "ClassicFrequency",
    "FrequencyParams",
    "one_if_equal",
    "pick_uniforms",
    "project_simplex",
    "sample_items",
]

LEVEL = 0.95
"""The error bar's confidence level."""

_UNIFORMS = 1 << 15
"""Uniforms drawn per block of users (``ClassicFrequency.privatize``)."""


class FrequencyParams(Params):
    domain_size: int = Field(ge=2, le=1 << 20, description="k: items are 0..k−1")
    weights: Literal["inverse-variance", "uniform"] = Field(
        "inverse-variance",
        description="how reports of unequal ε are combined: by the inverse of their variance "
        "(minimum variance) or uniformly (the plain average)",
    )


def sample_items(data: UserData, u: FloatArray, k: int) -> IntArray:
    """One item per user, its sample ⌊u·m_i⌋ (u: one uniform of the user's stream per user);
    ValueError when some item is outside 0..k−1."""
    values = np.asarray(data.values)
    if values.ndim != 1:
        raise ValueError("categorical data is one item per sample")
    if values.size == data.n_users:  # one sample each (counts ≥ 1): u picks it, nothing to do
        items = np.asarray(values, dtype=np.int64)  # read only: no copy
    else:
        pick = np.minimum(np.floor(u * data.counts).astype(np.int64), data.counts - 1)
        items = np.asarray(values[data.offsets[:-1] + pick], dtype=np.int64)
    if items.size and (items.min() < 0 or items.max() >= k):
        raise ValueError(f"items must lie in 0..{k - 1}")
    return items


def pick_uniforms(data: UserData, rng: RandomSource) -> FloatArray:
    """The uniform of each user's stream that picks its sample (``sample_items``), drawn after
    the report's: only when some user has several samples, as one sample needs none. A user's
    report is thus a function of its own draws whatever the block (the report's draws come
    first, their number fixed by the parameters)."""
    if np.asarray(data.values).size == data.n_users:  # one sample each: nothing to pick
        return np.zeros(data.n_users)
    return np.asarray(rng.random((data.n_users, 1))[:, 0], dtype=np.float64)


def project_simplex(v: FloatArray) -> FloatArray:
    """The Euclidean projection of v onto the probability simplex (sort-based, Held et al.)."""
    u = np.sort(v)[::-1]
    cumulative = np.cumsum(u) - 1.0
    ranks = np.arange(1, v.size + 1)
    last = int(np.nonzero(u - cumulative / ranks > 0)[0][-1])
    return np.asarray(np.maximum(v - cumulative[last] / (last + 1), 0.0), dtype=np.float64)


class ClassicFrequency(Protocol[FrequencyParams]):
    """The shared round of the pure frequency oracles (module docstring). A subclass names its
    ``oracle`` and implements its report (``report``), what the server accepts (``admissible``,
    ``report_bounds``) and the weighted support counts Σ_i c_i·1[x ∈ S(Y_i)] (``support``)."""

    oracle: ClassVar[th.Oracle]
    data_kind: ClassVar[DataKind] = "categorical"
    params_model = FrequencyParams
    payload_kind: ClassVar[PayloadKind] = "scalar"
    population_probe: ClassVar[Mapping[str, Any]] = {"domain_size": 2}
    population_rule: ClassVar[str] = "one participant: the estimator is defined for any n ≥ 1"
    heterogeneity: ClassVar[str] = (
        "each report de-biased with its sender's (p_i, q_i); f̂ = Σ w_i z_i / Σ w_i with "
        "w_i = (p_i − q_i)²/(q_i(1 − q_i)), the inverse of the report's variance at frequency "
        "0 (minimum variance; weights=uniform: the plain average); equal ε gives the textbook "
        "estimator. A user with several samples reports one, chosen with its own stream."
    )
    broadcast_fields: ClassVar[Mapping[str, str]] = {"k": "the number of items (0..k−1)"}

    def payload_shape(self, params: FrequencyParams) -> tuple[int, ...]:
        return ()

    def draws(self, params: FrequencyParams) -> int:
        """Uniforms each user draws: the report's, then the one that picks its sample
        (``pick_uniforms``)."""
        return 3

    def plan(
        self,
        params: FrequencyParams,
        epsilon: FloatArray,
        metadata: Mapping[str, NDArray[Any]],
        seed: int,
    ) -> Plan:
        n = int(epsilon.size)
        if n < 1:
            raise ValueError(f"{self.name} needs at least 1 participant")
        cohort = np.arange(n, dtype=np.int64)
        shape = self.payload_shape(params)
        round_plan = RoundPlan(0, "report", cohort, epsilon.copy(), self.payload_kind, shape)
        return Plan(n, (round_plan,))

    def broadcast(
        self, params: FrequencyParams, plan: Plan, round_index: int, outputs: Sequence[JSON]
    ) -> JSON:
        return {"k": params.domain_size}

    def privatize(
        self,
        params: FrequencyParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        """The reports, a block of users at a time (``random_blocks``, about 256 KiB of
        uniforms a block): each block's temporaries stay in cache and are reused, where arrays
        of the population's size would be fresh memory, which the kernel hands out a page at a
        time (a page fault every 4 KiB: most of a GRR report's cost at 10^5 users, measured)."""
        k = int(task.broadcast["k"])
        n = data.n_users
        per_user = self.draws(params) - 1
        blocks = random_blocks(rng, n, per_user, max(1, _UNIFORMS // per_user))
        items = sample_items(data, pick_uniforms(data, rng), k)
        eps = np.asarray(epsilon, dtype=np.float64)
        if self.broadcasts_epsilon:
            eps = one_if_equal(eps)
        out = np.empty((n, *task.payload_shape))
        for r0, u in blocks:
            r1 = r0 + u.shape[0]
            out[r0:r1] = self.report(k, items[r0:r1], eps if eps.size == 1 else eps[r0:r1], u)
        return out

    broadcasts_epsilon: ClassVar[bool] = True
    """Whether ``report`` takes one ε for a block whose users share it (shape (1,), broadcast
    against the users): the mechanism's constants are then computed once, not per user."""

    def report(self, k: int, items: IntArray, epsilon: FloatArray, u: FloatArray) -> FloatArray:
        """The payloads of users holding ``items`` at ``epsilon``, from their uniforms ``u``."""
        raise NotImplementedError

    def admissible(self, k: int, epsilon: FloatArray, payloads: FloatArray) -> BoolArray:
        """Which finite payloads of the right shape an honest user can send."""
        raise NotImplementedError

    def promote(
        self, k: int, targets: IntArray, epsilon: FloatArray, rng: RandomSource
    ) -> FloatArray:
        """The max-gain reports of attackers at ``epsilon`` (one row each) for the distinct
        ``targets`` (module docstring, "Attacks"), random numbers from ``rng``."""
        raise NotImplementedError

    def max_gain_reports(
        self,
        params: FrequencyParams,
        task: RoundTask,
        targets: tuple[int, ...],
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        """Cao et al.'s maximal gain attack: the admissible reports that maximize the targets'
        total estimated frequency Σ_{t ∈ T} f̂_t, (|S(Y) ∩ T| − r·q_i)/(p_i − q_i) per attacker
        (module docstring, "Attacks"; ``promote`` per oracle). ValueError for a target outside
        0..k − 1; repeated targets count once."""
        k = int(task.broadcast["k"])
        t = np.unique(np.asarray(targets, dtype=np.int64))
        if t.size == 0 or t[0] < 0 or t[-1] >= k:
            raise ValueError(f"target items must lie in [0, {k})")
        return self.promote(k, t, np.asarray(epsilon, dtype=np.float64), rng)

    def support(
        self, k: int, epsilon: FloatArray, payloads: FloatArray, c: FloatArray
    ) -> FloatArray:
        """Σ_i c_i·1[x ∈ S(Y_i)] for x = 0..k−1."""
        raise NotImplementedError

    def check(
        self, params: FrequencyParams, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        ok = valid_payloads(task, payloads)
        p = np.where(
            ok.reshape((-1,) + (1,) * (payloads.ndim - 1)), np.asarray(payloads, np.float64), 0.0
        )
        good = self.admissible(params.domain_size, np.asarray(epsilon, np.float64), p)
        return np.asarray(ok & good, dtype=np.bool_)

    def aggregate(
        self,
        params: FrequencyParams,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        k = params.domain_size
        support = np.zeros(k)
        offset = weight = sum_w2 = sum_w2_var = sum_w2_bar = 0.0
        count = 0
        # per ε of a one-ε chunk: c and the five sums of one user (chunks repeat their ε)
        known: dict[float, tuple[FloatArray, float, float, float, float, float]] = {}
        for chunk in chunks:
            eps = np.asarray(chunk.epsilon, dtype=np.float64)
            n = int(eps.size)
            one = one_if_equal(eps)  # users of one ε: every constant computed once
            times = n if one.size == 1 < n else 1
            terms = known.get(float(one[0])) if one.size == 1 else None
            if terms is None:
                p, q = th.support_probabilities(self.oracle, one, k)
                gap = p - q
                w = th.user_weights(p, q, params.weights)
                terms = (
                    w / gap,
                    float(np.sum(w * q / gap)),
                    float(np.sum(w)),
                    float(np.sum(w**2)),
                    float(np.sum(w**2 * th.summed_variance(p, q, k))),
                    float(np.sum(w**2 / (4.0 * gap**2))),
                )
                if one.size == 1:
                    known[float(one[0])] = terms
            c = terms[0]
            c_all = np.broadcast_to(c, (n,)) if times > 1 else c  # a view: no array of n
            support += self.support(k, eps, chunk.payloads, c_all)
            offset += terms[1] * times
            weight += terms[2] * times
            sum_w2 += terms[3] * times
            sum_w2_var += terms[4] * times
            sum_w2_bar += terms[5] * times
            count += int(chunk.slots.size)
        if count == 0:
            raise ValueError("no reports to aggregate")
        return {
            "frequencies": ((support - offset) / weight).tolist(),
            "count": count,
            "predicted_mse": sum_w2_var / weight**2,
            "sampling_factor": sum_w2 / weight**2,
            "bar_variance": sum_w2_bar / weight**2,
        }

    def finalize(self, params: FrequencyParams, plan: Plan, outputs: Sequence[JSON]) -> Result:
        (out,) = outputs
        k = params.domain_size
        estimate = [float(f) for f in out["frequencies"]]
        half = z_quantile(1.0 - (1.0 - LEVEL) / k) * math.sqrt(float(out["bar_variance"]))
        bar = ErrorBar(half, LEVEL, "clt-bonferroni", approximate=True, norm="linf")
        diagnostics: JSON = {
            "n": int(out["count"]),
            "weights": params.weights,
            "predicted_mse": float(out["predicted_mse"]),
            "sampling_factor": float(out["sampling_factor"]),
            "projected": project_simplex(np.asarray(estimate)).tolist(),
        }
        return Result(estimate, bar, diagnostics)


def one_if_equal(epsilon: FloatArray) -> FloatArray:
    """``epsilon[:1]`` when every entry equals it (one ε for the block), else ``epsilon``."""
    if epsilon.size > 1 and epsilon.min() == epsilon.max():
        return epsilon[:1]
    return epsilon


def integral_in(x: FloatArray, high: FloatArray | float) -> BoolArray:
    """x is an integer in 0..high − 1 (elementwise; high broadcasts)."""
    return np.asarray((x == np.floor(x)) & (x >= 0) & (x < high), dtype=np.bool_)

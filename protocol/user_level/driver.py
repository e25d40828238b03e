"""The shared driver of the multi-dimensional user-level protocols (Zhao et al. 2024,
arXiv:2405.17079, Alg. 2; spec user-level-ldp.md §3.3–§3.6): ``ComponentProtocol``.

A protocol names its components (count, bounds, the client's per-user component averages) and
decodes; the driver plans ``2·T`` rounds for T sequential invocations (T = 1 for the means of
``multi_d``, t0 for the gradient rounds of ``sgd``), broadcasts, privatizes and
aggregates on the engine of ``components``. Also the Kashin frames every ℓ2 protocol shares,
cached per (d, seed, K), and the users' sample blocks (plain and labeled)."""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Annotated, Any, ClassVar, TypeVar

import numpy as np
from numpy.typing import NDArray
from pydantic import ConfigDict, Field

from fedldp.protocol.api import (
    JSON,
    FloatArray,
    IntArray,
    Params,
    Plan,
    Protocol,
    RandomSource,
    ReportChunk,
    RoundPlan,
    RoundTask,
    UserData,
    check_epsilons,
    cohort_permutation,
    split_sizes,
)
from fedldp.protocol.core.base.bounds import EpsilonParam, Level
from fedldp.protocol.core.broadcast import described
from fedldp.protocol.mechanisms.transforms import KashinFrame, kashin_frame
from fedldp.protocol.user_level import components as comp
from fedldp.protocol.user_level import two_stage as ts
from fedldp.protocol.user_level.layout import (
    Families,
    Layout,
    assign,
    choose_layout,
    reference_epsilon,
)

__all__ = [
    "ComponentParams",
    "ComponentProtocol",
    "cached_frame",
    "component_fields",
    "kashin_public",
    "labeled_sample_block",
    "study_frame",
    "user_sample_block",
]


MAX_COMPONENTS = 1 << 14
"""Upper bound on C, the components of one invocation (e.g. 2d for Kashin): keeps every
broadcast and report of a study a reasonable size."""


MAX_SAMPLES = 1 << 20
"""The largest samples_per_user an Alg-2 protocol takes."""

KashinConstant = Annotated[float, Field(ge=0.5, le=100)]
"""K of the Kashin bound ‖a(x)‖∞ <= K‖x‖₂/√d. Below 1/2 no frame reaches it: the frames
(``fedldp.protocol.mechanisms.transforms``) have N <= 4d rows and UᵀU = I, so every a with
Uᵀa = x has ‖a‖₂ >= ‖x‖₂ and ‖a‖∞ >= ‖x‖₂/√N >= (1/2)‖x‖₂/√d whatever the seed."""


class ComponentParams(Params):
    """Parameters every Alg-2 based protocol takes."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    samples_per_user: int = Field(ge=1, le=MAX_SAMPLES, description="m: samples each user uses")
    reference_epsilon: EpsilonParam | None = Field(
        None,
        description="ε that picks the regime and grouping (default: the median enrolled ε); "
        "every user then spends the same fraction of its own ε",
    )
    use_full_budget: bool = Field(
        False,
        description="medium regime: spend ε/r_g per component instead of the paper's 1 "
        "(§3.3 [PROPOSAL], non-paper)",
    )
    level: Level = Field(0.95, description="level of the error bar")


P = TypeVar("P", bound=ComponentParams)


def user_sample_block(data: UserData, m: int, d: int | None) -> NDArray[Any]:
    """The users' first m samples as (n, m) (scalars / items) or (n, m, d) (vectors); ValueError
    naming the problem if a user holds fewer than m samples or the samples have the wrong shape."""
    values = np.asarray(data.values)
    want = (d,) if d is not None else ()
    if values.shape[1:] != want:
        shape = "scalars or items" if d is None else f"vectors of dimension {d}"
        raise ValueError(f"this protocol takes {shape}, got samples of shape {values.shape[1:]}")
    short = data.counts < m
    if np.any(short):
        raise ValueError(
            f"every user needs samples_per_user = {m} samples; "
            f"{int(short.sum())} user(s) hold fewer (e.g. {int(data.counts[short][0])})"
        )
    kept = data.truncated(m)
    block = np.asarray(kept.values).reshape(kept.n_users, m, *want)
    if block.dtype.kind == "f" and not np.all(np.isfinite(block)):
        raise ValueError("data must be finite")
    return block


def labeled_sample_block(data: UserData, m: int, d: int) -> tuple[FloatArray, FloatArray]:
    """The users' first m labeled samples: features (n, m, d) and labels (n, m)."""
    if data.labels is None:
        raise ValueError("this protocol takes labeled samples (features and a label)")
    x = np.asarray(user_sample_block(data, m, d), dtype=np.float64)
    kept = data.truncated(m)
    assert kept.labels is not None
    y = np.asarray(kept.labels, dtype=np.float64).reshape(x.shape[0], m)
    if not np.all(np.isfinite(y)):
        raise ValueError("labels must be finite")
    return x, y


@lru_cache(maxsize=16)
def cached_frame(d: int, seed: int, k_const: float) -> KashinFrame:
    """The public Kashin frame of a study (built once per process and kept)."""
    return kashin_frame(d, seed, k_const)


def kashin_public(d: int, seed: int, k_const: float) -> JSON:
    """What a plan publishes about its Kashin frame: the seed it is drawn from and its calibrated
    constant (a fingerprint: a client that rebuilds a different frame finds out)."""
    return {"frame_seed": seed, "kashin_observed": cached_frame(d, seed, k_const).observed}


def study_frame(d: int, k_const: float, public: JSON) -> KashinFrame:
    """The study's frame rebuilt from its public seed; ValueError if it is not the frame the plan
    was made with (e.g. a different numpy random stream on this side)."""
    frame = cached_frame(d, int(public["frame_seed"]), k_const)
    if "kashin_observed" in public and frame.observed != float(public["kashin_observed"]):
        raise ValueError(
            "this side rebuilt a different Kashin frame from the study seed than the server's "
            f"(calibrated constant {frame.observed!r} != {public['kashin_observed']!r})"
        )
    return frame


def component_fields(*keys: str) -> dict[str, str]:
    """The ``broadcast_fields`` of an Alg-2 protocol: the invocation's fields every one of them
    broadcasts, then ``keys`` of its own, then each component's bounds."""
    return described(
        "invocation", "layout", "families", "reference_epsilon", "n_ref", "c_star",
        *keys, "sensitivity", "lo", "hi",
    )  # fmt: skip


class ComponentProtocol(Protocol[P]):
    """Driver of T sequential Alg-2 invocations (rounds 2t: stage I, 2t + 1: stage II).

    The users are split into T disjoint public groups (§3.7 step 2; T = 1 gives all users); each
    invocation has its own §3.3 layout (the n in C ln n is its own user count) and half splits.
    N_ref (§2.7) is the total enrolment n. Subclasses give the components and the decoding.
    """

    dropout: ClassVar[str] = (
        "Stage one and stage two of each invocation have disjoint cohorts. A component's "
        "interval is the argmax of its stage-one responders' histograms; its estimate the "
        "inverse-variance mean of its stage-two responders, renormalised over them, with the "
        "error bar from their variances. A component with no stage-two report fails the study."
    )
    population_rule: ClassVar[str] = (
        "at least 2 users in every group of every stage, and in every stage-one group the §1.5 "
        "score Σ min(ε_i², 1) of user-mean when it has more than 2 bins (samples_per_user > "
        "16): so the number of user groups, which the dimension and the privacy regime of the "
        "reference ε fix, times what one Alg-1 call needs (the plan's refusal names it); "
        "min_participants takes samples_per_user > 16, the most demanding (fewer samples need "
        "fewer users)"
    )
    population_probe: ClassVar[Mapping[str, Any]] = {"samples_per_user": MAX_SAMPLES}

    @abstractmethod
    def n_components(self, params: P, public: JSON) -> int:
        """C: the components of one invocation, given the plan's public constants."""

    @abstractmethod
    def families(self, params: P, c: int, n_ref: int, call_eps_sq: float) -> Families:
        """The components' Alg-1 designs; ``call_eps_sq`` is Σ ε_c,i² over the users of one Alg-1
        call, averaged over the calls (the n_c·ε_c² of the heavy-tail Δ, §3.6 [PROPOSAL])."""

    @abstractmethod
    def component_values(self, params: P, broadcast: JSON, data: UserData) -> FloatArray:
        """Client side: each user's C component averages (n, C) at this round's broadcast."""

    def invocations(self, params: P, eps: FloatArray, eps_ref: float, c: int) -> tuple[int, str]:
        """T, the number of sequential invocations, and a warning if it had to be adjusted."""
        return 1, ""

    def invocation_message(self, params: P, plan: Plan, t: int, outputs: Sequence[JSON]) -> JSON:
        """Public inputs of invocation t beyond the layout (e.g. the model θ_t)."""
        return {}

    def public_extras(self, params: P, eps: FloatArray, eps_ref: float, seed: int) -> JSON:
        """Public constants fixed at planning (e.g. the Kashin frame's seed, a bin grid)."""
        return {}

    # ------------------------------------------------------------------ plan

    def plan(
        self,
        params: P,
        epsilon: FloatArray,
        metadata: Mapping[str, NDArray[Any]],
        seed: int,
    ) -> Plan:
        eps = check_epsilons(epsilon)
        n = int(eps.size)
        if n < 2:
            raise ValueError(f"this protocol needs at least 2 participants, got {n}")
        eps_ref = reference_epsilon(eps, params.reference_epsilon)
        extras = self.public_extras(params, eps, eps_ref, seed)
        c = self.n_components(params, extras)
        if not 1 <= c <= MAX_COMPONENTS:
            raise ValueError(f"{c} components per invocation; at most {MAX_COMPONENTS} allowed")
        n_invocations, note = self.invocations(params, eps, eps_ref, c)
        if n < 2 * n_invocations:
            raise ValueError(
                f"this protocol needs at least {2 * n_invocations} participants, got {n}"
            )
        order = cohort_permutation(n, seed, 0x5E)
        bounds = np.concatenate(([0], np.cumsum(split_sizes(n, n_invocations))))
        rounds: list[RoundPlan] = []
        invocations: list[JSON] = []
        warnings: list[str] = [note] if note else []
        for t in range(n_invocations):
            slots = order[bounds[t] : bounds[t + 1]]
            layout = choose_layout(c, eps_ref, int(slots.size), params.use_full_budget)
            a = assign(slots, layout.n_groups, seed, 0xA2, t)
            fractions = layout.charge_fractions()
            charge_one = eps[a.stage_one] * fractions[a.group_one]
            charge_two = eps[a.stage_two] * fractions[a.group_two]
            per_comp_sq = np.concatenate(
                (
                    (charge_one / layout.counts[a.group_one]) ** 2,
                    (charge_two / layout.counts[a.group_two]) ** 2,
                )
            )
            families = self.families(params, c, n, float(per_comp_sq.sum()) / layout.n_groups)
            warnings += _feasibility(layout, families.n_bins, charge_one, a.group_one, n, t)
            prefix = "" if n_invocations == 1 else f"round-{t}-"
            r, b = layout.r_max, families.n_bins
            rounds.append(
                RoundPlan(
                    2 * t,
                    prefix + "stage-1",
                    a.stage_one,
                    charge_one,
                    "histogram",
                    (r, b),
                    a.group_one,
                    layout.counts[a.group_one],
                )
            )
            rounds.append(
                RoundPlan(
                    2 * t + 1,
                    prefix + "stage-2",
                    a.stage_two,
                    charge_two,
                    "vector",
                    (r,),
                    a.group_two,
                    layout.counts[a.group_two],
                )
            )
            invocations.append(
                {
                    "layout": layout.as_json(),
                    "families": families.as_json(),
                    "n_users": int(slots.size),
                }
            )
        public: JSON = {
            "reference_epsilon": eps_ref,
            "n_ref": n,
            "c_star": ts.c_star(n),
            "invocations": invocations,
            **extras,
        }
        return Plan(n, tuple(rounds), public, tuple(dict.fromkeys(warnings)))

    # ------------------------------------------------------------------ rounds

    @staticmethod
    def _parts(plan_public: JSON, t: int) -> tuple[Layout, Families]:
        inv = plan_public["invocations"][t]
        return Layout.from_json(inv["layout"]), Families.from_json(inv["families"])

    def broadcast(self, params: P, plan: Plan, round_index: int, outputs: Sequence[JSON]) -> JSON:
        t, stage = divmod(round_index, 2)
        if not 0 <= t < len(plan.public["invocations"]):
            raise ValueError(f"{self.name} has no round {round_index}")
        inv = plan.public["invocations"][t]
        message: JSON = {
            "invocation": t,
            "layout": inv["layout"],
            "families": inv["families"],
            **{k: v for k, v in plan.public.items() if k != "invocations"},
            **self.invocation_message(params, plan, t, outputs),
        }
        if stage == 0:
            return message | {"sensitivity": ts.STAGE_ONE_SENSITIVITY}
        if len(outputs) <= 2 * t:
            raise ValueError(f"round {round_index} needs the output of round {2 * t}")
        first = outputs[2 * t]
        return message | {"lo": first["lo"], "hi": first["hi"]}

    def privatize(
        self,
        params: P,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        values = self.component_values(params, task.broadcast, data)
        return self.privatize_components(params, task, values, epsilon, group, rng)

    def privatize_components(
        self,
        params: P,
        task: RoundTask,
        values: FloatArray,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        """The client step from the users' component averages (n, C)."""
        layout = Layout.from_json(task.broadcast["layout"])
        families = Families.from_json(task.broadcast["families"])
        if task.round % 2 == 0:
            return comp.stage_one_reports(values, layout, families, group, epsilon, rng)
        return comp.stage_two_reports(values, layout, families, task.broadcast, group, epsilon, rng)

    def report_bounds(
        self, params: P, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        """Both stages' messages carry Laplace noise: ``components.report_bounds``."""
        return comp.report_bounds(task.broadcast, task.round % 2, group, epsilon)

    def aggregate(
        self,
        params: P,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        t, stage = divmod(round_index, 2)
        layout, families = self._parts(plan.public, t)
        planned = plan.rounds[round_index]
        if stage == 0:
            return comp.aggregate_stage_one(
                layout, families, planned.epsilon, planned.groups(), chunks
            )
        return comp.aggregate_stage_two(layout, families, broadcast, chunks)

    @staticmethod
    def component_estimate(outputs: Sequence[JSON], t: int) -> tuple[FloatArray, FloatArray]:
        """θ̂ and the per-component predicted variances of invocation t."""
        out = outputs[2 * t + 1]
        return (
            np.asarray(out["estimate"], dtype=np.float64),
            np.asarray(out["predicted_mse"], dtype=np.float64),
        )

    def stage_diagnostics(self, plan: Plan, outputs: Sequence[JSON], t: int) -> JSON:
        """Regime, grouping and stage-I intervals of invocation t (for the result)."""
        layout, families = self._parts(plan.public, t)
        first, second = outputs[2 * t], outputs[2 * t + 1]
        return {
            "regime": layout.regime,
            "groups": layout.n_groups,
            "components": layout.n_components,
            "components_per_group": int(layout.r_max),
            "charge_fraction": float(layout.charge_fractions().max()),
            "n_bins": families.n_bins,
            "k_hat": first["k_hat"],
            "stage_one_messages": int(np.sum(first["n_reports"])),
            "stage_two_messages": int(np.sum(second["n_reports"])),
        }


def _feasibility(
    layout: Layout,
    n_bins: int,
    charge_one: FloatArray,
    group_one: IntArray,
    n_total: int,
    t: int,
) -> list[str]:
    """The §1.5 check on every Alg-1 call of an invocation; the weakest group decides (all
    components of a group share its stage-I users)."""
    if n_bins <= 2:
        return []
    eps_c = charge_one / layout.counts[group_one]
    scores = np.bincount(group_one, np.minimum(eps_c**2, 1.0), minlength=layout.n_groups)
    worst = int(np.argmin(scores))
    score = float(scores[worst])
    where = f"invocation {t}, " if t else ""
    detail = (
        f"the weakest of the {layout.n_groups} groups ({where}{layout.regime}-privacy regime, "
        f"{int(layout.counts[worst])} component(s)) has stage-one score Σ min(ε_c², 1) = "
        f"{score:.1f} (user-level-ldp.md §1.5); {ts.MIN_SCORE:g} is required and "
        f"{ts.FEASIBLE_SCORE:g} recommended with {n_bins} bins"
    )
    if score < ts.MIN_SCORE:
        per_group = ts.MIN_SCORE / max(score, 1e-12)
        raise ValueError(
            f"infeasible plan: {detail}. Enroll about {math.ceil(per_group * n_total)} "
            f"participants in total (now {n_total}), raise their ε, or use fewer dimensions"
        )
    if score < ts.FEASIBLE_SCORE:
        return [f"{detail}; the interval search may fail with probability of order 1%"]
    return []

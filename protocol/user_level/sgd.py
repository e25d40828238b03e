"""Stochastic optimization by gradient rounds under user-level LDP (Zhao et al. 2024,
arXiv:2405.17079, Alg 3) as the catalogue protocol ``user-sgd``, on the Alg-2 engine.

Spec: user-level-ldp.md §3.7, §3.11, §5.3. Every user holds m labeled samples (x_ij ∈ R^d, y_ij);
see ``fedldp.protocol.user_level.driver.ComponentProtocol`` for rounds, grouping, the per-user ε
rule and the ledger. t0 sequential invocations on disjoint user groups; in invocation t the users
compute per-sample gradients at the broadcast θ_t, clip each to ℓ2 norm D, and privatize their
average through Alg 2-K (Kashin, default) or Alg 2 (ℓ∞); the server decodes the gradient ĝ_t and
steps θ_{t+1} = Π(θ_t − η ĝ_t) onto the ℓ2 ball of the parameter set.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from fedldp.protocol.api import (
    JSON,
    DataKind,
    FloatArray,
    Plan,
    Protocol,
    ReportChunk,
    Result,
    UserData,
)
from fedldp.protocol.core.base.bounds import Scale
from fedldp.protocol.mechanisms.transforms import KashinFrame
from fedldp.protocol.user_level import two_stage as ts
from fedldp.protocol.user_level.driver import (
    ComponentParams,
    ComponentProtocol,
    KashinConstant,
    component_fields,
    kashin_public,
    labeled_sample_block,
    study_frame,
)
from fedldp.protocol.user_level.layout import Families, typical_score

__all__ = [
    "PROTOCOLS",
    "SgdParams",
    "UserSgd",
    "sgd_rounds",
]


MAX_ROUNDS = 200
"""The most gradient rounds t0 a study runs (two server rounds each), given or by the §3.7 rule:
with 2/(ηγ) <= 200 the rule's t0 stays below 200·ln(R0γ√(nm)/D) <= 200·364 for every
``Scale`` and population, and lowering it to a feasible t0 (``invocations``) takes at most that
many steps."""


class SgdParams(ComponentParams):
    # Kashin frames of N <= 4d = 4096 rows, one invocation per gradient round (up to 200)
    dimension: int = Field(ge=1, le=1024, description="d: dimension of features and of θ")
    loss: Literal["squared", "logistic"] = Field(
        "squared",
        description="squared: ½(y − θᵀx)² (linear regression); logistic: log(1 + e^{−yθᵀx}), "
        "y = ±1 (classification); both plus (λ/2)‖θ‖²",
    )
    regularization: float = Field(0.0, ge=0, le=1e6, description="λ of the (λ/2)‖θ‖² term")
    gradient_bound: Scale = Field(
        1.0, description="D: per-sample gradients are clipped to ‖g‖₂ <= D (§3.7, U10)"
    )
    smoothness: Scale = Field(1.0, description="G: per-sample losses are G-smooth")
    strong_convexity: Scale = Field(0.5, description="γ: the population loss is γ-strongly convex")
    step: Scale | None = Field(None, description="η (default 1/G, §3.7)")
    rounds: int | None = Field(
        None, ge=1, le=MAX_ROUNDS, description="t0 gradient rounds (default: the §3.7 formula)"
    )
    initial_distance: Scale = Field(
        1.0, description="R0: a bound on ‖θ0 − θ*‖ (sets the default t0)"
    )
    parameter_radius: Scale = Field(
        10.0, description="θ is projected onto the ℓ2 ball of this radius after each step"
    )
    mean_estimator: Literal["l2", "linf"] = Field(
        "l2", description="l2: Alg 2-K on Kashin coefficients (U11); linf: the literal Alg 2"
    )
    kashin_constant: KashinConstant = Field(2.5, description="K of the Kashin bound")

    @model_validator(mode="after")
    def _step_size(self) -> SgdParams:
        if self.step is not None and self.step > 1.0 / self.smoothness:
            raise ValueError("step η must be <= 1/G (Thm 8)")
        if self.strong_convexity > self.smoothness:
            # a G-smooth function curves by at most G: none is γ-strongly convex with γ > G
            raise ValueError("strong_convexity γ must be <= smoothness G")
        factor = 2.0 / ((self.step or 1.0 / self.smoothness) * self.strong_convexity)
        if self.rounds is None and factor > MAX_ROUNDS:
            # the §3.7 t0 is at least 2/(ηγ) whatever the population (the log factor is >= 1)
            raise ValueError(
                f"the §3.7 default t0 >= 2/(ηγ) = {factor:.4g} gradient rounds, more than the "
                f"{MAX_ROUNDS} a study runs: give rounds, or a larger step or strong_convexity"
            )
        return self


def sgd_rounds(params: SgdParams, n: int) -> int:
    """t0 (§3.7 [PROPOSAL]): ⌈(2/(ηγ))·ln(max(e, R0·γ·√(nm)/D))⌉, at least 1, unless given."""
    if params.rounds is not None:
        return params.rounds
    eta = params.step or 1.0 / params.smoothness
    gamma, m = params.strong_convexity, params.samples_per_user
    ratio = params.initial_distance * gamma * math.sqrt(n * m) / params.gradient_bound
    return max(1, math.ceil(2.0 / (eta * gamma) * math.log(max(math.e, ratio))))


class UserSgd(ComponentProtocol[SgdParams]):
    """Alg 3 (§3.7): t0 gradient rounds, each an Alg-2(-K) invocation on a fresh disjoint group of
    n/t0 users, θ0 = 0, η = 1/G, projected steps. Each stage-II round's output carries θ_t, the
    decoded gradient estimate ĝ_t, the step η and θ_{t+1}; every user is charged in one round only.
    """

    name: ClassVar[str] = "user-sgd"
    broadcast_fields: ClassVar[Mapping[str, str]] = component_fields(
        "step", "frame_seed", "kashin_observed", "theta"
    )
    summary: ClassVar[str] = (
        "User-level LDP stochastic optimization (linear or logistic regression): gradient "
        "rounds on disjoint user groups, each averaging privatized local gradients."
    )
    source: ClassVar[str] = "Zhao et al. 2024 (arXiv:2405.17079), Alg. 3 and Thm 8"
    heterogeneity: ClassVar[str] = (
        "As Alg 2 (user-mean-linf): the regime comes from a reference ε (default the median) and "
        "every user spends the same fraction of its own ε_i, with inverse-variance weights."
    )
    data_kind: ClassVar[DataKind] = "labeled"
    params_model = SgdParams

    def invocations(
        self, params: SgdParams, eps: FloatArray, eps_ref: float, c: int
    ) -> tuple[int, str]:
        """t0 from §3.7; the default is lowered until every round's groups pass the §1.5 score
        (§3.7 "Feasibility": reduce t0 and warn). An explicit ``rounds`` is kept as given."""
        n = int(eps.size)
        t0 = sgd_rounds(params, n)
        if (
            params.rounds is not None
            or ts.bounded_design(1.0, params.samples_per_user, n).n_bins <= 2
        ):
            return t0, ""
        wanted = t0
        while t0 > 1 and typical_score(c, eps_ref, n // t0) < ts.FEASIBLE_SCORE:
            t0 -= 1
        if t0 == wanted:
            return t0, ""
        return t0, (
            f"{wanted} gradient rounds (§3.7) would leave each round too few users for its "
            f"stage-one interval search (§1.5); using {t0}: the optimization term of the error "
            "may dominate"
        )

    def public_extras(self, params: SgdParams, eps: FloatArray, eps_ref: float, seed: int) -> JSON:
        out: JSON = {"step": params.step or 1.0 / params.smoothness}
        if params.mean_estimator == "l2":
            out |= kashin_public(params.dimension, seed, params.kashin_constant)
        return out

    def n_components(self, params: SgdParams, public: JSON) -> int:
        if params.mean_estimator == "l2":
            return self._frame(params, public).n_coef
        return params.dimension

    def _frame(self, params: SgdParams, public: JSON) -> KashinFrame:
        return study_frame(params.dimension, params.kashin_constant, public)

    def families(self, params: SgdParams, c: int, n_ref: int, call_eps_sq: float) -> Families:
        bound = params.gradient_bound
        if params.mean_estimator == "l2":
            bound = params.kashin_constant * bound / math.sqrt(params.dimension)
        design = ts.bounded_design(bound, params.samples_per_user, n_ref)
        return Families((design,), np.zeros(c, dtype=np.int64))

    def gradients(self, params: SgdParams, theta: FloatArray, x: FloatArray, y: FloatArray) -> Any:
        """Per-sample gradients of the loss plus (λ/2)‖θ‖², clipped to ℓ2 norm D: (..., d)."""
        margin = x @ theta
        if params.loss == "squared":
            g = (margin - y)[..., None] * x
        else:
            g = (-y / (1.0 + np.exp(np.clip(y * margin, -700, 700))))[..., None] * x
        g = g + params.regularization * theta
        norms = np.linalg.norm(g, axis=-1, keepdims=True)
        scale = np.minimum(1.0, params.gradient_bound / np.maximum(norms, 1e-300))
        return g * scale

    def component_values(self, params: SgdParams, broadcast: JSON, data: UserData) -> FloatArray:
        x, y = labeled_sample_block(data, params.samples_per_user, params.dimension)
        theta = np.asarray(broadcast["theta"], dtype=np.float64)
        g = self.gradients(params, theta, x, y)
        if params.mean_estimator == "l2":
            frame = self._frame(params, broadcast)
            g = frame.coefficients(g.reshape(-1, params.dimension)).reshape(*x.shape[:2], -1)
        return np.asarray(g.mean(axis=1), dtype=np.float64)

    def _decode(self, params: SgdParams, public: JSON, theta_hat: FloatArray) -> FloatArray:
        if params.mean_estimator == "l2":
            return np.asarray(self._frame(params, public).decode(theta_hat), dtype=np.float64)
        return theta_hat

    def _project(self, params: SgdParams, theta: FloatArray) -> FloatArray:
        norm = float(np.linalg.norm(theta))
        if norm > params.parameter_radius:
            return np.asarray(theta * (params.parameter_radius / norm), dtype=np.float64)
        return theta

    def trajectory(
        self, params: SgdParams, plan: Plan, outputs: Sequence[JSON]
    ) -> list[FloatArray]:
        """θ_0, θ_1, ... as far as the stage-II outputs go (θ0 = 0)."""
        thetas = [np.zeros(params.dimension, dtype=np.float64)]
        for t in range(len(outputs) // 2):
            g = self._decode(params, plan.public, self.component_estimate(outputs, t)[0])
            step = float(plan.public["step"])
            thetas.append(self._project(params, thetas[-1] - step * g))
        return thetas

    def invocation_message(
        self, params: SgdParams, plan: Plan, t: int, outputs: Sequence[JSON]
    ) -> JSON:
        if len(outputs) < 2 * t:
            raise ValueError(f"gradient round {t} needs the outputs of the rounds before it")
        return {"theta": self.trajectory(params, plan, outputs[: 2 * t])[t].tolist()}

    def aggregate(
        self,
        params: SgdParams,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        out = super().aggregate(params, plan, round_index, broadcast, chunks)
        if round_index % 2 == 0:
            return out
        theta = np.asarray(broadcast["theta"], dtype=np.float64)
        gradient = self._decode(params, plan.public, np.asarray(out["estimate"]))
        step = float(plan.public["step"])
        return out | {
            "theta": theta.tolist(),
            "gradient": gradient.tolist(),
            "step": step,
            "theta_next": self._project(params, theta - step * gradient).tolist(),
        }

    def finalize(self, params: SgdParams, plan: Plan, outputs: Sequence[JSON]) -> Result:
        thetas = self.trajectory(params, plan, outputs)
        rounds = len(plan.public["invocations"])
        if len(thetas) != rounds + 1:
            raise ValueError(f"user-sgd finalizes after its {2 * rounds} rounds")
        diagnostics: JSON = {
            **self.stage_diagnostics(plan, outputs, 0),
            "gradient_rounds": rounds,
            "step": plan.public["step"],
            "trajectory": [t.tolist() for t in thetas],
            "loss": params.loss,
            "regularization": params.regularization,
        }
        return Result(thetas[-1].tolist(), None, diagnostics, plan.warnings)


PROTOCOLS: tuple[Protocol[Any], ...] = (UserSgd(),)

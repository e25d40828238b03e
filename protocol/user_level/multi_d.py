"""Multi-dimensional user-level LDP means of Zhao et al. 2024 (arXiv:2405.17079) on the Alg-2
engine of ``fedldp.protocol.user_level.components``: ℓ∞ support (Alg 2), ℓ2 support via Kashin (Alg
2-K), ℓ1 support and discrete distributions via Hadamard (Alg 2-H), and their heavy-tail variants
(Alg 2-HT).

Spec: user-level-ldp.md §3.3–§3.6, §2.4–§2.5, §5.3. Each protocol here names its components and
decodes; ``fedldp.protocol.user_level.driver.ComponentProtocol`` plans, broadcasts, privatizes and
aggregates.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
from pydantic import Field, model_validator

from fedldp.protocol.api import JSON, DataKind, FloatArray, Plan, Protocol, Result, UserData
from fedldp.protocol.core.base.bounds import MAX_MOMENT_P, Scale
from fedldp.protocol.mechanisms.transforms import KashinFrame, fwht, next_power_of_two
from fedldp.protocol.user_level import components as comp
from fedldp.protocol.user_level import two_stage as ts
from fedldp.protocol.user_level.driver import (
    ComponentParams,
    ComponentProtocol,
    KashinConstant,
    component_fields,
    kashin_public,
    study_frame,
    user_sample_block,
)
from fedldp.protocol.user_level.layout import Families

__all__ = [
    "PROTOCOLS",
    "FrequencyParams",
    "L1Params",
    "L2Params",
    "LinfParams",
    "UserFrequency",
    "UserMeanL1",
    "UserMeanL2",
    "UserMeanLinf",
]


def _bounded_family(bound: float, m: int, n_ref: int, c: int) -> Families:
    return Families((ts.bounded_design(bound, m, n_ref),), np.zeros(c, dtype=np.int64))


class _HeavyTailInputs(ComponentParams):
    heavy_tail: bool = Field(False, description="Alg 2-HT: only a p-th moment bound is assumed")
    moment_p: float = Field(
        3.0, ge=2, le=MAX_MOMENT_P, description="p of the moment bound (heavy_tail)"
    )
    moment_bound: Scale | None = Field(None, description="M_p (required with heavy_tail)")

    @model_validator(mode="after")
    def _heavy_tail_inputs(self) -> _HeavyTailInputs:
        if self.heavy_tail and self.moment_bound is None:
            raise ValueError("heavy_tail needs moment_bound (the M_p of the moment condition)")
        return self


def _heavy_family(
    p: float, moment: float, m: int, n_ref: int, call_eps_sq: float, c: int
) -> Families:
    design = ts.heavy_tail_design(p, moment, m, n_ref, call_eps_sq)
    return Families((design,), np.zeros(c, dtype=np.int64))


# --------------------------------------------------------------------------- ℓ∞ (Alg 2)


class LinfParams(_HeavyTailInputs):
    # C = d components per invocation, within MAX_COMPONENTS = 2^14 (a report of d values)
    dimension: int = Field(ge=1, le=4096, description="d: dimension of the samples")
    bound: Scale = Field(1.0, description="D: every sample has ‖X‖∞ <= D (bounded case)")

    @model_validator(mode="after")
    def _bound_or_moment(self) -> LinfParams:
        if self.heavy_tail and "bound" in self.model_fields_set:
            raise ValueError("with heavy_tail the clip radius is derived from M_p; omit bound")
        return self


class UserMeanLinf(ComponentProtocol[LinfParams]):
    """Alg 2 (§3.3): each coordinate is a component with bound D; regimes by ε (high: d groups,
    medium: ⌈d/⌊ε⌋⌉ groups at 1-LDP per coordinate, low: all users at ε/d). With ``heavy_tail``
    (§3.6, coordinate-wise E|X_k|^p <= M_p) every Alg-1 call is Alg 1-HT."""

    name: ClassVar[str] = "user-mean-linf"
    broadcast_fields: ClassVar[Mapping[str, str]] = component_fields()
    summary: ClassVar[str] = (
        "User-level LDP mean of d-dimensional vectors with ℓ∞-bounded samples: coordinates "
        "split over user groups by privacy regime, each by the two-stage mean."
    )
    source: ClassVar[str] = (
        "Zhao et al. 2024 (arXiv:2405.17079), Alg. 2 and Thm 4; heavy tails: Remark 2, App. B.4"
    )
    heterogeneity: ClassVar[str] = (
        "Non-paper (spec §8 extended to Alg 2): the regime and groups come from a reference ε "
        "(default the median); each user spends on each of its coordinates its own ε_i times "
        "the paper's per-coordinate fraction at the reference, so it is charged at most ε_i; "
        "reports are weighted by inverse variance per coordinate. Equal ε's give the paper."
    )
    data_kind: ClassVar[DataKind] = "vector"
    params_model = LinfParams

    def n_components(self, params: LinfParams, public: JSON) -> int:
        return params.dimension

    def families(self, params: LinfParams, c: int, n_ref: int, call_eps_sq: float) -> Families:
        m = params.samples_per_user
        if params.heavy_tail:
            assert params.moment_bound is not None
            return _heavy_family(params.moment_p, params.moment_bound, m, n_ref, call_eps_sq, c)
        return _bounded_family(params.bound, m, n_ref, c)

    def component_values(self, params: LinfParams, broadcast: JSON, data: UserData) -> FloatArray:
        block = user_sample_block(data, params.samples_per_user, params.dimension)
        return np.asarray(block.mean(axis=1), dtype=np.float64)

    def finalize(self, params: LinfParams, plan: Plan, outputs: Sequence[JSON]) -> Result:
        theta, var = self.component_estimate(outputs, 0)
        bar = comp.l2_error_bar(var, params.level, np.ones_like(var))
        diagnostics: JSON = {
            **self.stage_diagnostics(plan, outputs, 0),
            "predicted_mse": float(var.sum()),
            "coordinate_mse": var.tolist(),
        }
        return Result(theta.tolist(), bar, diagnostics, plan.warnings)


# --------------------------------------------------------------------------- ℓ2 (Alg 2-K)


class L2Params(_HeavyTailInputs):
    # a Kashin frame has N <= 4d = 8192 rows (the components, within MAX_COMPONENTS): its
    # N×d float64 matrix is 128 MiB at d = 2048
    dimension: int = Field(ge=1, le=2048, description="d: dimension of the samples")
    radius: Scale = Field(1.0, description="D: every sample has ‖X‖₂ <= D (bounded case)")
    kashin_constant: KashinConstant = Field(
        2.5, description="K: assumed bound ‖a(x)‖∞ <= K‖x‖₂/√d (§2.5, U8)"
    )

    @model_validator(mode="after")
    def _radius_or_moment(self) -> L2Params:
        if self.heavy_tail and "radius" in self.model_fields_set:
            raise ValueError("with heavy_tail the clip radius is derived from M_p; omit radius")
        return self


class UserMeanL2(ComponentProtocol[L2Params]):
    """Alg 2-K (§3.4): every sample is mapped to its Kashin coefficients a(X) ∈ R^{2d} by the
    nonlinear Lyubarskii–Vershynin procedure (§2.5; the paper's linear map is wrong, §7 E1),
    bounded by K·D/√d; Alg 2 runs on the 2d coefficients and the server decodes μ̂ = Uᵀθ̂. The
    frame U is public, drawn from the study seed. With ``heavy_tail`` (ℓ2 moment E‖X‖₂^p <= M_p,
    §3.6) Alg 2-HT runs on a(X) with M'_p = K^p·M_p·d^{−p/2}."""

    name: ClassVar[str] = "user-mean-l2"
    broadcast_fields: ClassVar[Mapping[str, str]] = component_fields(
        "frame_seed", "kashin_observed"
    )
    summary: ClassVar[str] = (
        "User-level LDP mean of vectors with ℓ2-bounded samples via Kashin coefficients: error "
        "linear in d instead of the ℓ∞ method's d²."
    )
    source: ClassVar[str] = (
        "Zhao et al. 2024 (arXiv:2405.17079), §4.2 ℓ2 support, Lemma 1 (corrected), Thm 5"
    )
    heterogeneity: ClassVar[str] = UserMeanLinf.heterogeneity
    data_kind: ClassVar[DataKind] = "vector"
    params_model = L2Params

    def n_components(self, params: L2Params, public: JSON) -> int:
        # 2d, or 4d when the calibration had to fall back to a larger frame (§2.5 step 4).
        return self.frame(params, public).n_coef

    def public_extras(self, params: L2Params, eps: FloatArray, eps_ref: float, seed: int) -> JSON:
        return kashin_public(params.dimension, seed, params.kashin_constant)

    def frame(self, params: L2Params, public: JSON) -> KashinFrame:
        """The study's public frame, rebuilt from its seed (cached per process)."""
        return study_frame(params.dimension, params.kashin_constant, public)

    def families(self, params: L2Params, c: int, n_ref: int, call_eps_sq: float) -> Families:
        m, d, k = params.samples_per_user, params.dimension, params.kashin_constant
        if params.heavy_tail:
            assert params.moment_bound is not None
            p = params.moment_p
            moment = k**p * params.moment_bound * d ** (-p / 2.0)
            return _heavy_family(p, moment, m, n_ref, call_eps_sq, c)
        return _bounded_family(k * params.radius / math.sqrt(d), m, n_ref, c)

    def component_values(self, params: L2Params, broadcast: JSON, data: UserData) -> FloatArray:
        block = user_sample_block(data, params.samples_per_user, params.dimension)
        frame = self.frame(params, broadcast)
        coef = frame.coefficients(block.reshape(-1, params.dimension))
        return np.asarray(coef.reshape(block.shape[0], block.shape[1], -1).mean(axis=1))

    def finalize(self, params: L2Params, plan: Plan, outputs: Sequence[JSON]) -> Result:
        theta, var = self.component_estimate(outputs, 0)
        frame = self.frame(params, plan.public)
        norms = np.sum(frame.u**2, axis=1)
        bar = comp.l2_error_bar(var, params.level, norms)
        diagnostics: JSON = {
            **self.stage_diagnostics(plan, outputs, 0),
            "predicted_mse": float(np.sum(var * norms)),
            "kashin_constant": params.kashin_constant,
            "kashin_observed": plan.public["kashin_observed"],
            "coefficients": frame.n_coef,
        }
        return Result(frame.decode(theta).tolist(), bar, diagnostics, plan.warnings)


# --------------------------------------------------------------------------- ℓ1 (Alg 2-H)


class L1Params(ComponentParams):
    # the Hadamard size d' <= 8192 components, within MAX_COMPONENTS
    dimension: int = Field(ge=1, le=8192, description="d: dimension of the samples")
    bound: Scale = Field(1.0, description="D: every sample has ‖X‖₁ <= D")


class FrequencyParams(ComponentParams):
    # the Hadamard size A' <= 8192 components, within MAX_COMPONENTS
    domain_size: int = Field(ge=2, le=8192, description="A: items are 0..A-1")


H = TypeVar("H", L1Params, FrequencyParams)


class _Hadamard(ComponentProtocol[H]):
    """Alg 2-H (§3.5): zero-pad to d' = 2^⌈log2 d⌉ and rotate by U = H_{d'}/√d', so that
    ‖UX‖∞ <= ‖X‖₁/√d'; Alg 2 on the d' rotated coordinates; decode μ̂ = (Uᵀθ̂)_{1..d}. The
    rotation is linear, so the client rotates its local mean instead of every sample."""

    heterogeneity: ClassVar[str] = UserMeanLinf.heterogeneity

    @abstractmethod
    def width(self, params: H) -> int:
        """d (or the alphabet size A)."""

    @abstractmethod
    def l1_bound(self, params: H) -> float:
        """D with ‖X‖₁ <= D."""

    @abstractmethod
    def local_means(self, params: H, data: UserData) -> FloatArray:
        """Each user's mean of X over its first m samples, (n, d)."""

    def n_components(self, params: H, public: JSON) -> int:
        return next_power_of_two(self.width(params))

    def families(self, params: H, c: int, n_ref: int, call_eps_sq: float) -> Families:
        bound = self.l1_bound(params) / math.sqrt(c)
        return _bounded_family(bound, params.samples_per_user, n_ref, c)

    def component_values(self, params: H, broadcast: JSON, data: UserData) -> FloatArray:
        means = self.local_means(params, data)
        c = next_power_of_two(means.shape[1])
        padded = np.zeros((means.shape[0], c), dtype=np.float64)
        padded[:, : means.shape[1]] = means
        return np.asarray(fwht(padded) / math.sqrt(c), dtype=np.float64)

    def finalize(self, params: H, plan: Plan, outputs: Sequence[JSON]) -> Result:
        theta, var = self.component_estimate(outputs, 0)
        d, c = self.width(params), theta.size
        estimate = (fwht(theta) / math.sqrt(c))[:d]
        norms = np.full(c, d / c)  # every entry of H/√d' has square 1/d'
        bar = comp.l2_error_bar(var, params.level, norms)
        diagnostics: JSON = {
            **self.stage_diagnostics(plan, outputs, 0),
            "predicted_mse": float(np.sum(var * norms)),
            "padded_dimension": c,
        }
        return Result(estimate.tolist(), bar, diagnostics, plan.warnings)


class UserMeanL1(_Hadamard[L1Params]):
    """Alg 2-H on vectors with ‖X‖₁ <= D (§3.5, Remark 1)."""

    name: ClassVar[str] = "user-mean-l1"
    broadcast_fields: ClassVar[Mapping[str, str]] = component_fields()
    summary: ClassVar[str] = (
        "User-level LDP mean of vectors with ℓ1-bounded samples via a Hadamard rotation."
    )
    source: ClassVar[str] = "Zhao et al. 2024 (arXiv:2405.17079), Remark 1 (ℓ1 support)"
    data_kind: ClassVar[DataKind] = "vector"
    params_model = L1Params

    def width(self, params: L1Params) -> int:
        return params.dimension

    def l1_bound(self, params: L1Params) -> float:
        return params.bound

    def local_means(self, params: L1Params, data: UserData) -> FloatArray:
        block = user_sample_block(data, params.samples_per_user, params.dimension)
        return np.asarray(block.mean(axis=1), dtype=np.float64)


class UserFrequency(_Hadamard[FrequencyParams]):
    """Discrete distribution estimation (§3.5): each sample is the one-hot e_item (D = 1), so a
    user's local mean is its item histogram over m samples; the estimate is the pmf (unprojected:
    entries may fall outside [0, 1] or not sum to exactly 1)."""

    name: ClassVar[str] = "user-frequency"
    broadcast_fields: ClassVar[Mapping[str, str]] = component_fields()
    summary: ClassVar[str] = (
        "User-level LDP distribution estimation over an alphabet of A items via Hadamard "
        "coefficients: squared error linear in A."
    )
    source: ClassVar[str] = "Zhao et al. 2024 (arXiv:2405.17079), Remark 1 (discrete distributions)"
    data_kind: ClassVar[DataKind] = "categorical"
    params_model = FrequencyParams

    def width(self, params: FrequencyParams) -> int:
        return params.domain_size

    def l1_bound(self, params: FrequencyParams) -> float:
        return 1.0

    def local_means(self, params: FrequencyParams, data: UserData) -> FloatArray:
        items = user_sample_block(data, params.samples_per_user, None)
        a = params.domain_size
        codes = np.asarray(items, dtype=np.int64)
        if np.any((codes < 0) | (codes >= a)) or not np.array_equal(codes, items):
            raise ValueError(f"items must be integers in [0, {a})")
        n, m = codes.shape
        rows = np.repeat(np.arange(n, dtype=np.int64), m)
        counts = np.bincount(rows * a + codes.reshape(-1), minlength=n * a).reshape(n, a)
        return np.asarray(counts / m, dtype=np.float64)


PROTOCOLS: tuple[Protocol[Any], ...] = (
    UserMeanLinf(),
    UserMeanL2(),
    UserMeanL1(),
    UserFrequency(),
)

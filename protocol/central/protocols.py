"""Central (trusted-aggregator) user-level DP means of Zhao et al., NeurIPS 2024 ("A Huber Loss
Minimization Approach to Mean Estimation under User-level Differential Privacy"), as catalogue
protocols. The math is ``fedldp.protocol.central.wme`` (WME), ``fedldp.protocol.central.huber``
(HLM) and ``fedldp.protocol.mechanisms.dp_noise`` (the noise constants); spec
huber-user-level-dp.md.

The trust model, the noise stream and the one-round flow they share are in
``fedldp.protocol.central.release``.

**Protocols.** ``central-wme`` / ``central-huber`` take scalar data (d = 1); ``central-wme-vector``
/ ``central-huber-vector`` take vector data with a ``dimension`` parameter (d = 1 accepted, with
(total,) or (total, 1) samples). ``central-huber`` has two calibrations: ``dp`` (default, (ε, δ)-DP
by the smooth-sensitivity argument, with the d = 1 correction of
``fedldp.protocol.mechanisms.dp_noise``: α checked against the exact privacy-loss divergence) and
``paper-proxy`` (§4.9, NOT differentially private, refused unless ``unsafe_non_private`` is set).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from fedldp.protocol.api import JSON, DataKind, FloatArray, Plan, Protocol
from fedldp.protocol.central import huber as hb
from fedldp.protocol.central import wme
from fedldp.protocol.central.release import CentralParams, CentralProtocol
from fedldp.protocol.core.broadcast import described
from fedldp.protocol.mechanisms import dp_noise as dn
from fedldp.protocol.mechanisms.transforms import next_power_of_two

if TYPE_CHECKING:
    from dp_accounting import DpEvent

__all__ = [
    "MAX_HISTOGRAM_DRAWS",
    "PROTOCOLS",
    "CentralHuber",
    "CentralHuberVector",
    "CentralWME",
    "CentralWMEVector",
    "HuberParams",
    "HuberVectorParams",
    "WMEParams",
    "WMEVectorParams",
]

MAX_HISTOGRAM_DRAWS = 1 << 22
"""Most stage-one Laplace draws (bins × coordinates) a WME study may need."""

_PROXY_WARNING = (
    "NOT DIFFERENTIALLY PRIVATE: calibration 'paper-proxy' (spec §4.9) scales the noise by the "
    "leading term of the sensitivity and ignores the rest; use it only to test whether the "
    "paper's figures can be reproduced, never for a privacy claim"
)


# --------------------------------------------------------------------------- parameters


CENTRAL_SCALE = 1e9
"""The scale parameters (tau_scale, histogram_bound, huber_scale, clip_radius) are in the data's
units and lie within a factor 1e9 of 1 either way. Smaller ones are refused: Huber's lattice Δ̃
search indexes user means in units of T/8 as int64 (beyond |ȳ|/T ≈ 1e18 the index overflows:
measured at huber_scale = 1e-50) and its boxes grow as (spread/T)^d (9 s at 1e-12, d = 3)."""


class WMEParams(CentralParams):
    """Parameters of ``central-wme`` (spec §3.2)."""

    tau_scale: float = Field(
        2.0,
        ge=1 / CENTRAL_SCALE,
        le=CENTRAL_SCALE,
        description="t·σ: τ = tau_scale/√(N/n), so τ = t·σ/√m for balanced users; stage-one "
        "bins have width 2τ, the clipping interval 4τ (spec §7.0; the paper tunes t, ≈ 1.4–2.8)",
    )
    histogram_bound: float = Field(
        10.0,
        ge=1 / CENTRAL_SCALE,
        le=CENTRAL_SCALE,
        description="B: the stage-one histogram covers [−B, B] (spec §3.2)",
    )

    def padded_dimension(self) -> int:
        return 1

    def tau(self, n: int, total: int) -> tuple[float, bool]:
        """(τ, raised): τ = tau_scale/√(N/n), raised when needed so that stage one draws at most
        ``MAX_HISTOGRAM_DRAWS`` noisy bins (from public n, N, B and d′ only)."""
        tau = self.tau_scale / math.sqrt(total / n)
        max_bins = MAX_HISTOGRAM_DRAWS // self.padded_dimension()
        smallest = self.histogram_bound / (max_bins - 2)
        return (tau, False) if tau >= smallest else (smallest, True)


class WMEVectorParams(WMEParams):
    """Parameters of ``central-wme-vector`` (spec §3.3)."""

    # a contribution is a d-vector of float64 (32 KiB at 4096), as for user-mean-linf
    dimension: int = Field(ge=1, le=4096, description="d: dimension of every sample")
    hadamard: bool = Field(
        True, description="random Hadamard rotation before the per-coordinate ranges (spec §3.3)"
    )

    def padded_dimension(self) -> int:
        if self.dimension == 1:
            return 1
        return next_power_of_two(self.dimension) if self.hadamard else self.dimension


class HuberParams(CentralParams):
    """Parameters of ``central-huber`` (spec §4)."""

    huber_scale: float = Field(
        4.0,
        ge=1 / CENTRAL_SCALE,
        le=CENTRAL_SCALE,
        description="A = t·σ: connecting points T_i = A/√(m_i ∧ m_c), balanced users T = A/√m. "
        "The paper tunes it per case at ε = 1 and neither it nor the spec gives a rule in n, ε "
        "or d, so the default is fixed: 4, the spec's tuned t for dp at d = 1, n = 1 000, ε = 1 "
        "(§6.6: 3.4–4.8). Measured optima (Gaussian, n = 1 000, m = 1): dp 8, 5.66, 4, 2.83 at "
        "ε = 0.25, 0.5, 1, 2; paper-proxy 0.5, 0.5, 0.71, 2.83; d = 3 dp (lattice Δ̃) ≈ 11 at "
        "n = 10⁴",
    )
    clip_radius: float = Field(
        1.0,
        ge=1 / CENTRAL_SCALE,
        le=CENTRAL_SCALE,
        description="R_c: the estimate is clipped to the ball B(0, R_c)",
    )
    gamma: float = Field(
        1.0,
        ge=1,
        le=1e6,
        description="γ (imbalanced users): m_c = γN/n, k₀ = ⌊n/(8γ)⌋; the Assumption-3 constant, "
        "which fedldp simulate fills from --imbalance (spec §6.3)",
    )
    tolerance: float = Field(
        1e-10, gt=0, le=1e-3, description="IRLS stops when a step is below tolerance·min_i T_i"
    )
    max_iterations: int = Field(20_000, ge=1, le=1_000_000, description="IRLS step cap")
    calibration: Literal["dp", "paper-proxy"] = Field(
        "dp",
        description="'dp': smooth-sensitivity noise, (ε, δ)-DP; 'paper-proxy': NOT "
        "differentially private (spec §4.9), needs unsafe_non_private",
    )
    unsafe_non_private: bool = Field(
        False, description="must be true to select calibration 'paper-proxy' (not DP)"
    )

    def dimension_value(self) -> int:
        return 1

    @model_validator(mode="after")
    def _proxy_needs_unsafe(self) -> HuberParams:
        if self.calibration == "paper-proxy" and not self.unsafe_non_private:
            raise ValueError(
                "calibration 'paper-proxy' is NOT differentially private; it is refused unless "
                "unsafe_non_private is true"
            )
        if self.unsafe_non_private and self.calibration != "paper-proxy":
            raise ValueError("unsafe_non_private only goes with calibration 'paper-proxy'")
        return self


class HuberVectorParams(HuberParams):
    """Parameters of ``central-huber-vector``: d <= 8, the lattice Δ̃ search grows like 5^d."""

    dimension: int = Field(ge=1, le=8, description="d: dimension of every sample")

    def dimension_value(self) -> int:
        return self.dimension


# --------------------------------------------------------------------------- WME


class CentralWME(CentralProtocol[WMEParams]):
    """WME (spec §3.2, the paper's baseline [28]): a private histogram of the user means finds
    [a, b] with b − a = 4τ (ε/2), then the m_i/N-weighted mean of the clipped means plus
    Lap(8τ·max_i m_i/(Nε)) (ε/2). Pure ε-DP (δ unused). No error bar: the error depends on the
    data's spread and on the clipping bias, which are not released."""

    name: ClassVar[str] = "central-wme"
    broadcast_fields: ClassVar[Mapping[str, str]] = described("trust", "statistic", "d")
    summary: ClassVar[str] = (
        "Central user-level DP winsorized mean of scalars (trusted server): a private histogram "
        "finds an interval, the clipped user means are averaged with Laplace noise."
    )
    source: ClassVar[str] = (
        "Zhao et al., NeurIPS 2024 (Huber loss user-level DP), baseline WME of Levy et al. 2021 "
        "as reconstructed in spec §3.2 (App. G (115) weights m_i/N)"
    )
    data_kind: ClassVar[DataKind] = "scalar"
    params_model = WMEParams

    def dimension(self, params: WMEParams) -> int:
        return 1

    def rotate(self, params: WMEParams) -> bool:
        return True

    def release_event(self, params: WMEParams, epsilon: float) -> DpEvent:
        """WME's two stages at the participant's ``epsilon`` (the release's ε is at most it:
        more noise, a dominated loss), one user's data replaced (``wme.wme_release``).

        Stage 1, per coordinate of d′ (1 for d = 1): the user's mean leaves one histogram bin
        and enters another, two counts change by 1, each with Lap(2/ε₁) noise, ε₁ = ε/(2d′):
        2d′ Laplace events of noise multiplier 2/ε₁ = 4d′/ε (ε/2 in all by basic composition).
        Stage 2, d = 1: Lap(8τ·v_max/ε) over the clipped mean's sensitivity 4τ·v_max, a Laplace
        event of multiplier 2/ε; d > 1: N(0, σ²) with σ = Δ₂·√(2 ln(1.25/δ))/ε₂ over
        Δ₂ = 4τ√d′·v_max, a Gaussian event of multiplier √(2 ln(1.25/δ))/min(ε/2, 1). The
        rotation signs and the grid offsets are data-independent: no loss."""
        from dp_accounting import (
            ComposedDpEvent,
            GaussianDpEvent,
            LaplaceDpEvent,
            SelfComposedDpEvent,
        )

        eps = dn.check_positive(epsilon, "epsilon")
        d = self.dimension(params)
        padded = 1 if d == 1 else params.padded_dimension()
        stage1 = SelfComposedDpEvent(LaplaceDpEvent(4.0 * padded / eps), 2 * padded)
        if d == 1:
            return ComposedDpEvent([stage1, LaplaceDpEvent(2.0 / eps)])
        multiplier = dn.gaussian_coefficient(params.delta) / min(0.5 * eps, 1.0)
        return ComposedDpEvent([stage1, GaussianDpEvent(multiplier)])

    def release(
        self,
        params: WMEParams,
        plan: Plan,
        means: FloatArray,
        counts: FloatArray,
        rng: np.random.Generator,
    ) -> JSON:
        eps, d = float(plan.public["epsilon"]), self.dimension(params)
        weights = counts / counts.sum()
        tau, raised = params.tau(int(counts.size), int(counts.sum()))
        rel = wme.wme_release(
            means, weights, tau, params.histogram_bound, eps, params.delta, rng,
            rotate=self.rotate(params),
        )  # fmt: skip
        warnings = [
            f"τ = tau_scale/√(N/n) was raised to {tau:.3g} to keep stage one within "
            f"{MAX_HISTOGRAM_DRAWS} noisy bins"
        ] if raised else []  # fmt: skip
        std = rel.noise_scale * (math.sqrt(2.0) if rel.noise == "laplace" else 1.0)
        out: JSON = {
            "estimate": rel.estimate,
            "estimator": "wme",
            "differentially_private": True,
            "guarantee": "pure ε-DP" if d == 1 else "(ε, δ)-DP",
            "tau": tau,
            "tau_scale": params.tau_scale,
            "histogram_bound": params.histogram_bound,
            "interval_width": 4.0 * tau,
            "max_weight": float(weights.max()),
            "noise": rel.noise,
            "noise_scale": rel.noise_scale,
            "noise_std": std,
            "padded_dimension": rel.padded_dim,
            "epsilon_stage1": rel.epsilon1,
            "epsilon_stage2": rel.epsilon2,
            "warnings": warnings,
        }
        if d == 1:
            out["interval"] = [float(rel.lower[0]), float(rel.upper[0])]
        return out


class CentralWMEVector(CentralWME):
    """WME-HD (spec §3.3): random Hadamard rotation (padded to d′ = 2^⌈log₂ d⌉), per-coordinate
    ranges at ε/(2d′), Gaussian noise with Δ₂ = 4τ√d′·max_i m_i/N at min(ε/2, 1) (the classical
    Gaussian mechanism needs ε′ <= 1); ``hadamard=False`` is the coordinate-wise ablation. For
    dimension 1 it is ``central-wme``."""

    name: ClassVar[str] = "central-wme-vector"
    broadcast_fields: ClassVar[Mapping[str, str]] = described("trust", "statistic", "d")
    summary: ClassVar[str] = (
        "Central user-level DP winsorized mean of vectors (trusted server): Hadamard rotation, "
        "per-coordinate private ranges, clipped means with Gaussian noise."
    )
    source: ClassVar[str] = (
        "Zhao et al., NeurIPS 2024 (Huber loss user-level DP) §1, baseline WME with the Hadamard "
        "transform, as reconstructed in spec §3.3"
    )
    data_kind: ClassVar[DataKind] = "vector"
    params_model = WMEVectorParams  # type: ignore[assignment]  # a subclass of WMEParams
    population_probe: ClassVar[Mapping[str, Any]] = {"dimension": 1}

    def dimension(self, params: WMEParams) -> int:
        return params.dimension if isinstance(params, WMEVectorParams) else 1

    def rotate(self, params: WMEParams) -> bool:
        return not isinstance(params, WMEVectorParams) or params.hadamard


# --------------------------------------------------------------------------- HLM


class CentralHuber(CentralProtocol[HuberParams]):
    """HLM (spec §4, the paper's method): Clip(argmin Σ w_i φ_{T_i}(s, y_i), R_c) + N(0, (S/α)²I)
    with the β-smooth sensitivity S of Def. 5 (every m_i equal) or Def. 6 (w_i ∝ m_i ∧ m_c,
    T_i = A/√(m_i ∧ m_c), m_c = γN/n), Δ̃ per spec §4.4/§4.7. The round output holds the public
    constants only: S, Δ̃, Z, μ̂₀ and the noise scale S/α are data-dependent and NOT covered by the
    guarantee, so they are never published (spec §1.3); no error bar for the same reason."""

    name: ClassVar[str] = "central-huber"
    broadcast_fields: ClassVar[Mapping[str, str]] = described("trust", "statistic", "d")
    summary: ClassVar[str] = (
        "Central user-level DP Huber-loss mean of scalars (trusted server): Huber minimizer of "
        "the user means plus smooth-sensitivity Gaussian noise."
    )
    source: ClassVar[str] = (
        "Zhao et al., NeurIPS 2024, A Huber Loss Minimization Approach to Mean Estimation under "
        "User-level DP: (8), (11), (12), Def. 5–6, Thm 1 and 4, App. A (spec §4)"
    )
    data_kind: ClassVar[DataKind] = "scalar"
    params_model = HuberParams

    def dimension(self, params: HuberParams) -> int:
        return params.dimension_value()

    def release_event(self, params: HuberParams, epsilon: float) -> DpEvent:
        """HLM's release is the smooth-sensitivity Gaussian mechanism: its noise scale S(D)/α
        depends on the data, so no fixed Gaussian pair describes it and the release is known by
        its guarantee, (ε′, δ)-DP at ε′ = min(ε, the calibration's cap: ``dp_noise``'s
        ``ONE_D_EPSILON_CAP`` for d = 1, ``MULTI_D_EPSILON_CAP`` for d > 1), an
        ``EpsilonDeltaDpEvent``. ``paper-proxy`` is not differentially private:
        ``NonPrivateDpEvent`` (a campaign refuses it)."""
        from dp_accounting import NonPrivateDpEvent

        from fedldp.protocol.api import EpsilonDeltaDpEvent

        eps = dn.check_positive(epsilon, "epsilon")
        if params.calibration != "dp":
            return NonPrivateDpEvent()
        cap = dn.ONE_D_EPSILON_CAP if self.dimension(params) == 1 else dn.MULTI_D_EPSILON_CAP
        return EpsilonDeltaDpEvent(min(eps, cap), params.delta)

    def extra_warnings(self, params: HuberParams) -> tuple[str, ...]:
        return (_PROXY_WARNING,) if params.calibration == "paper-proxy" else ()

    def extra_public(self, params: HuberParams, epsilon: float) -> JSON:
        d = self.dimension(params)
        alpha, beta = dn.noise_constants(epsilon, params.delta, d, params.calibration)
        return {"alpha": alpha, "beta": beta, "calibration": params.calibration}

    internal_diagnostics: ClassVar[bool] = True

    def release_internals(
        self, params: HuberParams, plan: Plan, means: FloatArray, counts: FloatArray
    ) -> JSON:
        """What spec §4.8 reports beside μ̂ "for diagnostics only": S (the proxy S in
        paper-proxy mode) and the noise std S/α; in dp mode also Δ̃, Z, the case of G(D, 0),
        the last case-(b) index and the case-(c) term with its share of S (§7.2 C1.5). The
        same S as ``release`` (deterministic given the reports)."""
        eps = float(plan.public["epsilon"])
        d = self.dimension(params)
        alpha, beta = dn.noise_constants(eps, params.delta, d, params.calibration)
        design = hb.huber_design(counts, params.huber_scale, params.gamma)
        if params.calibration != "dp":
            proxy = hb.hlm_proxy_sensitivity(means, design)
            return {"sensitivity": proxy, "noise_std": proxy / alpha}
        sens = hb.hlm_sensitivity(means, design, params.clip_radius, beta)
        return {
            "sensitivity": sens.value,
            "noise_std": sens.value / alpha,
            "case": sens.case,
            "delta_tilde": sens.delta_tilde,
            "z": sens.z,
            "k_last": sens.k_last,
            "case_c_term": sens.case_c_term,
            "case_c_share": sens.case_c_share,
        }

    def release(
        self,
        params: HuberParams,
        plan: Plan,
        means: FloatArray,
        counts: FloatArray,
        rng: np.random.Generator,
    ) -> JSON:
        eps = float(plan.public["epsilon"])
        rel = hb.hlm_release(
            means,
            counts,
            epsilon=eps,
            delta=params.delta,
            scale_a=params.huber_scale,
            r_c=params.clip_radius,
            rng=rng,
            gamma=params.gamma,
            calibration=params.calibration,
            tolerance=params.tolerance,
            max_iter=params.max_iterations,
        )
        design = rel.design
        private = params.calibration == "dp"
        warnings: list[str] = [] if private else [_PROXY_WARNING]
        out: JSON = {
            "estimate": rel.estimate,
            "estimator": "huber",
            "calibration": params.calibration,
            "differentially_private": private,
            "guarantee": "(ε, δ)-DP" if private else "none (NOT differentially private)",
            "alpha": rel.alpha,
            "beta": rel.beta,
            "huber_scale": params.huber_scale,
            "clip_radius": params.clip_radius,
            "users": "balanced" if design.balanced else "imbalanced",
        }
        if design.balanced:
            t = float(design.t[0])
            need = hb.balanced_n_condition(design.n, params.clip_radius, t, rel.beta)
            out |= {"connecting_point": t, "k_last_max": design.n // 4 - 1}
        else:
            need = hb.imbalanced_n_condition(design.n, design.total, design.gamma, rel.beta)
            out |= {"gamma": design.gamma, "m_cap": design.m_cap, "k0": design.k0}
            out["cover_fraction"] = design.theta
            if design.theta is None and private:
                warnings.append(
                    "configuration infeasible (spec §4.7): no cover set fits these m_i, A and γ, "
                    "so the noise is at its worst-case scale ≈ 2R_c/α"
                )
        out["n_condition"] = {"required_n_above": need, "holds": design.n > need}
        if private and design.n <= need:
            warnings.append(
                f"n = {design.n} does not exceed the theory's {need:.0f} (spec §4.6, §9.1): the "
                "case-(c) term 2R_c·e^(−βk) can dominate and the release be mostly noise"
            )
        out["warnings"] = warnings
        return out


class CentralHuberVector(CentralHuber):
    """HLM for vectors (d <= 8): d > 1 constants of (7), lattice Δ̃ (spec §4.4 (ii), §4.7)."""

    name: ClassVar[str] = "central-huber-vector"
    broadcast_fields: ClassVar[Mapping[str, str]] = described("trust", "statistic", "d")
    summary: ClassVar[str] = (
        "Central user-level DP Huber-loss mean of vectors (trusted server): Huber minimizer of "
        "the user means plus smooth-sensitivity Gaussian noise."
    )
    data_kind: ClassVar[DataKind] = "vector"
    params_model = HuberVectorParams  # type: ignore[assignment]  # a subclass of HuberParams
    population_probe: ClassVar[Mapping[str, Any]] = {"dimension": 1}


PROTOCOLS: tuple[Protocol[Any], ...] = (
    CentralWME(),
    CentralWMEVector(),
    CentralHuber(),
    CentralHuberVector(),
)

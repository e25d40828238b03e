"""One line on every diagnostic a catalogue protocol reports with its result
(``Result.diagnostics``), shown beside the value by ``fedldp simulate``, ``swarm``, ``run`` and
``studies result``.

A name means the same kind of thing in every protocol that reports it, plugins included (the
commands print this line beside a plugin's key of the same name: reuse a key only in its meaning
here, name anything else apart; docs/extending.md, "The result"); where protocols differ in
detail, the line says what they share. ``predicted_mse`` is where a protocol's theory of its
error goes: experiments draw it as a theory line (``theory: diagnostics.predicted_mse``).
``tests/client/test_simulate.py`` runs every protocol and checks that each diagnostic it reports
is described here.
"""

from __future__ import annotations

__all__ = ["DIAGNOSTICS", "describe_diagnostic"]

DIAGNOSTICS: dict[str, str] = {
    # --- every result (added by the simulator and the server, not the protocol)
    "participation": "per round: reports planned, dropped, late, refused and received (and users "
    "who joined too late)",
    # --- sizes and budgets
    "n": "participants whose data the estimate uses",
    "N": "samples over every participant (Σ m_i)",
    "n1": "participants in stage one (interval finding)",
    "n2": "participants in stage two (the clipped mean)",
    "n_ref": "number of users the design (h, bound, bins) was computed for",
    "n_reports": "reports aggregated",
    "m": "samples per user the design uses (hetero-frequency: JL dimension m)",
    "d": "dimension of the estimated vector",
    "padded_dimension": "dimension after zero-padding to a power of two (Hadamard transform)",
    "epsilon": "the ε the release is calibrated to (central: the smallest declared ε)",
    "epsilon_stage1": "ε spent by stage one (the interval or histogram)",
    "epsilon_stage2": "ε spent by stage two (the clipped mean)",
    "delta": "user-level means: stage two's margin Δ (clip to [L − Δ, R + Δ]); central: δ of "
    "(ε, δ)-DP",
    "charge_fraction": "fraction of its own ε each user spends (the same for everyone)",
    "trust": "local: users privatize; central: the server sees local means and must be trusted",
    "guarantee": "the differential-privacy guarantee of the release",
    "differentially_private": "false only for a paper-proxy calibration that is not DP",
    "calibration": "how the central noise is calibrated (dp, or the paper's proxy)",
    # --- user-level mean, two stages (Zhao et al. 2024, Alg. 1)
    "L": "left end of the stage-one interval: the bins k_hat-1..k_hat+1 (1-based) around the "
    "winning bin",
    "R": "right end of the stage-one interval (R − L = 3h)",
    "lo": "lower clipping bound of stage two",
    "hi": "upper clipping bound of stage two",
    "stage_one_interval": "[L, R], the interval stage one found around the mean",
    "stage_one_score": "stage-one score Σ min(ε_i², 1) of its participants (the §1.5 "
    "feasibility score)",
    "stage_one_messages": "privatized messages sent in stage one",
    "stage_two_messages": "privatized messages sent in stage two",
    "h": "bin width of the stage-one histogram",
    "bound": "range bound of the data the design assumes (moment bound for heavy tails)",
    "c_star": "the design constant c* that sizes the stage-one bins",
    "k_hat": "the stage-one histogram's winning bin, 1-based as in the paper (bin j of "
    "docs/clients.md's 0-based numbering is k_hat = j + 1), per component",
    "n_bins": "bins of the stage-one histogram",
    "heavy_tail": "true when the heavy-tailed variant (Alg. 1-HT) ran",
    "regime": "privacy regime that split coordinates over groups (low, medium, high ε)",
    "groups": "user groups, each estimating its own coordinates",
    "components": "coordinates (components) estimated",
    "components_per_group": "coordinates each user group estimates",
    "coordinate_mse": "predicted mean squared error of each coordinate",
    "component_mse": "predicted mean squared error of each estimated component",
    "coefficients": "Kashin coefficients per vector (frame size)",
    "kashin_constant": "the Kashin level K the frame was built for",
    "kashin_observed": "the largest Kashin coefficient ratio observed for the frame",
    "hadamard": "Hadamard dimension of the label encoding",
    # --- learning (Algs. 3–5)
    "gradient_rounds": "gradient rounds run (one disjoint user group each)",
    "loss": "loss minimized (squared or logistic)",
    "regularization": "ridge regularization λ",
    "step": "step size of the gradient rounds",
    "trajectory": "θ_t after each gradient round",
    "bins_per_axis": "bins per feature axis of the partition of [0, 1]^d",
    "n_cells": "cells of the partition (or tree) the predictor is constant on",
    "p_hat": "estimated share of users per cell",
    "q_hat": "estimated label mean (or sign margin) per cell",
    # --- heterogeneous ε (Aliakbarpour et al. 2025)
    "S": "Σ ε_i², the paper's effective sample size (that of the Duchi weights)",
    "S_RR": "Σ tanh(ε_i/2)², the effective sample size of randomized response",
    "W": "Σ ε_i²/(1 + ε_i²), the effective sample size of the Laplace weights",
    "weights": "weighting of the users' reports (paper's optimal, or uniform)",
    "sum_w2": "Σ w_i² of the weights (the variance factor)",
    "raw_estimate": "estimate before the final clipping or projection onto the data's domain",
    "projected": "estimate after projection onto the probability simplex",
    "variance_bound": "theoretical variance bound of the estimate",
    "jl_seed": "public seed of the Johnson–Lindenstrauss projection",
    # --- classic means (Duchi, Laplace, PM, HM: fedldp.protocol.classic.means)
    "worst_case_mse": "the mean squared error the papers' worst-case variance formula bounds "
    "(every user's mean at its mechanism's worst point of [-1, 1])",
    "sampled_coordinates": "smallest and largest k: coordinates each user reports (Alg. 4 of "
    "Wang et al. 2019, k = max(1, min(d, floor(ε/2.5))))",
    # --- central trust (Zhao et al. NeurIPS 2024)
    "estimator": "the central estimator (wme: winsorized mean; huber: Huber loss)",
    "noise": "distribution of the added noise (laplace or gaussian)",
    "noise_scale": "scale of the added noise",
    "noise_std": "standard deviation of the added noise",
    "interval": "clipping interval the winsorized mean used",
    "interval_width": "width of the clipping interval",
    "histogram_bound": "range searched by the stage-one histogram",
    "tau": "clipping radius τ of the winsorized mean",
    "tau_scale": "t·σ: τ = tau_scale/√(N/n) (the parameter)",
    "max_weight": "largest weight of any one user (bounds its influence)",
    "balanced": "true when every user holds the same number of samples",
    "users": "balanced or imbalanced users (the Huber design)",
    "alpha": "Huber design constant α",
    "beta": "Huber design constant β",
    "huber_scale": "A = t·σ: the Huber connecting points T_i = A/√(m_i ∧ m_c) (the parameter)",
    "clip_radius": "R_c: the estimate is clipped to the ball B(0, R_c)",
    "connecting_point": "the Huber connecting point T (balanced users: A/√m)",
    "k_last_max": "largest index of the imbalanced weight schedule",
    "n_condition": "the users the paper's guarantee needs, and whether there are that many",
    "internal": "simulation only, never in a server's result: data-dependent values the "
    "guarantee does not cover (central Huber: S, the noise std S/α, Δ̃, Z, the case of G(D, 0), "
    "the case-(c) term and its share of S)",
    # --- semi-feature LDP (Ma, Jia, Yang) and baselines
    "depth": "depth of the tree partition",
    "leaves": "leaves of the tree",
    "tree": "the fitted tree (features, thresholds, leaf values)",
    "feature_order": "order in which features split the tree",
    "bins": "bins per privatized feature",
    "histogram_dims": "features the histogram spans",
    "cell_reports": "reports of the cell round (round 2)",
    "label_reports": "reports of the label round (round 1)",
    "paired": "users whose label and cell reports were paired",
    "denominator": "estimated users per leaf (the leaf means' denominators)",
    "fallback_cells": "leaves below the density floor, given the overall label mean",
    "max_potential_cells": "most cells a user's public features allow",
    "mean_potential_cells": "cells a user's public features allow, on average",
    "rule15": "the tuned variant's choice by the paper's rule (15): s, p, t*, objective",
    "cells": "cells of the classical-LDP histogram",
    "mass": "estimated share of users per histogram cell",
    "truncated_cells": "cells below the truncation mass, given the fill value",
    "predicted_mse": "mean squared error the design's theory predicts (a vector's: squared ℓ2, "
    "the sum of its coordinates' variances)",
    # --- memoizing protocols (docs/longitudinal.md)
    "memoize": "whether the permanent response is memoized per (device, value) across studies",
    # --- classic frequency oracles (Wang et al. 2017 and the others of protocol/classic)
    "sampling_factor": "Σw_i²/(Σw_i)²: users drawn from a law f add this times Σ f_x(1 − f_x) to "
    "the squared error against f",
}


def describe_diagnostic(name: str) -> str:
    """The line on ``name`` (empty when the catalogue has none)."""
    return DIAGNOSTICS.get(name, "")

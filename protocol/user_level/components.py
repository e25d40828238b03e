"""Alg 2 of Zhao et al. 2024 (arXiv:2405.17079) as an engine: many Alg-1 calls in parallel.

Spec: user-level-ldp.md §3.3 (regimes and grouping), §1.4 (messages), §1.6 (rounds), §4.1
(composition), §5.3 (predictions).

Every multi-dimensional protocol of the paper reduces a user's data to C *components*, scalar local
averages ``Ȳ_ic = (1/m) Σ_j φ_c(X_ij)`` with a public bound ``|φ_c| ≤ D_c`` (ℓ∞ coordinates,
Kashin or Hadamard coefficients, gradient coordinates, Hadamard-encoded labels), estimates each
component's mean with Alg 1, and decodes. How an invocation is laid out (regime, groups, the users'
assignment, the components' designs) is ``fedldp.protocol.user_level.layout``; this module holds
the steps that run on a layout:

* Client steps ``stage_one_reports`` and ``stage_two_reports``: a group with r_g components sends
  r_g histograms (stage I, shape (r_max, B)) or r_g scalars (stage II, shape (r_max,)); rows past
  r_g are padding, sent as zeros (no data, no noise) and ignored by the server. User i spends
  ``ε_c,i = ε_i·f_g`` on each of its components (the per-user rule of ``layout``).
* Server steps ``aggregate_stage_one`` and ``aggregate_stage_two``, streamed over report chunks.
  Stage-I histograms are weighted ∝ ε_c,i² and stage-II reports by inverse variance, per
  component, as in ``fedldp.protocol.user_level.two_stage``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from fedldp.protocol.api import (
    JSON,
    BoolArray,
    ErrorBar,
    FloatArray,
    IntArray,
    RandomSource,
    ReportChunk,
    check_epsilons,
    laplace_reach,
    laplace_scale,
)
from fedldp.protocol.user_level import two_stage as ts
from fedldp.protocol.user_level.layout import Families, Layout

__all__ = [
    "Layout",  # re-exported from layout: client/behaviour.py reads comp.Layout
    "aggregate_stage_one",
    "aggregate_stage_two",
    "gather_components",
    "l2_error_bar",
    "report_bounds",
    "stage_one_reports",
    "stage_two_reports",
]

# --------------------------------------------------------------------------- client side


def gather_components(
    values: FloatArray, layout: Layout, group: IntArray
) -> tuple[FloatArray, BoolArray, IntArray]:
    """Each user's own components from all C of them: (n, r_max) values (0 in padding), the mask
    of real entries and their component indices; ``group`` is each user's group."""
    g = np.asarray(group, dtype=np.int64)
    if np.any((g < 0) | (g >= layout.n_groups)):
        raise ValueError("group index out of range for this layout")
    if values.ndim != 2 or values.shape[1] != layout.n_components:
        raise ValueError(f"expected (n, {layout.n_components}) component values")
    index, mask = _component_index(layout, g)
    picked = np.take_along_axis(values, index, axis=1)
    return np.where(mask, picked, 0.0), mask, index


def _component_index(layout: Layout, group: IntArray) -> tuple[IntArray, BoolArray]:
    """Component index of each (user, slot) and the mask of real slots; a padding slot points at
    a real component (the last), so every index is valid and the mask says what counts."""
    offsets = np.arange(layout.r_max, dtype=np.int64)
    mask = offsets[None, :] < layout.counts[group][:, None]
    index = np.minimum(layout.starts[group][:, None] + offsets[None, :], layout.n_components - 1)
    return index, mask


def _per_component_epsilon(charge: FloatArray, layout: Layout, group: IntArray) -> FloatArray:
    """ε_c,i from a member's round charge r_g·f_g·ε_i: the charge split evenly over r_g."""
    return np.asarray(check_epsilons(charge) / layout.counts[group], dtype=np.float64)


def stage_one_reports(
    values: FloatArray,
    layout: Layout,
    families: Families,
    group: IntArray,
    charge: FloatArray,
    rng: RandomSource,
) -> FloatArray:
    """Stage-I messages of a block (§1.4): for each of its r_g components, the one-hot bin of the
    clamped local average plus i.i.d. Lap(2/ε_c,i); shape (n, r_max, B), padding rows zero."""
    own, mask, index = gather_components(values, layout, group)
    n, r = own.shape
    bins = np.zeros((n, r), dtype=np.int64)
    fam = families.family[index]
    for f, design in enumerate(families.designs):
        hit = mask & (fam == f)
        if np.any(hit):
            bins[hit] = ts.bin_index(own[hit], design)
    onehot = np.zeros((n, r, families.n_bins), dtype=np.float64)
    onehot[np.arange(n)[:, None], np.arange(r)[None, :], bins] = 1.0
    scale = laplace_scale(ts.STAGE_ONE_SENSITIVITY, _per_component_epsilon(charge, layout, group))
    noise = np.asarray(rng.laplace(0.0, 1.0, size=onehot.shape), dtype=np.float64)
    report = onehot + np.asarray(scale, dtype=np.float64)[:, None, None] * noise
    return np.where(mask[:, :, None], report, 0.0)


def stage_two_reports(
    values: FloatArray,
    layout: Layout,
    families: Families,
    interval: JSON,
    group: IntArray,
    charge: FloatArray,
    rng: RandomSource,
) -> FloatArray:
    """Stage-II messages (§3.1 step 4): ``clip(Ȳ_c, lo_c, hi_c) + Lap((hi_c − lo_c)/ε_c,i)`` per
    component (heavy-tail families clamp to [−D_c, D_c] first); shape (n, r_max)."""
    own, mask, index = gather_components(values, layout, group)
    lo = np.asarray(interval["lo"], dtype=np.float64)[index]
    hi = np.asarray(interval["hi"], dtype=np.float64)[index]
    if not (np.all(np.isfinite(lo) & np.isfinite(hi)) and np.all(hi > lo)):
        raise ValueError("stage-two intervals must be finite with hi > lo")
    radius = families.column("bound")[index]
    heavy = np.array([d.heavy_tail for d in families.designs])[families.family][index]
    y = np.where(heavy, np.clip(own, -radius, radius), own)
    clipped = np.clip(y, lo, hi)
    eps_c = _per_component_epsilon(charge, layout, group)
    noise = np.asarray(rng.laplace(0.0, 1.0, size=own.shape), dtype=np.float64)
    report = clipped + (hi - lo) / eps_c[:, None] * noise
    return np.where(mask, report, 0.0)


def report_bounds(
    broadcast: JSON, stage: int, group: IntArray, charge: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Plausibility bounds of a member's stage-I (n, r_max, B) or stage-II (n, r_max) message:
    a real component's entries ± the reach of their Laplace noise (0/1 bins at 2/ε_c,i; the
    clip interval [lo_c, hi_c] at (hi_c − lo_c)/ε_c,i), padding entries exactly 0
    (``fedldp.protocol.mechanisms.plausibility``)."""
    layout = Layout.from_json(broadcast["layout"])
    families = Families.from_json(broadcast["families"])
    index, mask = _component_index(layout, group)
    eps_c = _per_component_epsilon(charge, layout, group)
    if stage == 0:
        r = laplace_reach(laplace_scale(ts.STAGE_ONE_SENSITIVITY, eps_c))[:, None, None]
        shape = (*mask.shape, families.n_bins)
        lo = np.where(mask[:, :, None], -r, 0.0)
        hi = np.where(mask[:, :, None], 1.0 + r, 0.0)
        return np.broadcast_to(lo, shape).copy(), np.broadcast_to(hi, shape).copy()
    lo_c = np.asarray(broadcast["lo"], dtype=np.float64)[index]
    hi_c = np.asarray(broadcast["hi"], dtype=np.float64)[index]
    r = laplace_reach((hi_c - lo_c) / eps_c[:, None])
    return np.where(mask, lo_c - r, 0.0), np.where(mask, hi_c + r, 0.0)


# --------------------------------------------------------------------------- server side


def _group_norms(layout: Layout, charge: FloatArray, group: IntArray, power: float) -> FloatArray:
    """Σ over a group's planned members of ε_c,i^power, per group."""
    eps_c = _per_component_epsilon(charge, layout, group)
    return np.asarray(
        np.bincount(group, weights=eps_c**power, minlength=layout.n_groups), dtype=np.float64
    )


def aggregate_stage_one(
    layout: Layout,
    families: Families,
    planned_charge: FloatArray,
    planned_group: IntArray,
    chunks: Iterable[ReportChunk],
) -> JSON:
    """Per component: the ε²-weighted histogram sums (weights normalised over the planned stage-I
    members of its group, §8), the modal bin k̂ and the interval [L, R], lo = L − Δ, hi = R + Δ."""
    norms = _group_norms(layout, planned_charge, planned_group, 2.0)
    b = families.n_bins
    sums = np.zeros(layout.n_components * b, dtype=np.float64)
    reports = np.zeros(layout.n_components, dtype=np.int64)
    for chunk in chunks:
        g = np.asarray(chunk.group, dtype=np.int64)
        eps_c = _per_component_epsilon(chunk.epsilon, layout, g)
        weight = eps_c**2 / norms[g]
        index, mask = _component_index(layout, g)
        payload = np.asarray(chunk.payloads, dtype=np.float64).reshape(g.size, layout.r_max, b)
        cells = (index[:, :, None] * b + np.arange(b)[None, None, :])[mask]
        contrib = (weight[:, None, None] * payload)[mask]
        sums += np.bincount(cells.reshape(-1), contrib.reshape(-1), minlength=sums.size)
        reports += np.bincount(index[mask], minlength=layout.n_components)
    if not np.any(reports):
        raise ValueError("no stage-one reports to aggregate")
    table = sums.reshape(layout.n_components, b)
    k_hat = np.zeros(layout.n_components, dtype=np.int64)
    left = np.zeros(layout.n_components)
    right = np.zeros(layout.n_components)
    for f, design in enumerate(families.designs):
        rows = families.family == f
        k_hat[rows], left[rows], right[rows] = ts.select_interval(table[rows], design)
    delta = families.column("delta")
    return {
        "k_hat": (k_hat + 1).tolist(),  # the paper's 1-based bin index
        "L": left.tolist(),
        "R": right.tolist(),
        "lo": (left - delta).tolist(),
        "hi": (right + delta).tolist(),
        "n_reports": reports.tolist(),
    }


def _stage_two_variances(
    families: Families, width: FloatArray, eps_c: FloatArray, component: IntArray
) -> FloatArray:
    """Per-report variance bound σ_c²/m + 2((hi_c − lo_c)/ε_c,i)² (§5.3, §8)."""
    m = families.designs[0].m
    return np.asarray(
        families.column("sample_var")[component] / m + 2.0 * (width[component] / eps_c) ** 2,
        dtype=np.float64,
    )


def aggregate_stage_two(
    layout: Layout,
    families: Families,
    interval: JSON,
    chunks: Iterable[ReportChunk],
) -> JSON:
    """Per component: the inverse-variance weighted mean of the stage-II scalars and its
    variance Σw²V/(Σw)² (weights renormalise over whoever reported)."""
    width = np.asarray(interval["hi"], dtype=np.float64) - np.asarray(
        interval["lo"], dtype=np.float64
    )
    c = layout.n_components
    sum_w = np.zeros(c)
    sum_wz = np.zeros(c)
    sum_w2v = np.zeros(c)
    reports = np.zeros(c, dtype=np.int64)
    for chunk in chunks:
        g = np.asarray(chunk.group, dtype=np.int64)
        eps_c = _per_component_epsilon(chunk.epsilon, layout, g)
        index, mask = _component_index(layout, g)
        comp = index[mask]
        eps_entry = np.broadcast_to(eps_c[:, None], mask.shape)[mask]
        z = np.asarray(chunk.payloads, dtype=np.float64).reshape(g.size, layout.r_max)[mask]
        v = _stage_two_variances(families, width, eps_entry, comp)
        w = 1.0 / v
        sum_w += np.bincount(comp, w, minlength=c)
        sum_wz += np.bincount(comp, w * z, minlength=c)
        sum_w2v += np.bincount(comp, w * w * v, minlength=c)
        reports += np.bincount(comp, minlength=c)
    if np.any(reports == 0):
        missing = int(np.flatnonzero(reports == 0)[0])
        raise ValueError(f"component {missing} received no stage-two report")
    return {
        "estimate": (sum_wz / sum_w).tolist(),
        "predicted_mse": (sum_w2v / sum_w**2).tolist(),
        "n_reports": reports.tolist(),
    }


def l2_error_bar(variances: FloatArray, level: float, decode_norms: FloatArray) -> ErrorBar:
    """A (1 − β) ℓ2 error bar for a decoded estimate Wᵀθ̂ with independent, approximately normal
    component errors of variances v_c and a decoding matrix W of operator norm ≤ 1.

    E‖Wᵀe‖² = Σ_c v_c‖W_c‖² (``decode_norms`` = ‖W_c‖²), and ‖Wᵀe‖ is a Lipschitz function of a
    Gaussian vector with constant ≤ √(max v), so P(‖Wᵀe‖ > √(Σ v_c‖W_c‖²) + √(2 max v ln(1/β)))
    ≤ β (Gaussian concentration; the normality is a CLT approximation).
    """
    v = np.asarray(variances, dtype=np.float64)
    beta = 1.0 - level
    mean_sq = float(np.sum(v * decode_norms))
    half = math.sqrt(mean_sq) + math.sqrt(2.0 * float(v.max()) * math.log(1.0 / beta))
    return ErrorBar(half, level, "clt-gaussian-concentration", approximate=True, norm="l2")

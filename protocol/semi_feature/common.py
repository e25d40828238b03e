"""Semi-feature LDP (Ma, Jia and Yang, "Locally Private Estimation with Public Features"; spec
public-features-ldp.md): what HistOfTree (``fedldp.protocol.semi_feature.histoftree``) and its
baselines (``fedldp.protocol.semi_feature.hist_ldp`` and
``fedldp.protocol.semi_feature.tree_baselines``) share.

Data layout ("semi-feature" labeled data): one sample per user (§1.1); ``UserData.values`` is
``(n, 2d)``: the d features in [0, 1] then the user's privacy mask W_i (1 = private), see
``split_features``; ``labels`` (n,). Public information travels as enrollment metadata:
``mask`` (d values 0/1) and ``public`` (the public feature values, 0.0 placeholders where the mask
is 1: private values are never sent), kept by slot in ``Plan.metadata`` (``enrollment``).
Labels are privatized by ``label_report`` (Laplace on the centred, clipped label, §2.2).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import ConfigDict, Field, model_validator

from fedldp.protocol.api import (
    BoolArray,
    FloatArray,
    Params,
    RandomSource,
    UserData,
    around,
    check_epsilons,
    laplace,
    laplace_reach,
    laplace_scale,
)
from fedldp.protocol.core.base.bounds import Location, check_range

__all__ = [
    "MAX_DIMENSION",
    "MAX_HIST_CELLS",
    "MAX_RR_CELLS",
    "POPULATION_PROBE",
    "SEMI_POPULATION_RULE",
    "SemiParams",
    "enrollment",
    "features_of",
    "label_bounds",
    "label_report",
    "plan_epsilons",
    "probe_metadata",
    "semi_feature_block",
    "split_features",
]

MAX_DIMENSION = 64
MAX_HIST_CELLS = 1 << 12
"""Largest Hist grid t^d: each user sends 2·t^d numbers."""
MAX_RR_CELLS = 1 << 12
"""Largest partition for unary RR: each user sends one bit per cell."""


# --------------------------------------------------------------------------- data and metadata


def split_features(values: ArrayLike, d: int) -> tuple[FloatArray, BoolArray]:
    """The semi-feature layout: rows ``(n, 2d)`` = d features, then the mask (1 = private).
    Features are clipped into [0, 1] (§1.1: min–max scaled); ValueError on anything else."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.shape[1] != 2 * d:
        raise ValueError(
            f"semi-feature data has rows of 2d = {2 * d} values (features, then the privacy "
            f"mask), got shape {v.shape}"
        )
    x, w = v[:, :d], v[:, d:]
    if not np.all(np.isfinite(x)):
        raise ValueError("features must be finite")
    if not np.all((w == 0.0) | (w == 1.0)):
        raise ValueError("the privacy mask must be 0 (public) or 1 (private)")
    return np.clip(x, 0.0, 1.0), w == 1.0


def semi_feature_block(data: UserData, d: int) -> tuple[FloatArray, BoolArray, FloatArray]:
    """Features (n, d), mask (n, d) and labels (n,) of a block of one-sample users."""
    if data.labels is None:
        raise ValueError("semi-feature protocols take labeled samples")
    if np.any(data.counts != 1):
        raise ValueError("semi-feature protocols take one sample per user (spec §1.1)")
    x, w = split_features(data.values, d)
    y = np.asarray(data.labels, dtype=np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError("labels must be finite")
    return x, w, y


def enrollment(
    metadata: Mapping[str, NDArray[Any]], n: int, d: int
) -> tuple[BoolArray, FloatArray, list[str]]:
    """The participants' masks (n, d) and public features (n, d) from enrollment metadata.

    ValueError when missing or malformed; public values must lie in [0, 1]. A value sent where
    the mask is 1 is dropped (set to 0.0) with a warning: it was never needed.
    """
    if "mask" not in metadata or "public" not in metadata:
        raise ValueError(
            "semi-feature protocols need every participant's enrollment metadata 'mask' and "
            f"'public' ({d} values each)"
        )
    mask = np.asarray(metadata["mask"], dtype=np.float64)
    public = np.asarray(metadata["public"], dtype=np.float64)
    if mask.shape != (n, d) or public.shape != (n, d):
        raise ValueError(
            f"metadata 'mask' and 'public' must hold {d} values per participant, got shapes "
            f"{mask.shape} and {public.shape}"
        )
    if not np.all((mask == 0.0) | (mask == 1.0)):
        raise ValueError("metadata 'mask' values must be 0 (public) or 1 (private)")
    w = mask == 1.0
    shown = ~w & ~((public >= 0.0) & (public <= 1.0))
    if np.any(shown):
        raise ValueError("public feature values must be finite and min–max scaled into [0, 1]")
    warnings = []
    leaked = w & (public != 0.0)
    if np.any(leaked):
        warnings.append(
            f"{int(np.count_nonzero(leaked.any(axis=1)))} participant(s) enrolled a value for a "
            "feature they marked private; it is ignored (the placeholder is 0.0)"
        )
    return w, np.where(w, 0.0, np.nan_to_num(public)), warnings


def plan_epsilons(epsilon: FloatArray) -> FloatArray:
    eps = check_epsilons(epsilon)
    if eps.ndim != 1 or eps.size < 2:
        raise ValueError(f"this protocol needs at least 2 participants, got {eps.size}")
    return eps


def features_of(params: SemiParams, features: ArrayLike) -> FloatArray:
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != params.dimension or not np.all(np.isfinite(x)):
        raise ValueError(f"features must be finite rows of dimension {params.dimension}")
    return np.clip(x, 0.0, 1.0)


class SemiParams(Params):
    """Shared by every semi-feature protocol: d and the public label bounds (§2.2)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    dimension: int = Field(ge=1, le=MAX_DIMENSION, description="d: features lie in [0, 1]^d")
    label_low: Location = Field(description="y_lo: public lower label bound (labels are clipped)")
    label_high: Location = Field(description="y_hi: public upper label bound")

    @model_validator(mode="after")
    def _bounds(self) -> SemiParams:
        check_range(self.label_low, self.label_high, "label_high > label_low")
        return self

    @property
    def centre(self) -> float:
        """m = (y_lo + y_hi)/2."""
        return (self.label_low + self.label_high) / 2.0

    @property
    def half_range(self) -> float:
        """M = (y_hi − y_lo)/2."""
        return (self.label_high - self.label_low) / 2.0


POPULATION_PROBE: dict[str, Any] = {"dimension": 1, "label_low": 0.0, "label_high": 1.0}
"""Required parameters for the catalogue's minimum population: it needs 2 participants whatever
the dimension and label bounds (``plan_epsilons``); larger grids may be refused whatever n."""

SEMI_POPULATION_RULE = (
    "at least 2 participants, whatever the dimension, label bounds and masks (parameters that "
    "ask for more cells than supported are refused whatever the population)"
)


def probe_metadata(n: int, d: int) -> dict[str, NDArray[Any]]:
    """Enrollment metadata of ``n`` participants with every feature public (value 0): what
    ``min_participants`` plans with (the minimum does not depend on the masks)."""
    return {"mask": np.zeros((n, d)), "public": np.zeros((n, d))}


def label_report(
    y: FloatArray, params: SemiParams, epsilon: FloatArray, rng: RandomSource
) -> FloatArray:
    """§2.2 [PROPOSAL]: clip(y − m, −M, M) + Lap((y_hi − y_lo)/ε_i), an ε_i-LDP label on the
    centred scale (sensitivity 2M). One Laplace draw per user."""
    centred = np.clip(y - params.centre, -params.half_range, params.half_range)
    return laplace(centred, laplace_scale(2.0 * params.half_range, epsilon), rng)


def label_bounds(
    params: SemiParams, epsilon: FloatArray, ndim: int = 0
) -> tuple[FloatArray, FloatArray]:
    """Plausibility bounds of ``label_report``: [−M, M] ± the reach of Lap(2M/ε_i)
    (``fedldp.protocol.mechanisms.plausibility``), shaped for ``ndim`` payload dimensions."""
    m = params.half_range
    return around(-m, m, laplace_reach(laplace_scale(2.0 * m, check_epsilons(epsilon))), ndim)

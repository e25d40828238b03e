"""What the fields of the catalogue's round broadcasts mean (docs/clients.md).

A round's broadcast (a task's ``broadcast``) carries every public constant a client needs to
compute its payload. ``BROADCAST_GLOSSARY`` names every field any catalogue protocol sends; each
protocol lists the fields it sends in ``Protocol.broadcast_fields`` (with its own wording where a
field means something particular to it), and the OpenAPI schema of a task repeats the glossary.
A test runs every protocol and checks that each field it broadcasts is described.
"""

from __future__ import annotations

__all__ = ["BROADCAST_GLOSSARY", "described", "glossary_text"]

BROADCAST_GLOSSARY: dict[str, str] = {
    # user-level two-stage mean (Zhao et al. 2024, Alg. 1) and its baselines
    "bound": "D: the samples' support bound |x| <= D (heavy tails: the clip radius of a user's "
    "mean); stage one clamps the user's mean to [-D, D]",
    "m": "samples per user the protocol uses: the user's mean is over its first m samples",
    "h": "stage-one bin width (4D/sqrt(m)): bin j (0-based) is [-D + j*h, -D + (j+1)*h)",
    "n_bins": "B, the number of stage-one bins, the length of the histogram payload; a mean at "
    "or beyond the last edge falls in bin B-1",
    "delta": "margin Δ the server adds around the stage-one interval [L, R] (public, for reading)",
    "n_ref": "N_ref, the users of the top-level invocation (enters Δ; public, for reading)",
    "sample_var": "the public bound on one sample's variance (server weights only)",
    "heavy_tail": "true: clamp the user's mean to [-bound, bound] before clipping to [lo, hi]",
    "sensitivity": "ℓ1 sensitivity of this round's message: add Laplace noise of scale "
    "sensitivity/ε to each payload entry, ε being the task's epsilon",
    "L": "left end of the stage-one interval [L, R]: the three bins j-1..j+1 around the bin j "
    "(0-based; the result's k_hat is j+1) the server selected, L = -D + (j-1)*h (public, for "
    "reading)",
    "R": "right end of the stage-one interval [L, R], R = -D + (j+2)*h = L + 3h (public, for "
    "reading)",
    "lo": "lower end of the clip interval (user-mean: clip the mean to [lo, hi]; multi-"
    "dimensional protocols: a list, one per coordinate of the user's group)",
    "hi": "upper end of the clip interval (see lo)",
    # multi-dimensional user-level protocols (Alg. 2, 2-K, 2-H) and learning (Algs. 3-5)
    "invocation": "which Alg-1 invocation (coordinate group) this round belongs to",
    "layout": "how the d coordinates are split over user groups (the privacy regime's groups)",
    "families": "the user groups of each invocation (public plan metadata)",
    "reference_epsilon": "the reference ε the regime was chosen from; each user spends the same "
    "fraction of its own ε",
    "c_star": "the constant c* of the two-stage design (public, for reading)",
    "frame_seed": "public seed of the Kashin frame: the client rebuilds the same frame from it",
    "kashin_observed": "the frame's observed Kashin constant (a check the client may repeat)",
    "bins_per_axis": "bins per feature axis of [0, 1]^d (nonparametric classify/regress)",
    "n_cells": "number of feature cells (bins_per_axis^d)",
    "hadamard": "size of the Hadamard code used to encode a cell's label",
    "step": "gradient step size of the optimization",
    "theta": "the model θ_t at which the user computes its local gradient",
    # heterogeneous-ε protocols (Aliakbarpour et al. 2025)
    "input": "hetero-mean-rr: 'binary' (the user's mean is ±1) or 'interval' (a mean in "
    "[-1, 1], stochastically rounded to ±1 first)",
    "dimension": "d, the length of the user's vector (or of the public feature vector)",
    "radius": "ℓ2 radius r of the user's vector (Duchi et al.'s mechanism on the r-ball)",
    "jl_seed": "public seed of the Johnson-Lindenstrauss projection of the frequency oracle",
    "k": "domain size: items are 0..k-1",
    # central trust
    "trust": "'central': the payload is the user's statistic itself, sent in the clear",
    "statistic": "what the statistic is: the user's local mean (d values), then its sample count",
    "d": "dimension of the local mean",
    # semi-feature LDP (Ma, Jia, Yang)
    "cells": "number of cells of the histogram over features",
    "bins": "number of bins of the label range [label_low, label_high]",
    "label_low": "lower end of the label range",
    "label_high": "upper end of the label range",
    "partition": "the server's tree partition of feature space (round 2 of HistOfTree)",
    "mechanism": "how the cell index is privatized (HistOfTree round 2)",
    "labels": "round-one noisy labels (server side only: not sent with tasks)",
    "label_mean": "round-one label mean (server side only: not sent with tasks)",
}


def glossary_text() -> str:
    """The glossary as one line per field (the OpenAPI description of a task's broadcast)."""
    return "\n".join(f"- `{key}`: {text}" for key, text in BROADCAST_GLOSSARY.items())


def described(*keys: str, **overrides: str) -> dict[str, str]:
    """A protocol's ``broadcast_fields``: the glossary's text of ``keys``, with ``overrides``
    where a field means something particular to that protocol."""
    unknown = set(keys) - BROADCAST_GLOSSARY.keys() - overrides.keys()
    if unknown:
        raise ValueError(f"broadcast fields without a description: {sorted(unknown)}")
    return {key: overrides.get(key) or BROADCAST_GLOSSARY[key] for key in keys}

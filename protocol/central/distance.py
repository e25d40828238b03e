"""Δ̃, the Hamming distance from the users' means to a fixed, data-independent set (Zhao et al.,
NeurIPS 2024, §4.4; spec huber-user-level-dp.md §4.4–4.7), which replaces Δ(D) in HLM's smooth
sensitivity: exact for d = 1 balanced users, lattice balls for d > 1, the cover of radii for
imbalanced users. Every set is chosen from public quantities only (n, d, the radii), so Δ̃ stays a
distance to a fixed set (the validity principle of §4.4)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from fedldp.protocol.api import FloatArray, IntArray, as_user_means, check_positive

__all__ = [
    "LATTICE_CANDIDATES",
    "delta_cover_1d",
    "delta_exact_1d",
    "delta_lattice",
    "lattice_spacing",
]


LATTICE_CANDIDATES = 1 << 23
"""Most lattice candidates (users × box points) a Δ̃ lattice search may enumerate. A coarser
spacing is chosen from public quantities only (n, d, the radii) when the spec's spacing exceeds
it, which keeps Δ̃ a distance to a fixed set (§4.4 validity principle)."""

_CHUNK = 1 << 21  # candidates per vectorised block of the lattice search


def delta_exact_1d(y: ArrayLike, t: float) -> int:
    """Exact Δ(D) of (15) for d = 1, balanced users (§4.4 (i)), in O(n log n).

    Δ = n − L* with L* the largest number of kept users (a contiguous window of the sorted means)
    for which some centre c has |y_i − c| < T/2 on the window and |Σ_window (y_i − c)| < kT/2,
    k = n − L (the k replaced users cancel the residual). 0 when max|y_i − ȳ| < T/2.
    """
    ys = np.sort(np.asarray(y, dtype=np.float64).ravel())
    n = ys.size
    half = 0.5 * check_positive(t, "T")
    if n == 0:
        raise ValueError("no users")
    if np.max(np.abs(ys - ys.mean())) < half:
        return 0
    prefix = np.concatenate(([0.0], np.cumsum(ys)))

    def feasible(size: int) -> bool:
        k = n - size
        left = np.arange(0, n - size + 1)
        mean = (prefix[left + size] - prefix[left]) / size
        slack = k * half / size
        lo = np.maximum(ys[left + size - 1] - half, mean - slack)
        hi = np.minimum(ys[left] + half, mean + slack)
        return bool(np.any(lo < hi))

    good, bad = 1, n  # feasible(1) always holds (k >= 1); L = n was ruled out above
    while bad - good > 1:
        mid = (good + bad) // 2
        if feasible(mid):
            good = mid
        else:
            bad = mid
    return n - good


def delta_cover_1d(y: ArrayLike, radii: ArrayLike) -> int:
    """n − max_c #{i : |y_i − c| < r_i}: the Hamming distance to the cover set Q″ (§4.7), d = 1.

    A sweep over the 2n endpoints of the open intervals (y_i − r_i, y_i + r_i), ends before starts
    at ties.
    """
    yy = np.asarray(y, dtype=np.float64).ravel()
    rr = np.broadcast_to(np.asarray(radii, dtype=np.float64), yy.shape)
    pos = np.concatenate((yy - rr, yy + rr))
    kind = np.concatenate((np.ones(yy.size, np.int64), np.zeros(yy.size, np.int64)))  # 1 = start
    order = np.lexsort((kind, pos))
    running = np.cumsum(np.where(kind[order] == 1, 1, -1))
    return int(yy.size - max(0, int(running.max())))


def _box_width(radii: FloatArray, h: float) -> IntArray:
    """Lattice values per coordinate that can lie within r of a point: ⌊2r/h⌋ + 1."""
    return (np.floor(2.0 * radii / h) + 1).astype(np.int64)


def lattice_spacing(radii: ArrayLike, h0: float, d: int, cap: int = LATTICE_CANDIDATES) -> float:
    """h0·2^j for the smallest j >= 0 with Σ_i (⌊2r_i/h⌋ + 1)^d <= cap.

    Depends on the public radii, d and n only, so Δ̃ stays a distance to a fixed set.
    """
    rr = np.asarray(radii, dtype=np.float64)
    h = check_positive(h0, "h0")
    while float(np.sum(_box_width(rr, h).astype(np.float64) ** d)) > cap:
        h *= 2.0
    return h


def delta_lattice(y: ArrayLike, radii: ArrayLike, h: float) -> int:
    """n − max_{g ∈ hZ^d} #{i : ‖y_i − g‖ < r_i}: the Hamming distance to the lattice-ball set
    (§4.4 (ii) with r_i = T/4 and h = T/8; §4.7 with r_i = θ′T_i).

    Each user's candidate lattice points are the box of ⌊2r_i/h⌋ + 1 values per coordinate from
    ⌈(y_ij − r_i)/h⌉, kept when strictly inside the ball; the points are counted with np.unique.
    """
    ym = as_user_means(y)
    n, d = ym.shape
    rr = np.broadcast_to(np.asarray(radii, dtype=np.float64), (n,))
    width = _box_width(rr, h)
    first = np.ceil((ym - rr[:, None]) / h)
    # lattice indices must fit int64 with room for the box (|index| < 2^62), else the cast below
    # would give garbage indices with only a numpy warning
    if not np.all(np.abs(first) < 2.0**62):
        raise ValueError(
            f"user means far from the lattice's scale (|y|/h up to {np.max(np.abs(ym)) / h:.3g}): "
            "no lattice index fits 64 bits; give data on the scale the parameters declare"
        )
    start = first.astype(np.int64)
    hits: list[IntArray] = []
    for w in np.unique(width):
        users = np.flatnonzero(width == w)
        grid = np.stack(np.meshgrid(*([np.arange(w)] * d), indexing="ij"), -1).reshape(-1, d)
        block = max(1, _CHUNK // grid.shape[0])
        for a in range(0, users.size, block):
            idx = users[a : a + block]
            points = start[idx][:, None, :] + grid[None, :, :]  # (b, w^d, d)
            dist2 = np.sum((points * h - ym[idx][:, None, :]) ** 2, axis=-1)
            inside = dist2 < (rr[idx] ** 2)[:, None]
            hits.append(points[inside])
    found = np.concatenate(hits) if hits else np.zeros((0, d), np.int64)
    if found.shape[0] == 0:
        return int(n)
    low = found.min(axis=0)
    span = found.max(axis=0) - low + 1
    if float(np.prod(span.astype(np.float64))) < 2.0**62:
        # one int64 code per lattice point (mixed radix): a 1-D unique is much faster
        radix = np.concatenate(([1], np.cumprod(span[:-1]))).astype(np.int64)
        _, counts = np.unique((found - low) @ radix, return_counts=True)
    else:
        _, counts = np.unique(found, axis=0, return_counts=True)
    return int(n - counts.max())

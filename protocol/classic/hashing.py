"""The hash family of local hashing (BLH, OLH: Wang, Blocki, Li, Jha, USENIX Security 2017, §4.4)
and its vectorised support counting.

**The family.** Items x ∈ 0..k−1 are written in L = max(1, ⌈log2 k⌉) bits x_0..x_{L−1}; a hash
into Z_g is H(x) = (b + Σ_j a_j·x_j) mod g with a_0..a_{L−1}, b drawn uniformly from Z_g, from the
user's own stream, and sent with its report (the payload is (a_0, …, a_{L−1}, b, y)). For x ≠ v
some bit differs, x_j − v_j = ±1 is a unit of Z_g and a_j is uniform and independent of the rest,
so H(x) − H(v) is uniform on Z_g: Pr[H(x) = H(v)] = 1/g *exactly*, for every g (the family is
pairwise independent), which is all that OLH's unbiasedness and variance (q* = 1/g) ask of it.
The commonly used ((a·x + b) mod P) mod g, or a seeded xxhash, are only approximately so. Any
family keeps the report ε-LDP: the report is GRR over Z_g of a public function of the item.

**Support counting** (the server's O(n·k) step, Σ_i c_i·1[H_i(x) = y_i] for every item x): H_i
is linear in the bits, so a user's k hash values come from L doublings, row by row in numpy:
column block [2^j, 2^{j+1}) is block [0, 2^j) plus a_j mod g. The values start at b − y, so a
match is a zero. Everything runs in uint8 while g ≤ 128 (uint16 while g ≤ 2^15, else int64) on
chunks of users sized to stay in cache, about 2k byte operations per user and no per-item Python
loop; the weighted count of a chunk is one matrix–vector product, or one integer count per
distinct weight when the chunk has few (every user at a few ε's). 10^6 users at k = 1024 take a
few seconds on one core (benchmarks/bench_classic.py measures it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedldp.protocol.api import FloatArray, IntArray

__all__ = ["hash_bits", "hash_values", "support_weights"]

_CHUNK_BYTES = 1 << 22
"""The size of one chunk's table of hash values (users × 2^L entries): it should fit in cache."""
_FEW_WEIGHTS = 8
"""Up to this many distinct weights in a chunk, count matches per weight in integers."""


def hash_bits(k: int) -> int:
    """L: the bits of an item of 0..k−1 (at least one)."""
    return max(1, math.ceil(math.log2(k))) if k > 1 else 1


def hash_values(coefficients: IntArray, offset: IntArray, g: IntArray, items: IntArray) -> IntArray:
    """H_i(items_i) for each user i: (b_i + Σ_j a_ij·bit_j(items_i)) mod g_i; ``coefficients``
    is (n, L), ``offset`` (b), ``g`` and ``items`` are (n,)."""
    bits = (items[:, None] >> np.arange(coefficients.shape[1], dtype=np.int64)) & 1
    total = offset + np.sum(coefficients * bits, axis=1)
    return np.asarray(total % g, dtype=np.int64)


def _dtype(g_max: int) -> type[np.integer[Any]]:
    if g_max <= 128:
        return np.uint8
    if g_max <= 1 << 15:
        return np.uint16
    return np.int64


def support_weights(
    coefficients: IntArray, offset: IntArray, report: IntArray, g: IntArray, c: FloatArray, k: int
) -> FloatArray:
    """Σ_i c_i·1[H_i(x) = y_i] for x = 0..k−1 (module docstring): ``coefficients`` (n, L), the
    offsets b, reports y, ranges g and weights c are (n,)."""
    n, bits = coefficients.shape
    out = np.zeros(k, dtype=np.float64)
    if n == 0:
        return out
    width = 1 << bits
    rows = max(1, _CHUNK_BYTES // width)
    for lo in range(0, n, rows):
        hi = min(n, lo + rows)
        gg = g[lo:hi]
        dtype = _dtype(int(gg.max()))
        g_col = gg.astype(dtype)[:, None]
        table = np.empty((hi - lo, width), dtype=dtype)
        table[:, 0] = (offset[lo:hi] - report[lo:hi]) % gg
        a = (coefficients[lo:hi] % gg[:, None]).astype(dtype)
        step = 1
        for j in range(bits):
            block = table[:, step : 2 * step]
            np.add(table[:, :step], a[:, j : j + 1], out=block)
            block -= g_col * (block >= g_col).astype(dtype)
            step *= 2
        match = table[:, :k] == 0
        cc = c[lo:hi]
        levels = np.unique(cc)
        if levels.size <= _FEW_WEIGHTS:
            for level in levels:
                rows_at = cc == level
                if rows_at.all():
                    out += level * np.count_nonzero(match, axis=0)
                else:
                    out += level * np.count_nonzero(match[rows_at], axis=0)
        else:
            out += cc @ match
    return out

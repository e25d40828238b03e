"""The theory of the classic frequency oracles, per user ε (convention 8 of docs/architecture.md:
the samplers, the estimators, the error bars and the tests call these same functions).

Every oracle here is *pure* in the sense of Wang, Blocki, Li, Jha (USENIX Security 2017, §4.1,
Definition 3): a report Y of a user holding item v supports a set S(Y) of items, with
Pr[v ∈ S(Y)] = p and Pr[x ∈ S(Y)] = q for every x ≠ v (q is the paper's q*). One report then gives
the unbiased estimate z[x] = (1[x ∈ S(Y)] − q)/(p − q) of the indicator of item x, and the
textbook estimator is the average of the z's (the paper's eq. (1) divided by n). Per user at ε:

========  ==========================================  ===============================  =========
oracle    p                                           q                                 source
========  ==========================================  ===============================  =========
GRR       e^ε/(e^ε + k − 1)                           1/(e^ε + k − 1)                   §4.1
SUE       e^{ε/2}/(e^{ε/2} + 1) (*)                   1/(e^{ε/2} + 1) (*)               §4.2
OUE       1/2                                         1/(e^ε + 1) (*)                   §4.2
BLH       e^ε/(e^ε + 1)                               1/2                               §4.4
OLH       e^ε/(e^ε + g − 1), g = round(e^ε) + 1       1/g                               §4.4
HR        e^ε/(e^ε + 1)                               1/2                               ASZ 2019
SS        d·e^ε/(d·e^ε + k − d)                       (d − p)/(k − 1)                   YB 2018
========  ==========================================  ===============================  =========

(*) as realised by the sampler: q rounded up to a multiple of 2^-32 (``unary_flip``), p = 1 − q
for SUE, so that each bit is one comparison of a 32-bit integer; the realised ε' ≤ ε (proof
there) and the estimator de-biases with the realised (p, q).

HR is the Hadamard response of Acharya, Sun, Zhang (AISTATS 2019, §3, the scheme for ε ≤ 1 that
the paper uses at every ε for its experiments' HR curve): item x is row x + 1 of the Sylvester
Hadamard matrix of order K (the smallest power of two > k), its set C_x the K/2 columns where the
row is +1; two rows agree on half of C_x, hence q = 1/2. SS is subset selection (Ye, Barg, IEEE
Trans. Inf. Theory 2018; Wang, Wu, Li, Jha 2016): a uniformly random d-subset with weight e^ε on
the subsets holding the true item; d is the integer next to k/(e^ε + 1) (the papers' optimum)
that minimizes the exact variance below (the real optimum is not an integer).

**Variance** (the paper's eq. (2), exact, per item x with true frequency f_x, n users at one ε):
Var[f̂_x] = [q(1 − q)/(p − q)² + f_x(1 − p − q)/(p − q)]/n for a fixed population. Summed over
the k items (Σ f_x = 1) it no longer depends on the data: Σ_x Var = [k·q(1 − q)/(p − q)² + (1 − p
− q)/(p − q)]/n (``summed_variance``). When the users' items are drawn from a law f and the
estimate is compared with f (as ``fedldp simulate`` does), each item's error adds the multinomial
term f_x(1 − f_x)/n: Var[z[x]] = π(1 − π)/(p − q)² with π = q + f_x(p − q), which expands to the
two terms above plus f_x(1 − f_x).

**Unequal ε** (``weights``): user i's estimate z_i is de-biased with its own (p_i, q_i), and the
estimate is f̂ = Σ w_i z_i / Σ w_i. With ``inverse-variance`` weights w_i = 1/V_i, V_i =
q_i(1 − q_i)/(p_i − q_i)² (the variance of z_i[x] at f_x = 0, the data-free term of eq. (2)),
f̂ is the minimum-variance unbiased combination of the z_i (Σ c_i = 1 minimizes Σ c_i² V_i at
c_i ∝ 1/V_i, by Cauchy–Schwarz) for every item of frequency 0, and within the data-dependent
term f_x(1 − p_i − q_i)/(p_i − q_i) of it for the others (the same convention as the
heterogeneous-ε paper's weights: the weight of a report is the inverse of its noise variance).
``uniform`` weights w_i = 1 are the plain average. At equal ε every weight is the same and both
are exactly the textbook estimator.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from fedldp.protocol.api import FloatArray, IntArray

__all__ = [
    "EPSILON_CAP",
    "MAX_HASH_RANGE",
    "ORACLES",
    "UNARY_BITS",
    "Oracle",
    "Weighting",
    "hadamard_order",
    "max_gain",
    "max_gain_support",
    "olh_range",
    "report_variance",
    "ss_size",
    "summed_variance",
    "support_probabilities",
    "unary_flip",
    "user_weights",
    "walsh_hadamard",
]

Oracle = Literal["grr", "sue", "oue", "blh", "olh", "hr", "ss"]
ORACLES: tuple[Oracle, ...] = ("grr", "sue", "oue", "blh", "olh", "hr", "ss")
Weighting = Literal["inverse-variance", "uniform"]

MAX_HASH_RANGE = 1 << 20
"""The largest hash range g of OLH: round(e^ε) + 1 is capped here (ε > 13.9). Any g keeps the
report ε-LDP (it is GRR over g values); the cap only keeps hash values exact in a float64
payload and the aggregation's integers small, at a variance loss below 10^-6 of the optimum's."""


EPSILON_CAP = 30.0
"""Every oracle randomizes at min(ε, 30): a report at a smaller ε is still ε-LDP, and at 30 its
noise is below 10^-13 (so q and the inverse-variance weights stay finite in float64)."""


def _shrink(epsilon: ArrayLike) -> FloatArray:
    """e^−min(ε, ``EPSILON_CAP``), elementwise: every formula is written with it, so that a large ε
    never overflows nor makes q vanish."""
    e = np.minimum(np.asarray(epsilon, dtype=np.float64), EPSILON_CAP)
    return np.asarray(np.exp(-e), dtype=np.float64)


def olh_range(epsilon: ArrayLike) -> IntArray:
    """OLH's hash range g = round(e^ε) + 1 per user (Wang et al. 2017, §4.4: the integer next to
    the optimum e^ε + 1), capped at ``MAX_HASH_RANGE``."""
    e = np.asarray(epsilon, dtype=np.float64)
    g = np.floor(np.exp(np.minimum(e, np.log(MAX_HASH_RANGE))) + 0.5) + 1.0
    return np.minimum(g, MAX_HASH_RANGE).astype(np.int64)


def _ss_pq(d: FloatArray, k: int, shrink: FloatArray) -> tuple[FloatArray, FloatArray]:
    p = d / (d + (k - d) * shrink)
    return p, (d - p) / (k - 1)


def ss_size(epsilon: ArrayLike, k: int) -> IntArray:
    """Subset selection's subset size d per user: of ⌊k/(e^ε + 1)⌋ and ⌈k/(e^ε + 1)⌉ (clipped to
    1..k − 1), the one whose exact summed variance is smaller (the smaller d on a tie)."""
    if k < 2:
        raise ValueError("subset selection needs k >= 2 items")
    shrink = _shrink(epsilon)
    real = k * shrink / (1.0 + shrink)  # k/(e^ε + 1)
    low = np.clip(np.floor(real), 1, k - 1)
    high = np.clip(np.ceil(real), 1, k - 1)
    var_low = summed_variance(*_ss_pq(low, k, shrink), k)
    var_high = summed_variance(*_ss_pq(high, k, shrink), k)
    return np.where(var_high < var_low, high, low).astype(np.int64)


def hadamard_order(k: int) -> int:
    """K of Hadamard response: the smallest power of two > k (rows 1..k are the items')."""
    return 1 << int(k).bit_length()


def support_probabilities(
    oracle: Oracle, epsilon: ArrayLike, k: int
) -> tuple[FloatArray, FloatArray]:
    """(p, q) per user: the probability that a report supports its sender's item, and that it
    supports any one other item (table above)."""
    shrink = _shrink(epsilon)
    if oracle == "grr":
        p = 1.0 / (1.0 + (k - 1) * shrink)
        return p, shrink * p
    if oracle == "sue":
        q = unary_flip(np.sqrt(shrink) / (1.0 + np.sqrt(shrink)))
        return 1.0 - q, q
    if oracle == "oue":
        return np.full_like(shrink, 0.5), unary_flip(shrink / (1.0 + shrink))
    if oracle in ("blh", "hr"):
        return 1.0 / (1.0 + shrink), np.full_like(shrink, 0.5)
    if oracle == "olh":
        g = olh_range(epsilon).astype(np.float64)
        return 1.0 / (1.0 + (g - 1.0) * shrink), 1.0 / g
    if oracle == "ss":
        return _ss_pq(ss_size(epsilon, k).astype(np.float64), k, shrink)
    raise ValueError(f"unknown oracle {oracle!r}")


def max_gain_support(oracle: Oracle, epsilon: ArrayLike, k: int, r: int) -> IntArray:
    """|S(Y) ∩ T| of the max-gain report per user (``frequency``'s "Attacks"; Cao, Jia, Gong,
    USENIX Security 2021): how many of r distinct targets an admissible report supports at
    most. GRR's report is one item: 1. SS's is a d-subset: min(r, d). Unary encoding sets every
    target bit, local hashing sends a hash that maps every target to one value y, HR a column
    where every target's row is +1 (column 0 is one): all r."""
    e = np.asarray(epsilon, dtype=np.float64)
    if oracle == "grr":
        return np.ones(e.shape, dtype=np.int64)
    if oracle == "ss":
        return np.asarray(np.minimum(ss_size(e, k), r), dtype=np.int64)
    if oracle in ORACLES:
        return np.full(e.shape, r, dtype=np.int64)
    raise ValueError(f"unknown oracle {oracle!r}")


def max_gain(oracle: Oracle, epsilon: ArrayLike, k: int, r: int) -> FloatArray:
    """G = Σ_{t ∈ T} z[t] = (``max_gain_support`` − r·q)/(p − q): what one max-gain report adds
    to the r targets' total de-biased frequency (an honest user holding item v adds
    1[v ∈ T] in expectation)."""
    p, q = support_probabilities(oracle, epsilon, k)
    s = max_gain_support(oracle, epsilon, k, r)
    return np.asarray((s - r * q) / (p - q), dtype=np.float64)


UNARY_BITS = 32
"""Unary encoding draws each bit from a 32-bit integer (``unary_flip``)."""


def unary_flip(q: FloatArray) -> FloatArray:
    """The flip probability unary encoding realises for the paper's q: q' = ⌈q·2^32⌉/2^32, the
    probability that a uniform 32-bit integer is below the threshold T = ⌈q·2^32⌉ (exact in
    float64). The sampler sets a 0-bit when its integer is below T, and (SUE) the true bit when
    its integer is not, so the report is exactly the UE law at (p', q') = (1 − q', q') for SUE,
    (1/2, q') for OUE, and the server de-biases with these same values (unbiased).

    **Privacy.** The report's worst-case ratio is p'(1 − q')/(q'(1 − p')) (a pair of bits (1, 0)
    at (v, v'), Wang et al. 2017, §4.2): SUE, (1 − q')²/q'² = e^{ε'} with ε' = 2 ln((1 − q')/q');
    OUE, (1 − q')/q' = e^{ε'}. Both decrease in q', and q' ≥ q, where they equal e^ε: hence
    ε' ≤ ε, the report is ε-LDP at the ε the ledger charges. The shortfall is tiny: q' − q <
    2^-32 and |d/dq ln((1 − q)/q)| = 1/(q(1 − q)), so ε − ε' < 2^-32/(q(1 − q)) (OUE; twice
    that for SUE), e.g. 1.2·10^-9 at ε = 1 (OUE, q = 0.27); q' ≥ 2^-32 caps the realised ε'
    at ln(2^32 − 1) = 22.2 (OUE), 44.4 (SUE), where a report's variance q'(1 − q')/(p' − q')²
    is already below 10^-9. The variance is eq. (2) at (p', q'), each within 2^-32 of the
    paper's value."""
    scaled = np.ceil(np.asarray(q, dtype=np.float64) * 2.0**UNARY_BITS)
    return np.asarray(scaled / 2.0**UNARY_BITS, dtype=np.float64)


def report_variance(p: FloatArray, q: FloatArray) -> FloatArray:
    """V = q(1 − q)/(p − q)²: the variance of one report's estimate of an item's frequency when
    the item has frequency 0 (the data-free term of Wang et al. 2017, eq. (2), for n = 1)."""
    gap = p - q
    return np.asarray(q * (1.0 - q) / gap**2, dtype=np.float64)


def summed_variance(p: FloatArray, q: FloatArray, k: int) -> FloatArray:
    """k·q(1 − q)/(p − q)² + (1 − p − q)/(p − q): eq. (2) of one report, summed over the k items
    of a fixed population (Σ f_x = 1, so it does not depend on the data)."""
    gap = p - q
    return np.asarray(k * q * (1.0 - q) / gap**2 + (1.0 - p - q) / gap, dtype=np.float64)


def user_weights(p: FloatArray, q: FloatArray, weighting: Weighting) -> FloatArray:
    """w_i: 1/V_i (``inverse-variance``) or 1 (``uniform``), module docstring."""
    if weighting == "uniform":
        return np.ones_like(np.asarray(p, dtype=np.float64))
    return np.asarray(1.0 / report_variance(p, q), dtype=np.float64)


def walsh_hadamard(x: FloatArray) -> FloatArray:
    """H·x for the Sylvester Hadamard matrix of order len(x) (a power of two), entry (r, c) =
    (−1)^popcount(r & c): the fast transform, len(x)·log2 len(x) additions."""
    out = np.array(x, dtype=np.float64)
    n = out.shape[0]
    if n & (n - 1):
        raise ValueError("the Hadamard transform needs a power-of-two length")
    h = 1
    while h < n:
        view = out.reshape(-1, 2, h)
        top = view[:, 0, :].copy()
        view[:, 0, :] += view[:, 1, :]
        view[:, 1, :] = top - view[:, 1, :]
        h *= 2
    return out

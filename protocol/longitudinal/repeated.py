"""Audits of repeated collection (docs/longitudinal.md §7): the privacy loss of the transcript
of T reports one device sends when the same question is asked of it T times, memoized or not.

Each case runs the protocol's own client step (``privatize``, with the broadcast of its one
round) T times for each of ``draws`` devices: collection t uses the round stream of key
(seed, t) and every collection the same device key, as a client does across the studies of a
population (``fedldp.client.seeds.round_key``), so a memoized response repeats and a fresh one
does not. A device's T reports are reduced to the counts of ones of the audited report bits (in
each phase of the collection, when the value changes midway); the counts are a sufficient
statistic (given the memoized response the bits are independent with a law the value does not
enter, and the other report bits have the same law on both inputs), and the audit's statistic is
their exact log-likelihood ratio (Neyman–Pearson), whose largest absolute value over the counts
either input can produce is the transcript's exact privacy loss (``AuditCase.exact``).

* RAPPOR (``memo-rappor``, k = 2, h = 1): item 0 against item 1 in all T collections; with the
  PRR memoized the loss tends to ε_∞ = 2·ln((1 − f/2)/(f/2)) from below, fresh it is T·ε₁.
  Erlingsson, Pihur, Korolova, CCS 2014, §3 (Theorems 1 and 2 of its privacy section).
* 1BitMean (``memo-1bitmean``, m = 1, s = 1): value 0 against value m in all T collections
  (memoized: ε whatever T; fresh: T·ε; memoized with output perturbation γ: ε' at T = 1,
  growing to ε); and the *change*: value 0 in all T collections against 0 in the first ⌊T/2⌋
  and m after (memoized: infinite from T = 2, the change shows; with output perturbation:
  finite, growing with T; fresh: (T − ⌊T/2⌋)·ε). Ding, Kulkarni, Yekhanin, NeurIPS 2017, §3
  (memoization, α-point rounding) and §4 (output perturbation).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy.special import xlogy

from fedldp.protocol.api import (
    AuditCase,
    FloatArray,
    Protocol,
    RoundTask,
    UserData,
    UserStreams,
    client_step,
    one_user,
    stream_key,
)
from fedldp.protocol.longitudinal.rappor import MemoRappor, report_probabilities
from fedldp.protocol.longitudinal.telemetry import MemoOneBitMean, one_bit_probability

__all__ = [
    "AUDITS",
    "GAMMA",
    "RAPPOR_F",
    "change_laws",
    "count_transcripts",
    "one_bit_laws",
    "rappor_laws",
]

RAPPOR_F = (0.5, 0.25)
"""The PRR parameters f of the RAPPOR cases (the paper's f = 1/2, and 1/4)."""
GAMMA = 0.25
"""Output perturbation γ of the 1BitMean cases that have it."""
_BLOCK = 20_000
"""Devices privatized per call of the client step."""
_ROUND_WORD = 0x52455054  # purpose words of the audited devices' round and device keys
_DEVICE_WORD = 0x44455654
_CLAMP = 60.0
"""Log-likelihood ratios are clamped to ±_CLAMP: a count one input never produces is an atom."""


def count_transcripts(
    protocol: Protocol[Any],
    raw: Mapping[str, Any],
    epsilon: float,
    values: Sequence[UserData],
    columns: Sequence[int],
    phases: Sequence[int],
    draws: int,
    seed: int,
) -> FloatArray:
    """(draws, phases, columns) counts: for each of ``draws`` devices (participants of one
    population, device key of ``seed``), collection t = 0..T−1 of ``values[t]`` (one user's
    dataset) by the protocol's own client step at ``epsilon``, each report's entries ``columns``
    ((r + 1)/2 for a ±1 report, else r) summed over the collections of each phase
    (``phases[t]``: the phase of collection t)."""
    if len(values) != len(phases) or not values:
        raise ValueError("one dataset and one phase per collection")
    step = client_step(protocol, raw, epsilon, values[0].take(np.zeros(2, np.int64)), 0)
    task: RoundTask = step.task
    out = np.zeros((draws, max(phases) + 1, len(columns)))
    device = stream_key(seed, _DEVICE_WORD)
    for t, (data, phase) in enumerate(zip(values, phases, strict=True)):
        key = stream_key(seed, _ROUND_WORD, t)
        key.device = device
        for start in range(0, draws, _BLOCK):
            size = min(_BLOCK, draws - start)
            rows = protocol.privatize(
                step.params,
                task,
                data.take(np.zeros(size, dtype=np.int64)),
                np.full(size, step.epsilon),
                np.full(size, step.group, dtype=np.int64),
                UserStreams(key, np.arange(start, start + size)),
            )
            r = np.asarray(rows, dtype=np.float64).reshape(size, -1)[:, list(columns)]
            out[start : start + size, phase] += np.where(r < 0, 0.0, r)  # ±1 bits: −1 is 0
    return out


def _binomial(n: int, p: float) -> FloatArray:
    c = np.arange(n + 1)
    log = math.lgamma(n + 1) - np.array([math.lgamma(k + 1) + math.lgamma(n - k + 1) for k in c])
    with np.errstate(divide="ignore"):
        return np.asarray(np.exp(log + xlogy(c, p) + xlogy(n - c, 1.0 - p)), dtype=np.float64)


def rappor_laws(epsilon: float, f: float, collections: int, memoize: bool) -> FloatArray:
    """P(c₀, c₁ | item 0) over the counts of ones of bits 0 and 1 in T reports, a (T+1)² table
    (item 1's is its transpose). Memoized: over the PRR bits B'₀, B'₁ (1 w.p. 1 − f/2 on the
    item's bit, f/2 on the other), binomials of the IRR's q or 1 − q; fresh: every report's bit j
    is 1 w.p. q* on the item's bit, 1 − q* on the other."""
    q_star, q = (float(v[0]) for v in report_probabilities(np.array([epsilon]), f))
    t = collections
    if not memoize:
        return np.outer(_binomial(t, q_star), _binomial(t, 1.0 - q_star))
    on, off = _binomial(t, q), _binomial(t, 1.0 - q)
    bit0 = (1.0 - f / 2.0) * on + f / 2.0 * off
    bit1 = f / 2.0 * on + (1.0 - f / 2.0) * off
    return np.outer(bit0, bit1)


def one_bit_laws(
    epsilon: float, collections: int, memoize: bool, gamma: float
) -> tuple[FloatArray, FloatArray]:
    """P(c | 0) and P(c | m) over the count c of ones in T 1BitMean reports (m = 1, s = 1):
    memoized, the bit b(g) (1 w.p. p_g) sent T times, each flipped afresh w.p. γ; fresh, T
    independent bits."""
    p = one_bit_probability(np.array([0, 1]), 1, epsilon)
    t = collections
    if not memoize:
        flipped = p * (1.0 - 2.0 * gamma) + gamma
        return _binomial(t, float(flipped[0])), _binomial(t, float(flipped[1]))
    one, zero = _binomial(t, 1.0 - gamma), _binomial(t, gamma)
    return float(p[0]) * one + (1 - float(p[0])) * zero, float(p[1]) * one + (
        1 - float(p[1])
    ) * zero


def change_laws(
    epsilon: float, collections: int, memoize: bool, gamma: float
) -> tuple[FloatArray, FloatArray]:
    """P(c₁, c₂ | kept) and P(c₁, c₂ | changed): the counts of ones of a 1BitMean device (m = 1,
    s = 1) in the first h = ⌊T/2⌋ collections and in the other T − h, for a value 0 throughout
    (kept) and 0 then m (changed). Memoized, the kept device sends b(0) all along, the changed
    one b(0) then b(m), independent bits (different grid points); fresh, every bit is
    independent."""
    p0, p1 = (float(v) for v in one_bit_probability(np.array([0, 1]), 1, epsilon))
    h, t = collections // 2, collections
    if not memoize:
        r0, r1 = p0 * (1 - 2 * gamma) + gamma, p1 * (1 - 2 * gamma) + gamma
        kept = np.outer(_binomial(h, r0), _binomial(t - h, r0))
        return kept, np.outer(_binomial(h, r0), _binomial(t - h, r1))

    def given(bit: int, n: int) -> FloatArray:
        return _binomial(n, 1.0 - gamma if bit else gamma)

    kept = p0 * np.outer(given(1, h), given(1, t - h)) + (1 - p0) * np.outer(
        given(0, h), given(0, t - h)
    )
    changed = np.zeros_like(kept)
    for b, pb in ((1, p0), (0, 1 - p0)):
        for c, pc in ((1, p1), (0, 1 - p1)):
            changed += pb * pc * np.outer(given(b, h), given(c, t - h))
    return kept, changed


def _log_ratio(a: FloatArray, b: FloatArray) -> FloatArray:
    """log P_A/P_B on every value, clamped to ±_CLAMP (0 where neither input produces it)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(a) - np.log(b)
    return np.asarray(np.clip(np.nan_to_num(r, nan=0.0), -_CLAMP, _CLAMP), dtype=np.float64)


def _exact(a: FloatArray, b: FloatArray) -> float:
    """The largest |log P_A/P_B| over the values either law gives positive probability (∞ when
    one of them gives 0): a tail of 1e-300 is numerically 0, its ratio taken as is."""
    seen = (a > 0) | (b > 0)
    if np.any(seen & ((a == 0) | (b == 0))):
        return math.inf
    return float(np.max(np.abs(np.log(a[seen]) - np.log(b[seen]))))


def _items(item: int) -> UserData:
    return one_user(np.array([item], dtype=np.int64))


def _scalar(value: float) -> UserData:
    return one_user(np.array([value], dtype=np.float64))


Repeated = Callable[[float, int, int, np.random.Generator], tuple[FloatArray, FloatArray]]


def _rappor(f: float, memoize: bool) -> tuple[Repeated, Callable[[float, int], float]]:
    raw = {"domain_size": 2, "f": f, "memoize": memoize}

    def repeated(
        epsilon: float, draws: int, collections: int, rng: np.random.Generator
    ) -> tuple[FloatArray, FloatArray]:
        law = rappor_laws(epsilon, f, collections, memoize)
        stat = _log_ratio(law, law.T)  # item 0 against item 1: P(c₀, c₁ | 1) = law[c₁, c₀]
        out = []
        for item in (0, 1):
            seed = int(rng.integers(1 << 62))
            values = [_items(item)] * collections
            counts = count_transcripts(
                MemoRappor(), raw, epsilon, values, (0, 1), [0] * collections, draws, seed
            ).astype(np.int64)[:, 0]
            out.append(stat[counts[:, 0], counts[:, 1]])
        return out[0], out[1]

    def exact(epsilon: float, collections: int) -> float:
        law = rappor_laws(epsilon, f, collections, memoize)
        return _exact(law, law.T)

    return repeated, exact


def _one_bit(
    memoize: bool, gamma: float, change: bool
) -> tuple[Repeated, Callable[[float, int], float]]:
    raw = {"bound": 1.0, "levels": 1, "flip": gamma, "memoize": memoize}

    def laws(epsilon: float, collections: int) -> tuple[FloatArray, FloatArray]:
        if change:
            return change_laws(epsilon, collections, memoize, gamma)
        a, b = one_bit_laws(epsilon, collections, memoize, gamma)
        return a[:, None], b[:, None]  # one phase: a (T+1) × 1 table

    def repeated(
        epsilon: float, draws: int, collections: int, rng: np.random.Generator
    ) -> tuple[FloatArray, FloatArray]:
        law_a, law_b = laws(epsilon, collections)
        stat = _log_ratio(law_a, law_b)
        h = collections // 2 if change else 0
        phases = [0 if t < h else 1 for t in range(collections)] if change else [0] * collections
        inputs: list[list[UserData]] = [
            [_scalar(0.0)] * collections,
            [_scalar(0.0 if t < h else 1.0) for t in range(collections)]
            if change
            else [_scalar(1.0)] * collections,
        ]
        out = []
        for values in inputs:
            seed = int(rng.integers(1 << 62))
            counts = count_transcripts(
                MemoOneBitMean(), raw, epsilon, values, (0,), phases, draws, seed
            ).astype(np.int64)[:, :, 0]
            second = counts[:, 1] if change else np.zeros_like(counts[:, 0])
            out.append(stat[counts[:, 0], second])
        return out[0], out[1]

    def exact(epsilon: float, collections: int) -> float:
        return _exact(*laws(epsilon, collections))

    return repeated, exact


def _case(name: str, summary: str, pair: tuple[Repeated, Callable[[float, int], float]]) -> Any:
    repeated, exact = pair

    def once(epsilon: float, draws: int, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
        return repeated(epsilon, draws, 1, rng)

    return AuditCase(name, summary, once, tight=True, repeated=repeated, exact=exact)


AUDITS: tuple[AuditCase, ...] = (
    *(
        _case(
            f"memo-rappor-f{f:g}-{'memoized' if memo else 'fresh'}",
            f"RAPPOR (k = 2, h = 1, f = {f:g}), PRR {'memoized' if memo else 'fresh'}: "
            "item 0 against item 1 in all T collections",
            _rappor(f, memo),
        )
        for f in RAPPOR_F
        for memo in (True, False)
    ),
    _case(
        "memo-1bitmean-memoized",
        "1BitMean (m = 1, s = 1) memoized: 0 against m in all T collections",
        _one_bit(True, 0.0, change=False),
    ),
    _case(
        "memo-1bitmean-fresh",
        "1BitMean (m = 1, s = 1) fresh: 0 against m in all T collections",
        _one_bit(False, 0.0, change=False),
    ),
    _case(
        f"memo-1bitmean-memoized-flip{GAMMA:g}",
        f"1BitMean memoized, output perturbation γ = {GAMMA:g}: 0 against m in all T",
        _one_bit(True, GAMMA, change=False),
    ),
    _case(
        "memo-1bitmean-change-memoized",
        "1BitMean memoized: 0 throughout against 0 then m after ⌊T/2⌋ collections",
        _one_bit(True, 0.0, change=True),
    ),
    _case(
        f"memo-1bitmean-change-memoized-flip{GAMMA:g}",
        f"1BitMean memoized, γ = {GAMMA:g}: 0 throughout against 0 then m after ⌊T/2⌋",
        _one_bit(True, GAMMA, change=True),
    ),
    _case(
        "memo-1bitmean-change-fresh",
        "1BitMean fresh: 0 throughout against 0 then m after ⌊T/2⌋ collections",
        _one_bit(False, 0.0, change=True),
    ),
)
"""The repeated-collection audit cases (``fedldp.protocol.catalogue.AUDITS``)."""

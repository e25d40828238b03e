"""The seven classic frequency oracles: each one's report, its admissible payloads and its
support counts, on the shared round of ``fedldp.protocol.classic.frequency`` (which states the
payloads; the theory is ``fedldp.protocol.classic.oracles``). Every step is vectorised over the
users of a block; a user's randomness comes from its own stream (its row of ``u``, or of the
raw words for the bit-vector reports).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from fedldp.protocol.api import (
    JSON,
    BoolArray,
    FloatArray,
    IntArray,
    PayloadKind,
    Plan,
    Protocol,
    RandomSource,
    RoundTask,
    UserData,
    halves,
    random_word_blocks,
    random_words,
    unit,
)
from fedldp.protocol.classic import hashing
from fedldp.protocol.classic import oracles as th
from fedldp.protocol.classic.frequency import (
    ClassicFrequency,
    FrequencyParams,
    integral_in,
    one_if_equal,
    pick_uniforms,
    sample_items,
)

# The attacks' reports (``output_attack_reports``, ``promote``) are stated in the "Attacks"
# section of ``fedldp.protocol.classic.frequency``; each method's docstring says its choice.

__all__ = [
    "FLOYD_WORD_SHIFT",
    "PROTOCOLS",
    "BinaryLocalHashing",
    "GeneralizedRR",
    "HadamardResponse",
    "LocalHashing",
    "OptimizedLocalHashing",
    "OptimizedUnaryEncoding",
    "SubsetSelection",
    "SymmetricUnaryEncoding",
    "VectorParams",
    "floyd_masks",
    "floyd_subsets",
    "insert_bit",
    "mask_bits",
    "mask_octets",
]


def _other(u: FloatArray, size: IntArray | int, avoid: IntArray) -> IntArray:
    """Uniform over 0..size − 1 but ``avoid``, from one uniform u per user."""
    other = np.minimum(np.floor(u * (np.asarray(size) - 1)).astype(np.int64), np.asarray(size) - 2)
    return np.asarray(other + (other >= avoid), dtype=np.int64)


def _smallest(keys: FloatArray, size: IntArray) -> FloatArray:
    """Bits of the ``size[i]`` smallest keys of each row (distinct keys), by a partition per
    size."""
    bits = np.zeros(keys.shape)
    for d in np.unique(size):
        at = np.flatnonzero(size == d)
        chosen = np.argpartition(keys[at], d - 1, axis=1)[:, :d]
        bits[at[:, None], chosen] = 1.0
    return bits


def _null_space(rows: list[int], width: int) -> list[int]:
    """A basis of {y ∈ GF(2)^width : popcount(r & y) even for every r of ``rows``}: the rows in
    reduced echelon form, then one basis vector per free bit f, e_f plus the pivots of the rows
    holding bit f (so each row meets it twice or never)."""
    echelon: list[tuple[int, int]] = []  # (pivot bit, row): no other row holds a pivot bit
    for r in rows:
        for pivot, row in echelon:
            if r >> pivot & 1:
                r ^= row
        if r:
            top = r.bit_length() - 1
            echelon = [(q, v ^ r if v >> top & 1 else v) for q, v in echelon]
            echelon.append((top, r))
    pivots = {q for q, _ in echelon}
    basis = []
    for f in range(width):
        if f not in pivots:
            y = 1 << f
            for pivot, row in echelon:
                if row >> f & 1:
                    y |= 1 << pivot
            basis.append(y)
    return basis


_BLOCK_BYTES = 1 << 20
"""The bit-vector reports are encoded this many bytes of float64 payload at a time
(``_BitVector.privatize``)."""


def _one_weight(c: FloatArray) -> bool:
    """Whether every weight is the same: at once for the broadcast view of one weight that the
    aggregation hands over for a chunk of one ε, else by a look at them."""
    if c.size == 0:
        return False
    if c.ndim == 1 and c.strides[0] == 0:
        return True
    return bool(c.min() == c.max())


def _weighted_counts(values: FloatArray, c: FloatArray, size: int) -> FloatArray:
    """Σ_i c_i·1[values_i = x] for x = 0..size − 1 (values integral): with one weight (a chunk
    of one ε), c times the counts, which need no array of weights."""
    if _one_weight(c):
        counts = np.zeros(size, dtype=np.int64)
        for start in range(0, values.size, _COUNT_CHUNK):  # no integer copy of n values
            part = values[start : start + _COUNT_CHUNK].astype(np.int64)
            counts += np.bincount(part, minlength=size)
        return np.asarray(c[0] * counts, dtype=np.float64)
    return np.bincount(values.astype(np.int64), weights=c, minlength=size).astype(np.float64)


_COUNT_CHUNK = 1 << 15
"""Values converted to integers at a time by ``_weighted_counts``."""


def _bounds(task: RoundTask, epsilon: FloatArray, high: Any) -> tuple[FloatArray, FloatArray]:
    shape = (epsilon.shape[0], *task.payload_shape)
    return np.zeros(shape), np.broadcast_to(np.asarray(high, dtype=np.float64), shape).copy()


class GeneralizedRR(ClassicFrequency):
    """k-ary (generalized) randomized response: the true item with probability p, each other
    with q (Wang et al. 2017, §4.1, "direct encoding")."""

    name: ClassVar[str] = "classic-grr"
    oracle: ClassVar[th.Oracle] = "grr"
    summary: ClassVar[str] = "item frequencies by generalized (k-ary) randomized response"
    source: ClassVar[str] = "Wang, Blocki, Li, Jha, USENIX Security 2017, §4.1 (GRR), eq. (2)"

    def report(self, k: int, items: IntArray, epsilon: FloatArray, u: FloatArray) -> FloatArray:
        """The true item when u_0 < p, else ``_other``'s item from u_1, worked out in the
        float64 payload itself (integers below k are exact): the same reports, no integer
        temporaries."""
        p, _ = th.support_probabilities("grr", epsilon, k)
        y = np.multiply(u[:, 1], k - 1)
        np.floor(y, out=y)
        np.minimum(y, k - 2, out=y)  # uniform over 0..k − 2
        np.add(y, y >= items, out=y)  # skip the true item
        np.copyto(y, items, where=u[:, 0] < p)
        return y

    def admissible(self, k: int, epsilon: FloatArray, payloads: FloatArray) -> BoolArray:
        return integral_in(payloads, k)

    def support(
        self, k: int, epsilon: FloatArray, payloads: FloatArray, c: FloatArray
    ) -> FloatArray:
        return _weighted_counts(payloads, c, k)

    def report_bounds(
        self, params: FrequencyParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        """Items 0..k − 1: the generic output attack's report, item k − 1, is the best one (it
        supports the top item; every report supports one item), so GRR has no hook."""
        return _bounds(task, epsilon, params.domain_size - 1)

    def promote(
        self, k: int, targets: IntArray, epsilon: FloatArray, rng: RandomSource
    ) -> FloatArray:
        """A target drawn uniformly (Cao et al.): each gives the same gain, (1 − r·q)/(p − q)."""
        u = np.asarray(rng.random((epsilon.shape[0], 1)), dtype=np.float64)[:, 0]
        pick = np.minimum(np.floor(u * targets.size).astype(np.int64), targets.size - 1)
        return targets[pick].astype(np.float64)


class VectorParams(FrequencyParams):
    # the payload is a k-vector: 4096 floats is 32 KiB per report on the wire
    domain_size: int = Field(ge=2, le=1 << 12, description="k: items are 0..k−1")


class _BitVector(ClassicFrequency):
    """Reports that are k bits (unary encoding, subset selection): support = the set bits.

    Their randomness is raw 64-bit words of the user's stream (``random_words``), not uniforms:
    the mechanism spends ``words`` of them (``encode``), a few bits per decision rather than one
    uniform per item, and one more word's uniform picks the user's sample (``pick_first``)."""

    params_model = VectorParams
    payload_kind: ClassVar[PayloadKind] = "vector"

    def payload_shape(self, params: FrequencyParams) -> tuple[int, ...]:
        return (params.domain_size,)

    def words(self, k: int, epsilon: FloatArray) -> int:
        """Words each user's report spends (``encode``)."""
        raise NotImplementedError

    def constants(self, k: int, epsilon: FloatArray) -> tuple[NDArray[Any], ...]:
        """What ``fill`` needs of the users' ε, each one per user (or one for all when
        ``epsilon`` is one ε): worked out once per call, not per block."""
        raise NotImplementedError

    def fill(
        self,
        k: int,
        items: IntArray,
        constants: tuple[NDArray[Any], ...],
        words: NDArray[np.uint64],
        out: FloatArray,
    ) -> None:
        """Write into ``out`` (float64, C-contiguous, one row per user) the k-bit reports of
        users holding ``items`` from their ``words`` (``words`` of them a user) and
        ``constants``."""
        raise NotImplementedError

    def encode(
        self, k: int, items: IntArray, epsilon: FloatArray, words: NDArray[np.uint64]
    ) -> FloatArray:
        """The k-bit reports of users holding ``items`` from their ``words`` (``epsilon`` one
        per user, or one for all)."""
        out = np.empty((items.size, k))
        self.fill(k, items, self.constants(k, epsilon), words, out)
        return out

    def privatize(
        self,
        params: FrequencyParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        """The reports, encoded ``_BLOCK_BYTES`` of payload at a time from that block's words
        (``random_word_blocks``): a block's words, bits and reports stay in cache, and the only
        array of the population's size is the float64 payload."""
        k = int(task.broadcast["k"])
        eps = one_if_equal(np.asarray(epsilon, dtype=np.float64))
        n = data.n_users
        rows = max(1, _BLOCK_BYTES // (8 * k))
        if self.pick_first:
            items = sample_items(data, unit(random_words(rng, (n, 1))[:, 0]), k)
            blocks = random_word_blocks(rng, n, self.words(k, eps), rows)
        else:  # the report's words first (drawn by the call), then the sample's
            blocks = random_word_blocks(rng, n, self.words(k, eps), rows)
            items = sample_items(data, pick_uniforms(data, rng), k)
        constants = self.constants(k, eps)
        out = np.empty((n, k))
        for r0, words in blocks:
            r1 = r0 + words.shape[0]
            part = tuple(c if c.size == 1 else c[r0:r1] for c in constants)
            self.fill(k, items[r0:r1], part, words, out[r0:r1])
        return out

    pick_first: ClassVar[bool] = False
    """Whether the word that picks the sample comes first (always drawn): when the number of
    the report's words depends on the block (SS: its largest d), a word after them would not be
    a function of the user alone. Else it comes after them, drawn only when some user has
    several samples (``pick_uniforms``)."""

    def admissible(self, k: int, epsilon: FloatArray, payloads: FloatArray) -> BoolArray:
        return np.asarray(np.all((payloads == 0.0) | (payloads == 1.0), axis=1), dtype=np.bool_)

    def support(
        self, k: int, epsilon: FloatArray, payloads: FloatArray, c: FloatArray
    ) -> FloatArray:
        """Σ_i c_i·bits_i; with one weight (a chunk of one ε), c times the column sums, which
        are exact counts: one pass of additions over the payloads instead of a matrix–vector
        product."""
        if _one_weight(c):
            return np.asarray(c[0] * np.add.reduce(payloads, axis=0), dtype=np.float64)
        return np.asarray(c @ payloads, dtype=np.float64)

    def report_bounds(
        self, params: FrequencyParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        return _bounds(task, epsilon, 1.0)


class SymmetricUnaryEncoding(_BitVector):
    """Basic RAPPOR: each bit of the one-hot vector kept with probability e^{ε/2}/(e^{ε/2} + 1)
    (Wang et al. 2017, §4.2, SUE).

    Each bit is one comparison of a 32-bit integer (two per word of the stream, ``halves``):
    bit x ≠ v is set when its integer is below T = ⌈q·2^32⌉, the true bit v when its integer is
    not (SUE) or is below 2^31 (OUE, p = 1/2). The report is exactly the UE law at the realised
    (p', q') of ``oracles.unary_flip``, whose ε' ≤ ε (the proof is there); ⌈k/2⌉ words a
    user, then the sample's (``pick_uniforms``)."""

    name: ClassVar[str] = "classic-sue"
    oracle: ClassVar[th.Oracle] = "sue"
    summary: ClassVar[str] = "item frequencies by symmetric unary encoding (basic RAPPOR)"
    source: ClassVar[str] = "Wang, Blocki, Li, Jha, USENIX Security 2017, §4.2 (SUE), eq. (2)"

    def words(self, k: int, epsilon: FloatArray) -> int:
        return (k + 1) // 2

    def constants(self, k: int, epsilon: FloatArray) -> tuple[NDArray[Any], ...]:
        _, q = th.support_probabilities(self.oracle, epsilon, k)
        return ((q * 2.0**th.UNARY_BITS).astype(np.uint32),)  # T: exact, as q' ≤ 1/2

    def fill(
        self,
        k: int,
        items: IntArray,
        constants: tuple[NDArray[Any], ...],
        words: NDArray[np.uint64],
        out: FloatArray,
    ) -> None:
        (threshold,) = constants
        if not out.flags.c_contiguous:
            raise ValueError("unary encoding writes into a C-contiguous array")
        every = halves(words)  # C-contiguous: (users, 2·words)
        draws = every[:, :k]
        np.less(draws, threshold[:, None], out=out)
        # the true bits, by flat index (a 1-d gather and scatter are the cheap ones)
        rows = np.arange(items.size, dtype=np.int64)
        own = every.reshape(-1)[rows * every.shape[1] + items]
        at = rows * k + items
        if self.oracle == "sue":
            out.reshape(-1)[at] = own >= threshold  # 1 with probability 1 − q' = p'
        else:
            out.reshape(-1)[at] = own < np.uint32(1 << (th.UNARY_BITS - 1))  # p' = 1/2

    def promote(
        self, k: int, targets: IntArray, epsilon: FloatArray, rng: RandomSource
    ) -> FloatArray:
        """Every target's bit set (gain r(1 − q)/(p − q)), plus l − r other bits drawn
        uniformly, l = max(r, ⌊p + (k − 1)q⌋) the expected number of ones of an honest report
        rounded down, as Cao et al. do: the other bits change no target's estimate, they make
        the report's count of ones look honest. (The generic output report, every bit set, is
        the best one for ``output``: it supports every item, so unary encoding has no output
        hook.)"""
        n = epsilon.shape[0]
        p, q = th.support_probabilities(self.oracle, epsilon, k)
        ones = np.clip(np.floor(p + (k - 1) * q), targets.size, k).astype(np.int64)
        keys = np.asarray(rng.random((n, k)), dtype=np.float64)
        keys[:, targets] = 2.0  # never among the others
        rank = np.argsort(np.argsort(keys, axis=1), axis=1)
        bits = rank < np.broadcast_to(ones - targets.size, (n,))[:, None]
        bits[:, targets] = True
        return bits.astype(np.float64)


class OptimizedUnaryEncoding(SymmetricUnaryEncoding):
    """The 1 of the one-hot vector kept with probability 1/2, each 0 flipped with 1/(e^ε + 1)
    (Wang et al. 2017, §4.2, OUE; the draws as SUE's)."""

    name: ClassVar[str] = "classic-oue"
    oracle: ClassVar[th.Oracle] = "oue"
    summary: ClassVar[str] = "item frequencies by optimized unary encoding"
    source: ClassVar[str] = "Wang, Blocki, Li, Jha, USENIX Security 2017, §4.2 (OUE), eq. (2)"


FLOYD_WORD_SHIFT = np.uint64(12)
"""Floyd's draws use a word's top 52 bits x: t = ⌊x·(j + 1)/2^52⌋, exact in uint64 while
j + 1 ≤ 2^12 (k ≤ 4096, ``VectorParams``)."""


def _floyd_draws(pool: int, size: int, words: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """t for steps s = 0..size − 1 (j = pool − size + s) of rows of subset size ``size`` from
    their words (one a step): each t in 0..j with probability within 2^-52·(j + 1) of 1/(j + 1)
    (relative), as the word's top 52 bits are uniform."""
    j = np.arange(pool - size + 1, pool + 1, dtype=np.uint64)  # j + 1
    t = words[:, :size] >> FLOYD_WORD_SHIFT
    t *= j
    t >>= np.uint64(52)
    return t


def _groups(d: IntArray) -> list[tuple[int, IntArray | slice]]:
    """(size, rows) for each distinct subset size (one ε: one group, all the rows)."""
    if d.size and d.min() == d.max():  # no sort for the common case
        return [(int(d[0]), slice(None))]
    sizes = np.unique(d)
    return [(int(v), np.flatnonzero(d == v)) for v in sizes]


def floyd_subsets(
    pool: int,
    d: IntArray,
    skip_first: BoolArray,
    words: NDArray[np.uint64],
    item: IntArray,
    out: NDArray[np.uint8],
) -> None:
    """Set to 1, in row i of ``out``, a uniformly random m_i-subset of its ``pool`` columns
    other than ``item[i]`` (pool = columns − 1), m_i = d_i − 1 when ``skip_first[i]`` else d_i,
    by Floyd's algorithm (Bentley, Floyd, CACM 1987): for j = pool − m .. pool − 1, draw t
    uniform in 0..j and add t, or j when t is already in. By induction the set is a uniform
    (j + 1 − pool + m)-subset of 0..j after step j, so a uniform m-subset of 0..pool − 1 at the
    end, mapped to the columns by skipping ``item[i]``.

    Row i's step j = pool − d_i + s spends its word s (``_floyd_draws``): a row with m = d − 1
    skips word 0, so a row's subset is a function of its own words, and the rows of one d run
    in step: each step is a gather (is t in?), a choice and a scatter over the rows, d passes
    in all, not a sort of every row. ``out`` (bytes, so that the scattered writes stay in
    cache) is C-contiguous and 0 on the pool's columns."""
    columns = out.shape[1]
    if not out.flags.c_contiguous:
        raise ValueError("floyd_subsets writes into a C-contiguous array")
    flat = out.reshape(-1)  # a view: 1-d gathers and scatters are the cheap ones
    rows_all = np.arange(out.shape[0], dtype=np.int64)
    for size, rows in _groups(d):
        t = _floyd_draws(pool, size, words[rows]).astype(np.int64)
        skipped = np.asarray(item, dtype=np.int64)[rows][:, None]
        row = (rows_all[rows] * columns)[:, None]
        j = np.arange(pool - size, pool, dtype=np.int64)[None, :]
        t += (t >= skipped) + row  # flat index of item t (the other items skip the true one)
        fallback = j + (j >= skipped) + row  # flat index of item j
        first = ~np.asarray(skip_first, dtype=np.bool_)[rows]
        for step in range(size):
            drawn, instead = t[:, step], fallback[:, step]
            if step == 0:
                drawn, instead = drawn[first], instead[first]
            flat[np.where(flat[drawn] != 0, instead, drawn)] = 1


def floyd_masks(
    pool: int, d: IntArray, skip_first: BoolArray, words: NDArray[np.uint64]
) -> NDArray[np.uint64]:
    """``floyd_subsets`` for a pool of at most 64 items, each row's subset a bit mask (bit x:
    item x of the pool, the true item not inserted, ``insert_bit``): the same words, the same
    subsets, but each step is a few operations on one word per row instead of a gather and a
    scatter in an (n, k) array. The draws of every step are made at once (the words
    transposed, so that a step's are contiguous), then each step is five passes over the
    rows: (found & 1 << t), found |= 1 << t, and when t was in already found |= 1 << j."""
    if pool > 64:
        raise ValueError("bit masks hold a pool of at most 64 items")
    one = np.uint64(1)
    mask = np.zeros(d.size, dtype=np.uint64)
    for size, rows in _groups(d):
        steps = np.ascontiguousarray(words[rows, :size].T)  # step s's words: row s
        steps >>= FLOYD_WORD_SHIFT  # t = ⌊x·(j + 1)/2^52⌋ (``_floyd_draws``), in place
        steps *= np.arange(pool - size + 1, pool + 1, dtype=np.uint64)[:, None]
        steps >>= np.uint64(52)
        offered = np.left_shift(one, steps, out=steps)  # 1 << t
        found = offered[0] * ~np.asarray(skip_first, dtype=np.bool_)[rows]  # m = d − 1: none
        hit = np.empty_like(found)
        for step in range(1, size):  # in place: no temporaries
            bit = offered[step]
            np.bitwise_and(found, bit, out=hit)
            np.bitwise_or(found, bit, out=found)
            np.not_equal(hit, 0, out=hit, casting="unsafe")  # t in already: j instead
            np.left_shift(hit, np.uint64(pool - size + step), out=hit)
            np.bitwise_or(found, hit, out=found)
        mask[rows] = found
    return mask


def insert_bit(mask: NDArray[np.uint64], at: IntArray, value: BoolArray) -> NDArray[np.uint64]:
    """Each row's mask with ``value`` inserted as bit ``at`` (bits from ``at`` on move up one):
    the pool's subset as a subset of the k items, the true item ``at`` in it or not."""
    position = np.asarray(at, dtype=np.uint64)
    low = mask & ((np.uint64(1) << position) - np.uint64(1))
    high = (mask >> position) << (position + np.uint64(1))
    return low | high | (np.asarray(value, dtype=np.uint64) << position)


def mask_octets(mask: NDArray[np.uint64], k: int) -> NDArray[np.uint8]:
    """The k low bits of each row's mask as bytes 0/1, bit x in column x."""
    octets = np.ascontiguousarray(mask.astype("<u8")).view(np.uint8).reshape(mask.size, 8)
    return np.unpackbits(octets, axis=1, count=k, bitorder="little")


def mask_bits(mask: NDArray[np.uint64], k: int) -> FloatArray:
    """The k low bits of each row's mask as 0.0/1.0, bit x in column x."""
    return np.asarray(mask_octets(mask, k), dtype=np.float64)


class SubsetSelection(_BitVector):
    """A d-subset of the items with weight e^ε on those holding the true item (Ye–Barg 2018,
    Wang et al. 2016): the true item is in with probability p, then d − 1 others (else d
    others) uniformly; d per user from ``oracles.ss_size``.

    Draws, after the sample's word: one word's uniform is the coin (< p), the next d_i drive
    Floyd's algorithm (``floyd_subsets``; ``floyd_masks`` for k ≤ 64) over the k − 1 other
    items, the first of them unused when the true item is in: 1 + d words a user (the block
    draws 1 + its largest d; a user's report is a function of its first 2 + d_i words,
    whatever the block)."""

    name: ClassVar[str] = "classic-ss"
    oracle: ClassVar[th.Oracle] = "ss"
    pick_first: ClassVar[bool] = True
    summary: ClassVar[str] = "item frequencies by subset selection (optimal subset size)"
    source: ClassVar[str] = (
        "Ye, Barg, IEEE Trans. Inf. Theory 2018; Wang, Wu, Li, Jha 2016 (k-subset mechanism)"
    )

    def words(self, k: int, epsilon: FloatArray) -> int:
        return 1 + (int(th.ss_size(epsilon, k).max()) if epsilon.size else 0)

    def constants(self, k: int, epsilon: FloatArray) -> tuple[NDArray[Any], ...]:
        p, _ = th.support_probabilities("ss", epsilon, k)
        return p, th.ss_size(epsilon, k)

    def fill(
        self,
        k: int,
        items: IntArray,
        constants: tuple[NDArray[Any], ...],
        words: NDArray[np.uint64],
        out: FloatArray,
    ) -> None:
        p, d = constants
        inside = unit(words[:, 0]) < p
        d = np.broadcast_to(d, items.shape)
        if k <= 64:  # a subset is one word: the same subsets, faster
            mask = floyd_masks(k - 1, d, inside, words[:, 1:])
            np.copyto(out, mask_octets(insert_bit(mask, items, inside), k))
            return
        bits = np.zeros((items.size, k), dtype=np.uint8)
        rows = np.flatnonzero(inside)
        bits[rows, items[rows]] = 1
        floyd_subsets(k - 1, d, inside, words[:, 1:], items, bits)
        np.copyto(out, bits)

    def admissible(self, k: int, epsilon: FloatArray, payloads: FloatArray) -> BoolArray:
        sizes = np.sum(payloads, axis=1)
        right_size = sizes == th.ss_size(epsilon, k)
        return np.asarray(super().admissible(k, epsilon, payloads) & right_size, dtype=np.bool_)

    def output_attack_reports(
        self,
        params: FrequencyParams,
        task: RoundTask,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        """The top d_i items k − d_i..k − 1 (d_i = ``oracles.ss_size`` of the attacker's ε):
        of the d_i-subsets, the one that raises f̂_{k−1}, then f̂_{k−2}, ... most (module
        ``frequency``, "Attacks"); the generic all-ones vector is not a d_i-subset."""
        k = int(task.broadcast["k"])
        d = th.ss_size(np.asarray(epsilon, dtype=np.float64), k)
        return np.asarray(np.arange(k)[None, :] >= (k - d)[:, None], dtype=np.float64)

    def promote(
        self, k: int, targets: IntArray, epsilon: FloatArray, rng: RandomSource
    ) -> FloatArray:
        """A d_i-subset holding min(r, d_i) targets: the targets drawn uniformly when r > d_i,
        else every target and d_i − r other items drawn uniformly (the targets' keys are
        shifted below every other key; the d_i smallest keys are the subset)."""
        keys = np.asarray(rng.random((epsilon.shape[0], k)), dtype=np.float64)
        keys[:, targets] -= 2.0
        return _smallest(keys, th.ss_size(epsilon, k))


class LocalHashing(ClassicFrequency):
    """Local hashing: a hash function H from ``hashing``'s family, drawn by the user, and GRR
    over its range Z_g of H(item) (Wang et al. 2017, §4.4)."""

    payload_kind: ClassVar[PayloadKind] = "vector"
    broadcast_fields: ClassVar[Mapping[str, str]] = {
        "k": "the number of items (0..k−1)",
        "hash_bits": "L: the payload is (a_0, …, a_{L−1}, b, y), H(x) = (b + Σ a_j x_j) mod g",
    }

    def ranges(self, epsilon: FloatArray) -> IntArray:
        """g per user."""
        raise NotImplementedError

    def payload_shape(self, params: FrequencyParams) -> tuple[int, ...]:
        return (hashing.hash_bits(params.domain_size) + 2,)

    def draws(self, params: FrequencyParams) -> int:
        return 4 + hashing.hash_bits(params.domain_size)

    def broadcast(
        self, params: FrequencyParams, plan: Plan, round_index: int, outputs: Sequence[JSON]
    ) -> JSON:
        k = params.domain_size
        return {"k": k, "hash_bits": hashing.hash_bits(k)}

    def report(self, k: int, items: IntArray, epsilon: FloatArray, u: FloatArray) -> FloatArray:
        bits = hashing.hash_bits(k)
        g = self.ranges(epsilon)
        seeds = np.minimum(np.floor(u[:, 2:] * g[:, None]).astype(np.int64), g[:, None] - 1)
        coefficients, offset = seeds[:, :bits], seeds[:, bits]
        value = hashing.hash_values(coefficients, offset, g, items)
        p, _ = th.support_probabilities(self.oracle, epsilon, k)
        y = np.where(u[:, 0] < p, value, _other(u[:, 1], g, value))
        return np.column_stack([seeds, y]).astype(np.float64)

    def admissible(self, k: int, epsilon: FloatArray, payloads: FloatArray) -> BoolArray:
        g = self.ranges(epsilon).astype(np.float64)
        return np.asarray(np.all(integral_in(payloads, g[:, None]), axis=1), dtype=np.bool_)

    def support(
        self, k: int, epsilon: FloatArray, payloads: FloatArray, c: FloatArray
    ) -> FloatArray:
        z = payloads.astype(np.int64)
        bits = z.shape[1] - 2
        g = self.ranges(epsilon)
        return hashing.support_weights(z[:, :bits], z[:, bits], z[:, bits + 1], g, c, k)

    def report_bounds(
        self, params: FrequencyParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        high = (self.ranges(epsilon) - 1).astype(np.float64)
        return _bounds(task, epsilon, high[:, None])

    def output_attack_reports(
        self,
        params: FrequencyParams,
        task: RoundTask,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        """The constant hash a = 0, b = 0 and y = 0: H(x) = 0 = y for every item, so the report
        supports all k (module ``frequency``, "Attacks"), where the generic all-(g − 1) report
        supports only the items whose bits number a multiple of g. An honest user draws it
        too, with probability g^−(L+1)·p."""
        return np.zeros((epsilon.shape[0], *task.payload_shape))

    def promote(
        self, k: int, targets: IntArray, epsilon: FloatArray, rng: RandomSource
    ) -> FloatArray:
        """A hash that maps every target to one value, and that value: the coefficients a_j of
        the bits where the targets differ are 0, the others and b drawn uniformly as an honest
        user draws them, y = H(target) (Cao et al. search for such a hash among random seeds;
        this family has one by construction). It supports all r targets, and an item beyond
        them when it agrees with the targets on the bits they share, or else with probability
        1/g, as with an honest report of a target."""
        n = epsilon.shape[0]
        bits = hashing.hash_bits(k)
        g = self.ranges(epsilon)
        u = np.asarray(rng.random((n, bits + 1)), dtype=np.float64)
        seeds = np.minimum(np.floor(u * g[:, None]).astype(np.int64), g[:, None] - 1)
        differ = int(np.bitwise_or.reduce(targets ^ targets[0]))
        seeds[:, [j for j in range(bits) if differ >> j & 1]] = 0
        first = np.full(n, targets[0], dtype=np.int64)
        y = hashing.hash_values(seeds[:, :bits], seeds[:, bits], g, first)
        return np.column_stack([seeds, y]).astype(np.float64)


class BinaryLocalHashing(LocalHashing):
    """Local hashing into one bit (g = 2; Wang et al. 2017, §4.4, BLH)."""

    name: ClassVar[str] = "classic-blh"
    oracle: ClassVar[th.Oracle] = "blh"
    summary: ClassVar[str] = "item frequencies by binary local hashing (g = 2)"
    source: ClassVar[str] = "Wang, Blocki, Li, Jha, USENIX Security 2017, §4.4 (BLH), eq. (2)"

    def ranges(self, epsilon: FloatArray) -> IntArray:
        return np.full(np.shape(epsilon), 2, dtype=np.int64)


class OptimizedLocalHashing(LocalHashing):
    """Local hashing into g = round(e^ε_i) + 1 values, per user (Wang et al. 2017, §4.4, OLH)."""

    name: ClassVar[str] = "classic-olh"
    oracle: ClassVar[th.Oracle] = "olh"
    summary: ClassVar[str] = "item frequencies by optimized local hashing (g = round(e^ε) + 1)"
    source: ClassVar[str] = "Wang, Blocki, Li, Jha, USENIX Security 2017, §4.4 (OLH), eq. (2)"

    def ranges(self, epsilon: FloatArray) -> IntArray:
        return th.olh_range(epsilon)


class HadamardResponse(ClassicFrequency):
    """Hadamard response (Acharya, Sun, Zhang 2019, §3): a column y of the order-K Hadamard
    matrix, uniform among the K/2 where the item's row x + 1 is +1 with probability
    e^ε/(e^ε + 1), else among the other K/2. The server's support counts are one fast
    Walsh–Hadamard transform of the (weighted) histogram of the y's: O(K log K)."""

    name: ClassVar[str] = "classic-hr"
    oracle: ClassVar[th.Oracle] = "hr"
    summary: ClassVar[str] = "item frequencies by Hadamard response"
    source: ClassVar[str] = "Acharya, Sun, Zhang, AISTATS 2019, §3 (Hadamard response)"
    broadcast_fields: ClassVar[Mapping[str, str]] = {
        "k": "the number of items (0..k−1)",
        "order": "K: the report is a column 0..K−1 of the Sylvester Hadamard matrix",
    }

    def broadcast(
        self, params: FrequencyParams, plan: Plan, round_index: int, outputs: Sequence[JSON]
    ) -> JSON:
        k = params.domain_size
        return {"k": k, "order": th.hadamard_order(k)}

    def report(self, k: int, items: IntArray, epsilon: FloatArray, u: FloatArray) -> FloatArray:
        order = th.hadamard_order(k)
        p, _ = th.support_probabilities("hr", epsilon, k)
        row = items + 1
        y = np.minimum(np.floor(u[:, 1] * order).astype(np.int64), order - 1)
        inside = np.bitwise_count(row & y) % 2 == 0
        wanted = u[:, 0] < p
        y = np.where(inside == wanted, y, y ^ (row & -row))  # the lowest bit of the row flips it
        return y.astype(np.float64)

    def admissible(self, k: int, epsilon: FloatArray, payloads: FloatArray) -> BoolArray:
        return integral_in(payloads, th.hadamard_order(k))

    def support(
        self, k: int, epsilon: FloatArray, payloads: FloatArray, c: FloatArray
    ) -> FloatArray:
        order = th.hadamard_order(k)
        transform = th.walsh_hadamard(_weighted_counts(payloads, c, order))
        return np.asarray((float(np.sum(c)) + transform[1 : k + 1]) / 2.0, dtype=np.float64)

    def report_bounds(
        self, params: FrequencyParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        return _bounds(task, epsilon, th.hadamard_order(params.domain_size) - 1)

    def output_attack_reports(
        self,
        params: FrequencyParams,
        task: RoundTask,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        """Column 0, where every row is +1: it supports all k items (module ``frequency``,
        "Attacks"), where the generic column K − 1 supports the items x whose row x + 1 has an
        even number of bits, about half of them."""
        return np.zeros(epsilon.shape[0])

    def promote(
        self, k: int, targets: IntArray, epsilon: FloatArray, rng: RandomSource
    ) -> FloatArray:
        """A column drawn uniformly among those where every target's row t + 1 is +1: the y
        with popcount((t + 1) & y) even for every target, a linear subspace of GF(2)^log2(K)
        (``_null_space``; column 0 is in it), so y is the sum of a uniform subset of its basis.
        It supports all r targets, every item whose row is a sum of the targets' rows, and
        each other item with probability 1/2, as with an honest report of a target."""
        order = th.hadamard_order(k)
        basis = np.array(
            _null_space([int(t) + 1 for t in targets], order.bit_length() - 1), dtype=np.int64
        )
        n = epsilon.shape[0]
        if basis.size == 0:
            return np.zeros(n)
        pick = np.asarray(rng.random((n, basis.size)), dtype=np.float64) < 0.5
        y = np.bitwise_xor.reduce(np.where(pick, basis[None, :], 0), axis=1)
        return np.asarray(y, dtype=np.float64)


PROTOCOLS: tuple[Protocol[Any], ...] = (
    GeneralizedRR(),
    SymmetricUnaryEncoding(),
    OptimizedUnaryEncoding(),
    BinaryLocalHashing(),
    OptimizedLocalHashing(),
    HadamardResponse(),
    SubsetSelection(),
)
"""The classic frequency oracles of the catalogue."""

"""Counter-based random streams, one per participant, drawn for many participants at once.

Convention 9 of docs/architecture.md asks that participant ``i``'s randomness be a function of (root
seed, ``i``) only: not of how many other participants exist, of chunk sizes, concurrency or process
count. A ``numpy.random.Generator`` per participant gives that, but costs about 40 µs to build,
which is 40 s for a population of 10^6 users. Here draw ``j`` of participant ``i`` under a key is
instead a pure function ``H(key, i, j)`` (the counter-based design of Salmon et al., SC'11, and of
JAX's PRNG), so a whole block of participants is drawn with a few vectorised numpy passes, and a
lone client drawing its own row gets bit-for-bit the same numbers.

``H`` packs ``(i, j)`` into one 64-bit word (``i < 2**40``, ``j < 2**24``) and applies two rounds
of the SplitMix64 finaliser (Stafford's Mix13) with two 64-bit key words between them. Every step
is a bijection of 64-bit words, so distinct ``(i, j)`` under one key never collide: streams of
different participants cannot overlap. This is a statistical generator for simulation, not a
cryptographic one.

``UserStreams`` mirrors the subset of ``numpy.random.Generator`` that the randomizers use
(``random``, ``standard_normal``, ``laplace``, ``integers``), with the rule that the first axis of
``size`` is the participant axis. Randomizers therefore accept either (see ``RandomSource``).

**Device streams (memoization).** The streams a client privatizes with are per study round
(the client's ``round_key``). A protocol that memoizes a response across studies (RAPPOR's
permanent randomized response, Ding et al.'s memoized 1BitMean; docs/longitudinal.md) needs
randomness that persists across studies instead: ``UserStreams.device(purpose)`` gives the
same participants' *device streams*, under a key derived from the stream key's ``device`` key
(which the client sets to a function of the private population seed only, so the same device,
same population seed and index, gets the same device streams in every study and round) and
``purpose``; ``UserStreams.labelled(labels, width)`` draws from them as a pure function of
(key, participant, label, column), consuming no counter, so a response memoized per
(device, value) is that function at label = value. A key without a device key (an audit's, a
test's) falls back to a key derived from the stream key itself: memoization then lasts only
as long as that key.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import TypeAlias, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "RandomSource",
    "StreamKey",
    "UserStreams",
    "halves",
    "ragged_random",
    "random_blocks",
    "random_word_blocks",
    "random_words",
    "stream_key",
    "unit",
]

_T = TypeVar("_T", bound=np.generic)

_INDEX_BITS = 40
_COUNTER_BITS = 24
MAX_PARTICIPANTS = 1 << _INDEX_BITS
MAX_DRAWS = 1 << _COUNTER_BITS

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_TWO_POW_M52 = 2.0**-52
_ONE_BITS = np.uint64(0x3FF << 52)  # the float64 1.0
_ONE_MINUS_HALF_ULP = 1.0 - 2.0**-53
_S12, _S27, _S30, _S31 = np.uint64(12), np.uint64(27), np.uint64(30), np.uint64(31)
_FALLBACK = 0x44455649  # purpose word of the device key derived from a key without one
_LABEL_SALT = 0x9E3779B97F4A7C15


def _mix(z: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """SplitMix64 finaliser, in place on a uint64 array (numpy wraps uint64 products mod 2**64)."""
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


_BLOCK = 1 << 16
"""Words hashed per pass (512 KiB): every step of the two mixes runs on a block that stays in the
core's cache rather than on the whole draw (3× fewer trips to memory than array-wide steps, no
temporaries the size of the draw); the words are the same either way. Not smaller: each pass is
a numpy call, which takes the interpreter lock, and a swarm draws on several threads at once
(issue 27: with 2^15 words two threads drew 200,000 users × 256 samples in 0.49-0.52 s, with
2^16 in 0.39-0.42 s, one thread alike in 0.62-0.68 s)."""


_NARROW = 8
"""Below this many words a participant, ``_draw`` packs (participant, counter) one counter
column at a time: numpy's broadcast of a (rows, 1) by (1, m) operation runs an inner loop of m
elements per row, 2.5 ns a word at m = 2 against 0.8 ns for a column pass (measured)."""


def _mix_block(
    w: NDArray[np.uint64], key: StreamKey, t: NDArray[np.uint64], keyed: bool = False
) -> None:
    """H(key, word) in place on a contiguous block ``w`` (``t``: scratch of its size): two
    SplitMix64 finalisers with the key words before and between them (``keyed``: the words
    hold word ^ k1 already)."""
    if not keyed:
        w ^= key.k1
    for after in (key.k2, None):
        np.right_shift(w, _S30, out=t)
        w ^= t
        w *= _M1
        np.right_shift(w, _S27, out=t)
        w ^= t
        w *= _M2
        np.right_shift(w, _S31, out=t)
        w ^= t
        if after is not None:
            w ^= after


def _hash(z: NDArray[np.uint64], key: StreamKey) -> NDArray[np.uint64]:
    """H(key, word) in place on a C-contiguous array of packed (participant, counter) words,
    block by block (``_BLOCK``); returns z."""
    if not z.flags.c_contiguous:
        raise ValueError("_hash works in place on a C-contiguous array")
    flat = z.reshape(-1)  # a view of z
    scratch = np.empty(min(_BLOCK, flat.size), dtype=np.uint64)
    for start in range(0, flat.size, _BLOCK):
        w = flat[start : start + _BLOCK]
        _mix_block(w, key, scratch[: w.size])
    return z


def _draw(
    key: StreamKey,
    base: NDArray[np.uint64],
    start: int,
    per_user: int,
    uniforms: NDArray[np.float64] | None = None,
) -> NDArray[np.uint64]:
    """Words ``start``..``start + per_user − 1`` of every participant (``base``: its packed
    index xor the key's first word, ``UserStreams._keyed``, one row each), hashed a block of
    rows at a time. With ``uniforms`` (an (n, per_user) array) they are converted to uniforms
    (``_unit``) into it in the same pass, so that it is the only array of its size, and the
    words returned are only the last block's.

    The packed word is (i << 24) | j, and (i << 24) ^ k1 ^ j equals it xor k1, as i << 24 and
    j < 2^24 share no bit: the key's first word is taken once per participant, not per word.
    The uniform (k + 1/2)·2^-52 of a word's top 52 bits k is the float64 of bits
    0x3FF << 52 | k, i.e. 1 + k·2^-52, minus (1 − 2^-53): both lie in [1/2, 2] within a factor
    2 of each other, so the difference is exact (Sterbenz), (2k + 1)·2^-53, as ``_unit``
    computes it; three passes and no integer-to-float conversion."""
    n = base.shape[0]
    raw = uniforms is None
    words = np.empty((n, per_user) if raw else (0, per_user), dtype=np.uint64)
    if n * per_user == 0:
        return words
    counters = np.arange(start, start + per_user, dtype=np.uint64)[None, :]
    rows = max(1, _BLOCK // per_user)
    block = min(n, rows) * per_user
    scratch = np.empty(block, dtype=np.uint64)
    staging = np.empty(0 if raw else block, dtype=np.uint64)
    flat = words.reshape(-1)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        m = (r1 - r0) * per_user
        # raw words are hashed where they are returned; uniforms go through a word block
        w = flat[r0 * per_user : r1 * per_user] if raw else staging[:m]
        packed = w.reshape(r1 - r0, per_user)
        if per_user < _NARROW:  # one column at a time: a broadcast's inner loop is too short
            for j in range(per_user):
                np.bitwise_xor(base[r0:r1, 0], counters[0, j], out=packed[:, j])
        else:
            np.bitwise_xor(base[r0:r1], counters, out=packed)
        _mix_block(w, key, scratch[:m], keyed=True)
        if uniforms is not None:
            o = uniforms.reshape(-1)[r0 * per_user : r1 * per_user]
            np.right_shift(w, _S12, out=w)
            np.bitwise_or(w, _ONE_BITS, out=w)  # 1 + k·2^-52
            np.subtract(w.view(np.float64), _ONE_MINUS_HALF_ULP, out=o)  # exact
    return words if raw else staging


def _unit(words: NDArray[np.uint64]) -> NDArray[np.float64]:
    """(k + 1/2)·2^-52 for the top 52 bits k of each word: strictly inside (0, 1)."""
    return ((words >> np.uint64(12)).astype(np.float64) + 0.5) * _TWO_POW_M52


class StreamKey:
    """Two 64-bit key words naming one family of streams, e.g. (population seed, purpose).

    ``device``: the key of the participants' persistent device streams (``UserStreams.device``)
    when this is a per-study key of a population's devices; it takes no part in equality.
    """

    __slots__ = ("device", "k1", "k2")

    def __init__(self, k1: int, k2: int, device: StreamKey | None = None) -> None:
        self.k1 = np.uint64(k1)
        self.k2 = np.uint64(k2)
        self.device = device

    def child(self, *purpose: int) -> StreamKey:
        """A key derived from this one and ``purpose`` (SeedSequence hashing of both words)."""
        return stream_key((int(self.k1) << 64) | int(self.k2), *purpose)

    def __repr__(self) -> str:
        return f"StreamKey({int(self.k1):#x}, {int(self.k2):#x})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StreamKey) and (self.k1, self.k2) == (other.k1, other.k2)

    def __hash__(self) -> int:
        return hash((int(self.k1), int(self.k2)))


def stream_key(seed: int, *purpose: int) -> StreamKey:
    """Key for the streams of ``purpose`` under ``seed`` (``numpy.random.SeedSequence`` hashing)."""
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed}")
    if any(p < 0 for p in purpose):
        raise ValueError(f"purpose words must be non-negative, got {purpose}")
    state = np.random.SeedSequence(seed, spawn_key=tuple(purpose)).generate_state(2, np.uint64)
    return StreamKey(int(state[0]), int(state[1]))


class UserStreams:
    """The random streams of a block of participants under one key.

    Row ``r`` of every draw comes from participant ``participants[r]``'s own stream. Each call
    consumes the same number of counters from every stream, so a participant's draws depend only
    on the key, its index and the sequence of calls (their per-participant sizes), never on which
    other participants are in the block.
    """

    def __init__(self, key: StreamKey, participants: ArrayLike) -> None:
        idx = np.asarray(participants, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= MAX_PARTICIPANTS):
            raise ValueError(f"participant indices must lie in [0, 2**{_INDEX_BITS})")
        self._key = key
        self._participants = idx
        # each participant's packed index i << 24 xor the key's first word (``_draw``), built
        # in place: one array of n
        keyed = idx.astype(np.uint64)
        keyed <<= np.uint64(_COUNTER_BITS)
        keyed ^= key.k1
        self._keyed = keyed[:, None]
        self._next = 0

    def device(self, purpose: int) -> UserStreams:
        """The same participants' persistent device streams for ``purpose`` (module docstring):
        keyed by the stream key's ``device`` key and ``purpose``, so participant i's device
        streams are the same in every study and round that hands it a key with the same device
        key; without one, derived from this stream's key (per study round)."""
        if purpose < 0:
            raise ValueError(f"purpose must be non-negative, got {purpose}")
        base = self._key.device
        key = base.child(purpose) if base is not None else self._key.child(_FALLBACK, purpose)
        return UserStreams(key, self._participants)

    def labelled(self, labels: ArrayLike, width: int) -> NDArray[np.float64]:
        """``width`` uniforms in (0, 1) per participant that are a pure function of (key,
        participant, ``labels[r]``, column): the same for the same label whatever the calls
        before (no counter is consumed), independent-looking across labels, participants and
        columns. Row r is participant ``participants[r]``'s; ``labels`` non-negative, one per
        row. A memoized response to value v is a function of ``labelled(v, width)``."""
        lab = np.asarray(labels, dtype=np.int64).reshape(-1)
        if lab.shape[0] != self.n:
            raise ValueError(f"one label per participant: {self.n} participants, {lab.size} labels")
        if lab.size and lab.min() < 0:
            raise ValueError("labels must be non-negative")
        if not 0 < width <= MAX_DRAWS:
            raise ValueError(f"width must lie in [1, 2**{_COUNTER_BITS}], got {width}")
        # the label selects a per-row second key word: for one label, (participant, column)
        # ↦ word is the bijection of ``_hash``; different labels use different keys
        row_k2 = _mix(lab.astype(np.uint64) ^ np.uint64(_LABEL_SALT))
        row_k2 ^= self._key.k2
        z = self._keyed ^ np.arange(width, dtype=np.uint64)[None, :]  # (i << 24 | j) ^ k1
        z = _mix(z)
        z ^= _mix(row_k2)[:, None]
        return _unit(_mix(z))

    @property
    def n(self) -> int:
        return int(self._keyed.shape[0])

    @property
    def draws_used(self) -> int:
        return self._next

    def _advance(self, per_user: int) -> int:
        start = self._next
        if start + per_user > MAX_DRAWS:
            raise ValueError(f"a stream holds at most 2**{_COUNTER_BITS} draws")
        self._next = start + per_user
        return start

    def _words(self, per_user: int) -> NDArray[np.uint64]:
        return _draw(self._key, self._keyed, self._advance(per_user), per_user)

    def word_blocks(self, per_user: int, rows: int) -> Iterator[tuple[int, NDArray[np.uint64]]]:
        """``words((n, per_user))`` a block of at most ``rows`` participants at a time: pairs
        (first row r0, the (rows', per_user) words of rows r0..r0 + rows' − 1), the same words
        as ``words`` gives, for a sampler that consumes them block by block in cache rather
        than through one (n, per_user) array. The counters are consumed by the call itself,
        before any block is read: a draw made next comes after these, whether or not the
        blocks have been read yet."""
        if rows < 1:
            raise ValueError(f"rows must be positive, got {rows}")
        start = self._advance(per_user)
        return self._word_blocks(start, per_user, rows)

    def _word_blocks(
        self, start: int, per_user: int, rows: int
    ) -> Iterator[tuple[int, NDArray[np.uint64]]]:
        for r0 in range(0, self.n, rows):
            yield r0, _draw(self._key, self._keyed[r0 : r0 + rows], start, per_user)

    def uniform_blocks(self, per_user: int, rows: int) -> Iterator[tuple[int, NDArray[np.float64]]]:
        """``random((n, per_user))`` a block of at most ``rows`` participants at a time, as
        ``word_blocks`` gives ``words``: the same uniforms, the counters consumed by the call."""
        if rows < 1:
            raise ValueError(f"rows must be positive, got {rows}")
        start = self._advance(per_user)
        return self._uniform_blocks(start, per_user, rows)

    def _uniform_blocks(
        self, start: int, per_user: int, rows: int
    ) -> Iterator[tuple[int, NDArray[np.float64]]]:
        for r0 in range(0, self.n, rows):
            base = self._keyed[r0 : r0 + rows]
            uniforms = np.empty((base.shape[0], per_user), dtype=np.float64)
            _draw(self._key, base, start, per_user, uniforms)
            yield r0, uniforms

    def _per_user(self, size: int | Sequence[int] | None) -> tuple[int, ...]:
        shape = (size,) if isinstance(size, int) else tuple(size or ())
        if not shape or shape[0] != self.n:
            raise ValueError(
                f"the first axis of size must be the participant axis ({self.n}), got {shape}"
            )
        return shape

    def random(self, size: int | Sequence[int] | None = None) -> NDArray[np.float64]:
        """Uniform draws strictly inside (0, 1): (k + 1/2)·2^-52 for 52 random bits k.

        52 bits (not 53) so that k + 1/2 is exact in float64: the result is never 0 or 1, which
        the inverse-CDF samplers (log, log1p) rely on.
        """
        shape = self._per_user(size)
        k = int(np.prod(shape[1:], dtype=np.int64))
        uniforms = np.empty((self.n, k), dtype=np.float64)
        _draw(self._key, self._keyed, self._advance(k), k, uniforms)
        return uniforms.reshape(shape)

    def words(self, size: int | Sequence[int] | None = None) -> NDArray[np.uint64]:
        """The raw 64-bit random words that ``random`` turns into uniforms (the same counters:
        ``random`` is ``unit(words)`` draw for draw), for samplers that spend a word's bits
        otherwise (e.g. two 32-bit integer draws; ``split_words``)."""
        shape = self._per_user(size)
        k = int(np.prod(shape[1:], dtype=np.int64))
        return self._words(k).reshape(shape)

    def standard_normal(self, size: int | Sequence[int] | None = None) -> NDArray[np.float64]:
        """Standard normal draws by Box–Muller (two uniforms per normal, cosine branch)."""
        shape = self._per_user(size)
        u = self.random((self.n, 2, *shape[1:]))
        return np.sqrt(-2.0 * np.log(u[:, 0])) * np.cos(2.0 * np.pi * u[:, 1])

    def laplace(
        self,
        loc: ArrayLike = 0.0,
        scale: ArrayLike = 1.0,
        size: int | Sequence[int] | None = None,
    ) -> NDArray[np.float64]:
        """Laplace draws by inversion of the CDF."""
        shape = self._per_user(size)
        v = self.random(shape) - 0.5
        std = -np.sign(v) * np.log1p(-2.0 * np.abs(v))
        out = np.asarray(loc, dtype=np.float64) + np.asarray(scale, dtype=np.float64) * std
        return np.asarray(out, dtype=np.float64)

    def integers(
        self,
        low: ArrayLike,
        high: ArrayLike | None = None,
        size: int | Sequence[int] | None = None,
    ) -> NDArray[np.int64]:
        """Integers in [low, high) (or [0, low)), ``high`` may differ per participant (row)."""
        if high is None:
            low, high = 0, low
        shape = self._per_user(size)
        lo = np.asarray(low, dtype=np.int64)
        span = np.asarray(high, dtype=np.int64) - lo
        if np.any(span <= 0):
            raise ValueError("integers needs high > low")
        u = self.random(shape)
        if span.ndim == 1 and span.shape[0] == self.n and len(shape) > 1:
            span = span.reshape((self.n,) + (1,) * (len(shape) - 1))
            lo = lo.reshape((self.n,) + (1,) * (len(shape) - 1)) if lo.ndim == 1 else lo
        out = lo + np.minimum(np.floor(u * span).astype(np.int64), span - 1)
        return np.asarray(out, dtype=np.int64)


def ragged_random(
    key: StreamKey, participants: ArrayLike, counts: ArrayLike
) -> NDArray[np.float64]:
    """The first ``counts[r]`` uniforms of participant ``participants[r]``'s stream, participant
    after participant in one flat array: bit for bit ``UserStreams(key, [p]).random((1, c))`` as
    the stream's first draw, for participants of different draw counts in one vectorised pass
    (a block of ``UserStreams`` draws the same count from every participant)."""
    idx = np.asarray(participants, dtype=np.int64).reshape(-1)
    c = np.asarray(counts, dtype=np.int64).reshape(-1)
    if idx.shape != c.shape:
        raise ValueError(f"one count per participant: {idx.size} participants, {c.size} counts")
    if idx.size and (idx.min() < 0 or idx.max() >= MAX_PARTICIPANTS):
        raise ValueError(f"participant indices must lie in [0, 2**{_INDEX_BITS})")
    if c.size and (c.min() < 0 or c.max() > MAX_DRAWS):
        raise ValueError(f"a stream holds 0 to 2**{_COUNTER_BITS} draws per participant")
    total = int(c.sum())
    starts = np.cumsum(c) - c
    counters = np.arange(total, dtype=np.uint64) - np.repeat(starts, c).astype(np.uint64)
    base = np.repeat(idx.astype(np.uint64) << np.uint64(_COUNTER_BITS), c)
    return _unit(_hash(base | counters, key))


RandomSource: TypeAlias = np.random.Generator | UserStreams
"""What the randomizers draw from: a numpy Generator, or a block of per-participant streams."""


def random_words(rng: RandomSource, size: int | Sequence[int]) -> NDArray[np.uint64]:
    """Uniform 64-bit words from either kind of source: a block's per-participant words
    (``UserStreams.words``, the words whose ``unit`` is ``random``) or a Generator's."""
    if isinstance(rng, UserStreams):
        return rng.words(size)
    return np.asarray(rng.integers(0, 1 << 64, size=size, dtype=np.uint64), dtype=np.uint64)


def random_word_blocks(
    rng: RandomSource, n: int, per_user: int, rows: int
) -> Iterator[tuple[int, NDArray[np.uint64]]]:
    """``random_words(rng, (n, per_user))`` in blocks of at most ``rows`` users (first row,
    words): a block's per-participant words (``UserStreams.word_blocks``), or a Generator's,
    drawn by one ``random_words`` call and handed on a block at a time. Either way the draws
    are made by the call, before the blocks are read."""
    if isinstance(rng, UserStreams):
        return rng.word_blocks(per_user, rows)
    return _row_blocks(random_words(rng, (n, per_user)), rows)


def _row_blocks(a: NDArray[_T], rows: int) -> Iterator[tuple[int, NDArray[_T]]]:
    if rows < 1:
        raise ValueError(f"rows must be positive, got {rows}")
    return ((r0, a[r0 : r0 + rows]) for r0 in range(0, a.shape[0], rows))


def random_blocks(
    rng: RandomSource, n: int, per_user: int, rows: int
) -> Iterator[tuple[int, NDArray[np.float64]]]:
    """``rng.random((n, per_user))`` in blocks of at most ``rows`` users (first row,
    uniforms), as ``random_word_blocks`` gives words: a block's per-participant uniforms
    (``UserStreams.uniform_blocks``), or a Generator's, drawn by one ``rng.random`` call."""
    if isinstance(rng, UserStreams):
        return rng.uniform_blocks(per_user, rows)
    return _row_blocks(np.asarray(rng.random((n, per_user)), dtype=np.float64), rows)


def unit(words: NDArray[np.uint64]) -> NDArray[np.float64]:
    """The uniforms in (0, 1) of ``words``, as ``UserStreams.random`` makes them (52 bits)."""
    return _unit(np.asarray(words, dtype=np.uint64))


def halves(words: NDArray[np.uint64]) -> NDArray[np.uint32]:
    """Each word as two independent uniform 32-bit integers, its low half then its high half:
    shape (..., 2m) from (..., m), the same on every platform."""
    w = np.ascontiguousarray(words, dtype=np.uint64)
    if sys.byteorder == "little":  # the memory order is low half, high half: a view
        return w.view(np.uint32)
    low = (w & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    high = (w >> np.uint64(32)).astype(np.uint32)
    return np.stack([low, high], axis=-1).reshape(*w.shape[:-1], 2 * w.shape[-1])

"""Counter-based per-participant streams (protocol/core/streams.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from fedldp.protocol.core.streams import (
    MAX_PARTICIPANTS,
    StreamKey,
    UserStreams,
    ragged_random,
    random_blocks,
    random_word_blocks,
    random_words,
    stream_key,
)

KEY = stream_key(2024, 1, 3)


def test_row_depends_only_on_participant_not_on_block() -> None:
    block = UserStreams(KEY, [3, 17, 999_999])
    alone = UserStreams(KEY, [17])
    assert np.array_equal(block.random((3, 5))[1], alone.random((1, 5))[0])
    assert np.array_equal(block.standard_normal((3, 4))[1], alone.standard_normal((1, 4))[0])
    assert np.array_equal(block.laplace(size=(3,))[1:2], alone.laplace(size=(1,)))


@given(st.lists(st.integers(0, 10**9), min_size=1, max_size=20, unique=True))
def test_any_block_reproduces_each_member(slots: list[int]) -> None:
    together = UserStreams(KEY, slots).random((len(slots), 3))
    for r, s in enumerate(slots):
        assert np.array_equal(together[r], UserStreams(KEY, [s]).random((1, 3))[0])


def test_keys_and_purposes_give_different_streams() -> None:
    a = UserStreams(stream_key(1, 0), [0]).random((1, 8))
    b = UserStreams(stream_key(1, 1), [0]).random((1, 8))
    c = UserStreams(stream_key(2, 0), [0]).random((1, 8))
    assert not np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_successive_calls_consume_fresh_counters() -> None:
    s = UserStreams(KEY, [5])
    first, second = s.random((1, 4)), s.random((1, 4))
    assert not np.array_equal(first, second)
    assert s.draws_used == 8
    both = UserStreams(KEY, [5]).random((1, 8))
    assert np.array_equal(np.concatenate([first, second], axis=1), both)


def test_uniforms_are_uniform_and_uncorrelated() -> None:
    # 200 000 draws from 20 000 adjacent participants x 10 counters. KS at 1e-4 significance, and
    # lag-1 correlations across participants and across counters: under independence each sample
    # correlation is ~N(0, 1/N); |r| < 5/sqrt(N) fails by chance with probability ~6e-7.
    u = UserStreams(KEY, np.arange(20_000)).random((20_000, 10))
    assert np.all((u > 0) & (u < 1))
    assert stats.kstest(u.ravel(), "uniform").pvalue > 1e-4
    across_users = np.corrcoef(u[:-1].ravel(), u[1:].ravel())[0, 1]
    across_draws = np.corrcoef(u[:, :-1].ravel(), u[:, 1:].ravel())[0, 1]
    assert abs(across_users) < 5 / np.sqrt(u[:-1].size)
    assert abs(across_draws) < 5 / np.sqrt(u[:, :-1].size)


def test_every_output_bit_is_fair() -> None:
    # Each of the 52 random bits of 200 000 uniforms: count of ones ~ Bin(N, 1/2); 5 sigma per
    # bit, union over 52 bits: false failure < 52 * 6e-7.
    n = 200_000
    u = UserStreams(KEY, np.arange(n)).random((n,))
    words = (u * 2.0**52 - 0.5).astype(np.uint64)
    ones = np.array([int(((words >> np.uint64(b)) & np.uint64(1)).sum()) for b in range(52)])
    assert np.all(np.abs(ones - n / 2) < 5 * np.sqrt(n / 4))


def test_extreme_words_stay_strictly_inside_the_unit_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extremes = np.array([[0, 2**64 - 1, 2**63, 4095]], dtype=np.uint64)
    s = UserStreams(KEY, [0])
    monkeypatch.setattr(s, "_words", lambda per_user: extremes)
    u = s.random((1, 4))
    assert np.all((u > 0.0) & (u < 1.0))
    assert np.isfinite(np.log(u)).all()
    assert np.isfinite(np.log1p(-u)).all()


def test_normal_and_laplace_laws() -> None:
    n = 100_000
    s = UserStreams(KEY, np.arange(n))
    z = s.standard_normal((n,))
    lap = s.laplace(0.0, 2.0, (n,))
    assert stats.kstest(z, "norm").pvalue > 1e-4
    assert stats.kstest(lap, "laplace", args=(0.0, 2.0)).pvalue > 1e-4


def test_integers_with_per_participant_bounds() -> None:
    n = 50_000
    high = np.where(np.arange(n) % 2 == 0, 3, 10)
    x = UserStreams(KEY, np.arange(n)).integers(0, high, (n, 2))
    assert x.dtype == np.int64
    assert np.all((x >= 0) & (x < high[:, None]))
    assert set(np.unique(x[high == 3])) == {0, 1, 2}
    with pytest.raises(ValueError, match="high > low"):
        UserStreams(KEY, [0]).integers(0, 0, (1,))


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="participant"):
        UserStreams(KEY, [-1])
    with pytest.raises(ValueError, match="participant"):
        UserStreams(KEY, [MAX_PARTICIPANTS])
    with pytest.raises(ValueError, match="first axis"):
        UserStreams(KEY, [0, 1]).random((3,))
    with pytest.raises(ValueError, match="seed"):
        stream_key(-1)


def test_ragged_random_is_each_stream_prefix() -> None:
    key = stream_key(9, 1)
    participants = np.array([5, 0, 2**40 - 1, 77], dtype=np.int64)
    counts = np.array([3, 0, 6, 1], dtype=np.int64)
    got = ragged_random(key, participants, counts)
    want = [
        UserStreams(key, [p]).random((1, int(c)))[0]
        for p, c in zip(participants, counts, strict=True)
    ]
    np.testing.assert_array_equal(got, np.concatenate(want))
    assert np.all((got > 0) & (got < 1))


@pytest.mark.parametrize(
    ("participants", "counts", "message"),
    [
        ([1, 2], [3], "one count per participant"),
        ([-1], [3], "participant indices"),
        ([1], [-1], "0 to 2"),
        ([1], [2**24 + 1], "0 to 2"),
    ],
)
def test_ragged_random_refuses_bad_arguments(
    participants: list[int], counts: list[int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ragged_random(stream_key(0), participants, counts)


def test_device_streams_and_labelled_draws() -> None:
    idx = np.arange(6)
    device = stream_key(3, 9)
    a = StreamKey(1, 2, device)
    b = StreamKey(5, 6, device)
    assert a != b  # the device key takes no part in equality
    # the same device key: the same device streams, whatever the stream key and its draws
    ua = UserStreams(a, idx)
    ua.random((6, 5))
    first = ua.device(1).labelled(idx % 2, 3)
    assert np.array_equal(first, UserStreams(b, idx).device(1).labelled(idx % 2, 3))
    # a row's draws depend on its own participant and label only
    again = UserStreams(b, idx[::-1]).device(1).labelled((idx % 2)[::-1], 3)
    assert np.array_equal(first, again[::-1])
    assert not np.any(first == UserStreams(a, idx).device(2).labelled(idx % 2, 3))
    for labels, width, match in (
        (idx[:3], 3, "one label per participant"),
        (idx - 1, 3, "non-negative"),
        (idx, 0, "width must lie"),
    ):
        with pytest.raises(ValueError, match=match):
            UserStreams(a, idx).device(1).labelled(labels, width)
    with pytest.raises(ValueError, match="purpose must be non-negative"):
        UserStreams(a, idx).device(-1)


def _splitmix_reference(key: StreamKey, participant: int, counter: int) -> int:
    """H(key, participant, counter) word by word in Python integers (the module docstring: two
    SplitMix64 finalisers, the key words before and between them)."""
    mask = (1 << 64) - 1

    def mix(z: int) -> int:
        z ^= z >> 30
        z = (z * 0xBF58476D1CE4E5B9) & mask
        z ^= z >> 27
        z = (z * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    z = (participant << 24 | counter) ^ int(key.k1)
    return mix(mix(z) ^ int(key.k2))


@pytest.mark.parametrize("per_user", [1, 2, 3, 7, 8, 9, 16, 33])
def test_words_are_the_hash_of_participant_and_counter(per_user: int) -> None:
    # every way of packing (participant, counter) (one counter column at a time below 8 words,
    # a broadcast above) gives H itself, as a scalar reference computes it
    ids = np.array([0, 1, 5, 2**39 + 3, 2**40 - 1])
    s = UserStreams(KEY, ids)
    s.random((ids.size, 2))  # the draws start at counter 2
    words = s.words((ids.size, per_user))
    for r, i in enumerate(ids):
        want = [_splitmix_reference(KEY, int(i), 2 + j) for j in range(per_user)]
        assert [int(w) for w in words[r]] == want


@pytest.mark.parametrize(("n", "per_user", "rows"), [(1, 1, 1), (37, 2, 5), (5000, 3, 999)])
def test_blocks_are_the_draws_of_one_call(n: int, per_user: int, rows: int) -> None:
    ids = np.arange(3, 3 + 2 * n, 2)
    one = UserStreams(KEY, ids)
    words, after_words = one.words((n, per_user)), one.random((n, 1))
    uniforms, after_uniforms = one.random((n, per_user)), one.random((n, 1))
    blocked = UserStreams(KEY, ids)
    word_blocks = blocked.word_blocks(per_user, rows)
    assert np.array_equal(blocked.random((n, 1)), after_words)  # counters taken by the call
    uniform_blocks = blocked.uniform_blocks(per_user, rows)
    assert np.array_equal(blocked.random((n, 1)), after_uniforms)
    for blocks, whole in ((word_blocks, words), (uniform_blocks, uniforms)):
        parts = list(blocks)
        assert [r0 for r0, _ in parts] == list(range(0, n, rows))
        assert all(b.shape[0] <= rows for _, b in parts)
        assert np.array_equal(np.concatenate([b for _, b in parts]), whole)


def test_generator_blocks_are_its_draws_of_one_call() -> None:
    gen = np.random.default_rng(3)
    words = list(random_word_blocks(gen, 10, 4, 3))
    after = gen.random()  # the blocks were drawn by the call
    uniforms = list(random_blocks(np.random.default_rng(3), 10, 4, 3))
    assert [r0 for r0, _ in words] == [r0 for r0, _ in uniforms] == [0, 3, 6, 9]
    want = np.random.default_rng(3)
    assert np.array_equal(np.concatenate([w for _, w in words]), random_words(want, (10, 4)))
    assert after == want.random()
    want_uniforms = np.random.default_rng(3).random((10, 4))
    assert np.array_equal(np.concatenate([u for _, u in uniforms]), want_uniforms)
    streams = UserStreams(KEY, [1, 2])
    for refused in (
        lambda: streams.word_blocks(2, 0),
        lambda: streams.uniform_blocks(2, 0),
        lambda: random_blocks(gen, 2, 2, 0),
    ):
        with pytest.raises(ValueError, match="rows must be positive"):
            refused()

"""The samplers of the bit-vector oracles (protocol/classic/frequency_oracles.py): subset
selection's Floyd subsets (``floyd_subsets``, ``floyd_masks``) and unary encoding's 32-bit
comparisons, checked against their exact laws; and the stream words they spend
(protocol/core/streams.py: ``words``, ``halves``, ``unit``)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import chi2

from fedldp.protocol.api import RoundTask, UserData
from fedldp.protocol.classic import oracles as th
from fedldp.protocol.classic.frequency import ClassicFrequency, sample_items
from fedldp.protocol.classic.frequency_oracles import (
    SubsetSelection,
    SymmetricUnaryEncoding,
    floyd_masks,
    floyd_subsets,
    insert_bit,
    mask_bits,
)
from fedldp.protocol.core.streams import UserStreams, halves, stream_key, unit

FALSE_ALARM = 1e-6
"""Each chi-square test's false-failure probability (the threshold is the χ² quantile)."""


def chi_square(counts: np.ndarray, probabilities: np.ndarray) -> tuple[float, float]:
    """(Pearson's statistic, its 1 − ``FALSE_ALARM`` quantile under the law): every expected
    count here is ≥ 100, where the χ²(cells − 1) approximation is accurate."""
    n = counts.sum()
    expected = n * probabilities
    assert expected.min() >= 100
    statistic = float(np.sum((counts - expected) ** 2 / expected))
    return statistic, float(chi2.ppf(1 - FALSE_ALARM, counts.size - 1))


def subset_index(bits: np.ndarray) -> np.ndarray:
    """Each row's 0/1 vector as an integer (its subset's code)."""
    return np.asarray(bits.astype(np.int64) @ (1 << np.arange(bits.shape[1])), dtype=np.int64)


def ss_reports(k: int, epsilon: float, item: int, n: int, seed: int) -> np.ndarray:
    protocol = SubsetSelection()
    params = protocol.parse_params({"domain_size": k})
    eps = np.full(n, epsilon)
    plan = protocol.plan(params, eps, {}, 0)
    task = RoundTask.of(plan.rounds[0], protocol.broadcast(params, plan, 0, []))
    data = UserData(np.full(n, item), np.ones(n, dtype=np.int64))
    rng = UserStreams(stream_key(seed, 3), np.arange(n))
    return protocol.privatize(params, task, data, eps, np.zeros(n, dtype=np.int64), rng)


@pytest.mark.parametrize(("k", "epsilon"), [(5, 1.0), (6, 0.3), (7, 2.0)])
def test_subset_selection_draws_each_subset_with_its_exact_probability(
    k: int, epsilon: float
) -> None:
    # Ye–Barg: Pr[S] ∝ e^ε when the true item v is in S, 1 otherwise, over the d-subsets
    item, n = 2, 120_000
    d = int(th.ss_size(np.array([epsilon]), k)[0])
    reports = ss_reports(k, epsilon, item, n, seed=k)
    assert np.all(reports.sum(axis=1) == d)
    subsets = [sum(1 << x for x in s) for s in itertools.combinations(range(k), d)]
    weight = np.array([math.exp(epsilon) if (s >> item) & 1 else 1.0 for s in subsets])
    codes = subset_index(reports)
    counts = np.array([np.count_nonzero(codes == s) for s in subsets], dtype=np.float64)
    assert counts.sum() == n
    statistic, threshold = chi_square(counts, weight / weight.sum())
    assert statistic <= threshold


def subset_codes(bits: np.ndarray, m: int) -> np.ndarray:
    """Each row's m set columns c_0 < … < c_{m−1} as Σ c_i·w^i (w: the number of columns)."""
    columns = np.nonzero(bits)[1].reshape(-1, m)
    return np.asarray(columns @ (bits.shape[1] ** np.arange(m)), dtype=np.int64)


@pytest.mark.parametrize("pool", [6, 69])
def test_floyd_draws_uniform_subsets_for_each_size(pool: int) -> None:
    # the general (byte array) sampler, also past the 64-item masks: every m-subset of the
    # pool but the skipped column, for a row of size d and one of size d − 1 (skip_first)
    n, d, skipped = 500_000 if pool > 64 else 60_000, 2, 3
    rng = np.random.default_rng(pool)
    words = rng.integers(0, 1 << 64, size=(n, d), dtype=np.uint64)
    skip_first = rng.random(n) < 0.5
    out = np.zeros((n, pool + 1), dtype=np.uint8)
    floyd_subsets(pool, np.full(n, d), skip_first, words, np.full(n, skipped), out)
    assert out[:, skipped].sum() == 0
    others = [c for c in range(pool + 1) if c != skipped]
    for first, m in ((False, d), (True, d - 1)):
        rows = out[skip_first == first]
        assert np.all(rows.sum(axis=1) == m)
        cells = np.sort(
            [
                sum(c * (pool + 1) ** i for i, c in enumerate(s))
                for s in itertools.combinations(others, m)
            ]
        )
        where = np.searchsorted(cells, subset_codes(rows, m))
        assert np.array_equal(cells[where], subset_codes(rows, m))  # every row is a cell
        counts = np.bincount(where, minlength=cells.size).astype(np.float64)
        statistic, threshold = chi_square(counts, np.full(cells.size, 1.0 / cells.size))
        assert statistic <= threshold


def test_bit_masks_draw_the_same_subsets_as_the_byte_array() -> None:
    # floyd_masks is the k ≤ 64 path of the same algorithm on the same words: equal, row for
    # row, at mixed sizes (unequal ε) and with and without the first step
    rng = np.random.default_rng(5)
    for k in (2, 9, 33, 64):
        n = 5_000
        d = rng.integers(1, k, n)
        words = rng.integers(0, 1 << 64, size=(n, int(d.max())), dtype=np.uint64)
        skip_first = rng.random(n) < 0.4
        item = rng.integers(0, k, n)
        out = np.zeros((n, k), dtype=np.uint8)
        out[skip_first, item[skip_first]] = 1
        floyd_subsets(k - 1, d, skip_first, words, item, out)
        masks = insert_bit(floyd_masks(k - 1, d, skip_first, words), item, skip_first)
        assert np.array_equal(mask_bits(masks, k), out.astype(np.float64))
        assert np.array_equal(out.sum(axis=1), d)


@pytest.mark.parametrize("oracle", ["sue", "oue"])
def test_unary_encoding_bits_have_the_realised_law(oracle: str) -> None:
    # each other bit is Bernoulli(q'), the true bit Bernoulli(p'), independently: the joint
    # law of (true bit, one other bit, another) is the product, checked on its 8 cells
    k, epsilon, item, n = 6, 1.0, 4, 200_000
    protocol = SymmetricUnaryEncoding() if oracle == "sue" else _oue()
    params = protocol.parse_params({"domain_size": k})
    eps = np.full(n, epsilon)
    plan = protocol.plan(params, eps, {}, 0)
    task = RoundTask.of(plan.rounds[0], protocol.broadcast(params, plan, 0, []))
    data = UserData(np.full(n, item), np.ones(n, dtype=np.int64))
    rng = UserStreams(stream_key(7, 1), np.arange(n))
    bits = protocol.privatize(params, task, data, eps, np.zeros(n, dtype=np.int64), rng)
    p, q = (float(v[0]) for v in th.support_probabilities(oracle, eps[:1], k))  # type: ignore[arg-type]
    cells = (bits[:, item] * 4 + bits[:, 0] * 2 + bits[:, 5]).astype(np.int64)
    counts = np.bincount(cells, minlength=8).astype(np.float64)
    law = np.array(
        [
            (p if a else 1 - p) * (q if b else 1 - q) * (q if c else 1 - q)
            for a, b, c in itertools.product((0, 1), repeat=3)
        ]
    )
    statistic, threshold = chi_square(counts, law)
    assert statistic <= threshold


def _oue() -> SymmetricUnaryEncoding:
    from fedldp.protocol.classic.frequency_oracles import OptimizedUnaryEncoding

    return OptimizedUnaryEncoding()


def test_unary_encoding_compares_32_bit_halves_with_the_exact_threshold() -> None:
    # the boundary, exactly: a half equal to T − 1 sets a bit, T does not (T = q'·2^32)
    protocol = SymmetricUnaryEncoding()
    k, eps = 4, np.array([1.0])
    _, q = th.support_probabilities("sue", eps, k)
    t = int(q[0] * 2**32)
    low, high = t - 1, t
    words = np.array([[low | (high << 32), high | (low << 32)]], dtype=np.uint64)
    report = protocol.encode(k, np.array([0]), eps, words)
    # halves: (T − 1, T, T, T − 1); item 0 is the true bit: set when its half is ≥ T
    assert report.tolist() == [[0.0, 0.0, 0.0, 1.0]]


def test_stream_words_are_the_uniforms_bits_and_split_low_half_first() -> None:
    key, users = stream_key(11, 4), np.array([0, 5, 1 << 30])
    words = UserStreams(key, users).words((3, 40_000))  # several hash blocks a call
    assert np.array_equal(unit(words), UserStreams(key, users).random((3, 40_000)))
    one = UserStreams(key, users[1:2]).words((1, 40_000))  # a user's row, alone or in a block
    assert np.array_equal(one[0], words[1])
    split = halves(words[:, :2])
    assert np.array_equal(split[:, 0], words[:, 0] & np.uint64(0xFFFFFFFF))
    assert np.array_equal(split[:, 1], words[:, 0] >> np.uint64(32))
    assert split.shape == (3, 4)


@pytest.mark.parametrize("oracle", ["grr", "sue", "oue", "ss", "olh"])
def test_a_users_report_is_its_own_whatever_the_block(oracle: str) -> None:
    # convention 9: alone (an HTTP client) or in a block of users of other ε and sample counts
    # (the simulator's chunk), a user's report is the same: SS's block draws its largest d
    from fedldp.protocol.classic.frequency_oracles import PROTOCOLS

    protocol = next(p for p in PROTOCOLS if p.name == f"classic-{oracle}")
    k, n = 40, 60
    rng = np.random.default_rng(9)
    eps = rng.choice([0.2, 1.0, 3.0], n)
    counts = rng.integers(1, 4, n)
    values = rng.integers(0, k, int(counts.sum()))
    params = protocol.parse_params({"domain_size": k})
    plan = protocol.plan(params, eps, {}, 0)
    task = RoundTask.of(plan.rounds[0], protocol.broadcast(params, plan, 0, []))
    key, ids = stream_key(4, 2), np.arange(100, 100 + n)
    group = np.zeros(n, dtype=np.int64)
    block = protocol.privatize(
        params, task, UserData(values, counts), eps, group, UserStreams(key, ids)
    )
    offsets = np.concatenate([[0], np.cumsum(counts)])
    for i in (0, 7, 31, n - 1):
        own = UserData(values[offsets[i] : offsets[i + 1]], counts[i : i + 1])
        alone = protocol.privatize(
            params, task, own, eps[i : i + 1], group[:1], UserStreams(key, ids[i : i + 1])
        )
        assert np.array_equal(alone[0], block[i])
    one = UserData(values[:n], np.ones(n, dtype=np.int64))  # one sample each: no pick drawn
    block = protocol.privatize(params, task, one, eps, group, UserStreams(key, ids))
    alone = protocol.privatize(
        params,
        task,
        UserData(values[5:6], np.ones(1, dtype=np.int64)),
        eps[5:6],
        group[:1],
        UserStreams(key, ids[5:6]),
    )
    assert np.array_equal(alone[0], block[5])


@pytest.mark.parametrize("oracle", ["grr", "sue", "oue", "ss", "blh", "olh", "hr"])
def test_block_by_block_reports_are_those_of_one_pass(oracle: str) -> None:
    # privatize draws and encodes a block of users at a time (random_blocks,
    # random_word_blocks); the reports are those of the whole population's draws in one pass,
    # a user's alone in any block: 20 000 users span several blocks of every oracle
    from fedldp.protocol.classic.frequency_oracles import PROTOCOLS

    protocol = next(p for p in PROTOCOLS if p.name == f"classic-{oracle}")
    k, n = 40, 20_000
    rng = np.random.default_rng(11)
    eps = rng.choice([0.5, 1.0, 4.0], n)
    counts = rng.integers(1, 3, n)
    values = rng.integers(0, k, int(counts.sum()))
    data = UserData(values, counts)
    params = protocol.parse_params({"domain_size": k})
    plan = protocol.plan(params, eps, {}, 0)
    task = RoundTask.of(plan.rounds[0], protocol.broadcast(params, plan, 0, []))
    key, ids = stream_key(8, 1), np.arange(7, 7 + n)
    group = np.zeros(n, dtype=np.int64)
    blocks = protocol.privatize(params, task, data, eps, group, UserStreams(key, ids))
    one = UserStreams(key, ids)
    if isinstance(protocol, SymmetricUnaryEncoding | SubsetSelection):
        width = protocol.words(k, eps)
        if protocol.pick_first:
            pick = unit(one.words((n, 1))[:, 0])
            words = one.words((n, width))
        else:
            words = one.words((n, width))
            pick = one.random((n, 1))[:, 0]
        whole = protocol.encode(k, sample_items(data, pick, k), eps, words)
    else:
        assert isinstance(protocol, ClassicFrequency)
        u = one.random((n, protocol.draws(params) - 1))
        items = sample_items(data, one.random((n, 1))[:, 0], k)
        whole = protocol.report(k, items, eps, u)
    assert np.array_equal(blocks, whole)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    for i in (n // 2, n - 1):
        own = UserData(values[offsets[i] : offsets[i + 1]], counts[i : i + 1])
        alone = protocol.privatize(
            params, task, own, eps[i : i + 1], group[:1], UserStreams(key, ids[i : i + 1])
        )
        assert np.array_equal(alone[0], blocks[i])

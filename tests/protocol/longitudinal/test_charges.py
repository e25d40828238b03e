"""The charge rules of repeated collection (docs/longitudinal.md §5): what a device and the server
charge per collection, that the server's charge is sound, and an empirical privacy test of the
memoized reports against the charged total.

* Per protocol, the charge of each collection for a device whose memoized state stays the same
  and for one whose state changes, memoized and fresh; the device's states come from
  ``memo_state`` on real data (what a campaign's device computes).
* Soundness on random histories: the server's cumulative charge is at least the device's, no
  charge is negative, one collection costs at most its declared ε.
* Privacy, per protocol: N devices holding one value and N holding a neighbouring one report in
  T collections through the client's own ``privatize`` (device streams as a campaign draws
  them); the empirical privacy loss of the T-report sequences (their bits), a lower confidence
  bound (Clopper–Pearson at α/(2·outcomes·2) per outcome and direction, Bonferroni), must stay
  at or below the charged total; an injected leak, the reports drawn fresh while the rule still
  charges memoization, must exceed it. Measured lower bounds (memoized, leak, charged):
  memo-1bitmean 0.95, 3.61, 1 (T = 4); memo-dbitflip 0.88, 2.47, 1 (T = 3); memo-rappor
  1.57, 2.37, 2.00 (T = 3, f = 0.5: ε_3 = 2·ln g(e^{3t})).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy.stats import beta

from fedldp.client.seeds import device_key
from fedldp.protocol.api import FloatArray, Protocol, UserData, UserStreams, stream_key
from fedldp.protocol.longitudinal.rappor import MemoRappor, longitudinal_epsilon
from fedldp.protocol.longitudinal.telemetry import MemoDBitFlip, MemoOneBitMean
from tests.protocol.longitudinal.helpers import collect, users

ALPHA = 1e-3


def _charges(
    protocol: Protocol[Any], raw: dict[str, Any], eps: list[float], states: list[int] | None
) -> list[float]:
    """Each collection's charge: by the device's rule (``states``) or the server's (None)."""
    params = protocol.parse_params(raw)
    out = []
    for t in range(len(eps)):
        before = None if states is None else states[:t]
        state = None if states is None else states[t]
        out.append(protocol.charge(params, eps[:t], eps[t], before, state))
    return out


def _states(protocol: Protocol[Any], raw: dict[str, Any], data: UserData, seed: int) -> list[int]:
    """The device's (participant 0's) memoized state for ``data`` as its client computes it."""
    params = protocol.parse_params(raw)
    key = stream_key(seed, 0x5354)
    key.device = device_key(7)
    found = protocol.memo_state(params, data, np.ones(data.n_users), UserStreams(key, [0]))
    assert found is not None
    return [int(found[0])]


def _history(protocol: Protocol[Any], raw: dict[str, Any], values: list[Any]) -> list[int]:
    return [
        _states(protocol, raw, users(np.asarray([v])), seed)[0] for seed, v in enumerate(values)
    ]


def test_memo_1bitmean_charges_each_grid_point_once() -> None:
    p, raw = MemoOneBitMean(), {"bound": 1.0, "levels": 1}
    constant = _history(p, raw, [0.0] * 6)
    assert len(set(constant)) == 1  # x = 0 rounds to grid point 0 whatever α
    assert _charges(p, raw, [1.0] * 6, constant) == [1.0, 0, 0, 0, 0, 0]
    changing = _history(p, raw, [0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    assert changing == [0, 1, 0, 1, 1, 0]
    assert _charges(p, raw, [1.0] * 6, changing) == [1.0, 1.0, 0, 0, 0, 0]
    # the server: min(T, s + 1)·ε, whatever the values
    assert _charges(p, raw, [1.0] * 6, None) == [1.0, 1.0, 0, 0, 0, 0]
    fine = {"bound": 1.0, "levels": 4}
    assert _charges(p, fine, [0.5] * 7, None) == [0.5] * 5 + [0, 0]
    # output perturbation keeps the memoized rule (post-processing of the memoized bit)
    assert _charges(p, {**raw, "flip": 0.25}, [1.0] * 4, [0] * 4) == [1.0, 0, 0, 0]
    # fresh: every collection costs its ε, on both sides
    fresh = {**raw, "memoize": False}
    assert p.memo_state(p.parse_params(fresh), users(np.zeros(1)), np.ones(1), _streams()) is None
    assert _charges(p, fresh, [1.0] * 6, [0] * 6) == [1.0] * 6
    assert _charges(p, fresh, [1.0] * 6, None) == [1.0] * 6


def _streams() -> UserStreams:
    return UserStreams(stream_key(1, 2), [0])


def test_memo_dbitflip_charges_each_state_once() -> None:
    p, raw = MemoDBitFlip(), {"domain_size": 6, "buckets": 2}
    constant = _history(p, raw, [3] * 5)
    assert len(set(constant)) == 1
    assert _charges(p, raw, [1.0] * 5, constant) == [1.0, 0, 0, 0, 0]
    moving = _history(p, raw, [0, 1, 2, 3, 4, 5])  # visits its 2 sampled buckets and "none"
    assert sorted(set(moving)) == [0, 1, 2]
    device = _charges(p, raw, [1.0] * 6, moving)
    assert sum(device) == 3.0
    assert device[0] == 1.0
    assert _charges(p, raw, [1.0] * 5, None) == [1.0, 1.0, 1.0, 0, 0]  # d + 1 = 3 states
    every = {"domain_size": 3, "buckets": 3}  # d = k: the value is always sampled, k states
    assert _charges(p, every, [1.0] * 5, None) == [1.0, 1.0, 1.0, 0, 0]
    fresh = {**raw, "memoize": False}
    assert _charges(p, fresh, [1.0] * 5, constant) == [1.0] * 5


def test_memo_rappor_charges_a_kept_value_up_to_eps_infinity() -> None:
    p, f, k = MemoRappor(), 0.5, 4
    raw = {"domain_size": k, "f": f}
    a, b = 1 - f / 2, f / 2
    q_star = 1 / (1 + math.exp(-0.5))  # ε = 1
    q = (q_star - b) / (1 - f)
    t = math.log(q / (1 - q))

    def eps_c(c: int) -> float:  # 2·ln g(e^{ct}), written independently of the code
        y = math.exp(c * t)
        return 2 * math.log((a * y + b) / (b * y + a))

    constant = _history(p, raw, [2] * 8)
    assert constant == [2] * 8
    device = _charges(p, raw, [1.0] * 8, constant)
    np.testing.assert_allclose(np.cumsum(device), [eps_c(c) for c in range(1, 9)], rtol=1e-12)
    assert device[0] == pytest.approx(1.0, rel=1e-12)  # one report: its ε
    e_inf = longitudinal_epsilon(f)
    assert all(eps_c(c) <= min(c * 1.0, e_inf) + 1e-12 for c in range(1, 9))
    # a changing value pays again: two values, each its own capped sum
    two = _charges(p, raw, [1.0] * 4, [0, 1, 0, 1])
    assert sum(two) == pytest.approx(2 * eps_c(2), rel=1e-12)
    # the server, values unknown: T·ε while T ≤ k, then the most even split over k values
    server = _charges(p, raw, [1.0] * 9, None)
    np.testing.assert_allclose(server[:4], [1.0] * 4, rtol=1e-12)
    assert sum(server) == pytest.approx(3 * eps_c(2) + eps_c(3), rel=1e-12)
    assert sum(_charges(p, raw, [1.0] * 400, None)) <= k * e_inf + 1e-9
    fresh = {**raw, "memoize": False}
    assert _charges(p, fresh, [1.0] * 5, constant[:5]) == [1.0] * 5


def test_a_memoized_state_asked_at_another_epsilon_is_refused() -> None:
    p = MemoOneBitMean()
    params = p.parse_params({})
    with pytest.raises(ValueError, match="one ε"):
        p.repeated_epsilon(params, [1.0, 2.0], [0, 0])
    with pytest.raises(ValueError, match="one ε"):
        p.repeated_epsilon(params, [1.0, 2.0])  # the server: any two may share a state
    assert p.repeated_epsilon(params, [1.0, 2.0], [0, 1]) == 3.0  # distinct states: fine
    rappor = MemoRappor()  # a fresh IRR: RAPPOR may change ε between collections
    r = rappor.parse_params({"domain_size": 3})
    assert rappor.repeated_epsilon(r, [1.0, 0.5], [1, 1]) < 1.5


CASES: list[tuple[Protocol[Any], dict[str, Any], int]] = [
    (MemoOneBitMean(), {"levels": 1}, 2),
    (MemoOneBitMean(), {"levels": 5, "flip": 0.1}, 6),
    (MemoDBitFlip(), {"domain_size": 5, "buckets": 2}, 3),
    (MemoDBitFlip(), {"domain_size": 3, "buckets": 3}, 3),
    (MemoRappor(), {"domain_size": 3, "f": 0.5}, 3),
    (MemoRappor(), {"domain_size": 5, "f": 0.05}, 5),
    (MemoRappor(), {"domain_size": 2, "f": 0.9}, 2),
]


@pytest.mark.parametrize(("protocol", "raw", "n_states"), CASES)
def test_the_servers_charge_bounds_the_devices_on_random_histories(
    protocol: Protocol[Any], raw: dict[str, Any], n_states: int
) -> None:
    rng = np.random.default_rng(29)
    params = protocol.parse_params(raw)
    unequal = isinstance(protocol, MemoRappor)  # only RAPPOR covers unequal ε's
    for _ in range(300):
        T = int(rng.integers(1, 16))
        if unequal and rng.random() < 0.5:
            eps = [float(e) for e in rng.choice([0.3, 1.0, 2.5, 8.0], T)]
        else:
            eps = [float(rng.choice([0.3, 1.0, 2.5, 8.0]))] * T
        states = [int(s) for s in rng.integers(0, rng.integers(1, n_states + 1), T)]
        device = _charges(protocol, raw, eps, states)
        server = _charges(protocol, raw, eps, None)
        assert min(device) >= 0.0
        assert min(server) >= 0.0
        assert device[0] <= eps[0] * (1 + 1e-12)
        assert server[0] <= eps[0] * (1 + 1e-12)
        for t in range(1, T + 1):  # every prefix: the server has charged at least the device
            d = protocol.repeated_epsilon(params, eps[:t], states[:t])
            s = protocol.repeated_epsilon(params, eps[:t])
            assert s >= d - 1e-9 * max(1.0, d), (eps[:t], states[:t], s, d)
        assert math.fsum(device) == pytest.approx(
            protocol.repeated_epsilon(params, eps, states), rel=1e-9, abs=1e-12
        )


def _sequences(reports: list[FloatArray], first: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Each device's T reports, their bits (entries from ``first`` on, > 0) as one integer."""
    bits = np.concatenate(
        [(np.asarray(r).reshape(len(r), -1)[:, first:] > 0).astype(np.int64) for r in reports],
        axis=1,
    )
    return np.asarray(bits @ (1 << np.arange(bits.shape[1])), dtype=np.int64)


def _loss_lower_bound(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], outcomes: int) -> float:
    """A lower confidence bound on max_o |ln P(o | a)/P(o | b)| from the two samples' outcome
    counts (Clopper–Pearson, Bonferroni over outcomes and both directions at ALPHA)."""
    level = ALPHA / (2 * outcomes * 2)
    best = 0.0
    for x, y in ((a, b), (b, a)):
        n, m = x.size, y.size
        cx = np.bincount(x, minlength=outcomes)
        cy = np.bincount(y, minlength=outcomes)
        for o in range(outcomes):
            if cx[o] == 0:
                continue
            low = beta.ppf(level, cx[o], n - cx[o] + 1)
            high = 1.0 if cy[o] == m else beta.ppf(1 - level, cy[o] + 1, m - cy[o])
            best = max(best, math.log(low / high))
    return best


PRIVACY: list[tuple[Protocol[Any], dict[str, Any], Any, Any, int, int]] = [
    # protocol, parameters, two neighbouring values, collections T, first report bit audited
    (MemoOneBitMean(), {"bound": 1.0, "levels": 1}, 0.0, 1.0, 4, 0),
    (MemoDBitFlip(), {"domain_size": 2, "buckets": 2}, 0, 1, 3, 2),  # the bits after 2 indices
    (MemoRappor(), {"domain_size": 2, "f": 0.5}, 0, 1, 3, 0),
]


@pytest.mark.parametrize(("protocol", "memo", "value", "other", "T", "first"), PRIVACY)
def test_the_memoized_reports_lose_no_more_than_charged_and_a_leak_is_caught(
    protocol: Protocol[Any], memo: dict[str, Any], value: Any, other: Any, T: int, first: int
) -> None:
    n, eps = 20_000, 1.0
    epsilon = np.full(n, eps)

    def sequences(raw: dict[str, Any], v: Any, population: int) -> Any:
        data = users(np.full(n, v))
        reports = [collect(protocol, raw, data, epsilon, study, population) for study in range(T)]
        return _sequences(reports, first)

    state = _states(protocol, memo, users(np.asarray([value])), 0)
    charged = math.fsum(_charges(protocol, memo, [eps] * T, state * T))  # a kept value
    width = 1 if isinstance(protocol, MemoOneBitMean) else 2  # audited bits per report
    outcomes = 1 << (width * T)
    honest = _loss_lower_bound(sequences(memo, value, 11), sequences(memo, other, 12), outcomes)
    assert honest <= charged
    # the leak: reports drawn afresh (memoize off) while the rule still charges memoization
    fresh = {**memo, "memoize": False}
    leak = _loss_lower_bound(sequences(fresh, value, 11), sequences(fresh, other, 12), outcomes)
    assert leak > charged, (leak, charged)
    assert leak <= T * eps  # and fresh reports stay within their own (basic) charge

"""The classic frequency oracles against two independent libraries, ``multi-freq-ldpy`` (0.2.5)
and ``pure-ldp`` (1.2.0), test references only (the ``test`` extra), never imported by fedldp.

On one fixed population (Zipf(1) over k items, n = 20,000, k ∈ {8, 64}, ε ∈ {0.5, 2, 4}) each
library's client and server run over S seeds beside ours, and:

* the unbiased estimates' mean ‖f̂ − f‖² over the seeds, ours and theirs, each agrees with the
  exact variance of Wang et al. 2017, eq. (2) summed over the items (at each one's own
  parameters), and the two agree with each other, within 4 standard deviations of a mean of S
  squared errors (``runner.mse_tolerance``: Var‖e‖² ≤ 2·tr(C)·λ_max(C); normal tails, a false
  failure has probability about 6e-5 per comparison);
* multi-freq-ldpy's ``*_MI`` aggregators clip the estimate at 0 and renormalise it: we apply
  the same post-processing (``runner.mi``) to ours and compare the two mean errors; that error
  has no closed-form variance, so its spread is estimated from the seeds (Welch, 5 standard
  errors).

What each library implements and how it is compared:

* multi-freq-ldpy: GRR, SUE/OUE (``UE``, optimal False/True), BLH/OLH (``LH``, optimal
  False/True), SS. Its unbiased estimate is recomputed from its clients' reports with the
  textbook de-biasing (its aggregators only return the MI estimate). Its SS subset size is
  max(1, rint(k/(e^ε + 1))), ours the one of ⌊·⌋, ⌈·⌉ of smaller exact variance: each is held
  to its own formula, and ours against theirs allows the two formulas' difference.
* pure-ldp: DE (GRR), UE (SUE, OUE), LH (BLH, OLH), Hadamard response. Its local hashing hashes
  ``str`` with xxhash, which xxhash ≥ 4 refuses ("Strings must be encoded before hashing"), and so
  does multi-freq-ldpy's: the test extra pins ``xxhash<4``, and both libraries' OLH run. Its
  Hadamard response is our scheme (Acharya, Sun, Zhang's for ε ≤ 1) only at ε ≤ 1; above, it
  switches to the general block scheme, a different mechanism with another variance, so HR is
  compared at ε = 0.5 only.

No disagreement was found: every library mechanism matches eq. (2) and ours.

multi-freq-ldpy's clients are numba-compiled (a few seconds once per process) and draw from
numba's own generator, which ``np.random.seed`` called from Python does not seed: ``_seed``
seeds it from inside a compiled function (the libraries' legacy global generators are what they
draw from, hence ``np.random.seed`` here). Runtimes: a few seconds per case with S = 6; the
local-hashing servers at k = 64 evaluate n·k Python hashes per seed (about a second), so those
cases run S = 3 seeds and are marked slow.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import pytest

from fedldp.protocol.classic import oracles as th
from tests.protocol.classic.runner import frequencies, mi, mse_tolerance, run_once, zipf_items

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the libraries' imports warn (deprecations of their deps)
    import numba
    import xxhash
    from multi_freq_ldpy.pure_frequency_oracles import GRR as MF_GRR
    from multi_freq_ldpy.pure_frequency_oracles import LH as MF_LH
    from multi_freq_ldpy.pure_frequency_oracles import SS as MF_SS
    from multi_freq_ldpy.pure_frequency_oracles import UE as MF_UE
    from pure_ldp.frequency_oracles import (
        DEClient,
        DEServer,
        HadamardResponseClient,
        HadamardResponseServer,
        LHClient,
        LHServer,
        UEClient,
        UEServer,
    )

N = 20_000
KS = (8, 64)
EPSILONS = (0.5, 2.0, 4.0)


def _seed_inside(seed: int) -> None:
    np.random.seed(seed)  # noqa: NPY002 - numba's generator is seeded only this way


_seed_numba = cast(Callable[[int], None], numba.njit(_seed_inside))


def _seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - the libraries draw from the legacy global state
    _seed_numba(seed)


def _debias(counts: np.ndarray, n: int, p: float, q: float) -> np.ndarray:
    return np.asarray((counts / n - q) / (p - q), dtype=np.float64)


def _lh_counts(reports: list[tuple[int, int]], k: int, g: int) -> np.ndarray:
    counts = np.zeros(k)
    for y, seed in reports:
        for v in range(k):
            if y == xxhash.xxh32(str(v), seed=seed).intdigest() % g:
                counts[v] += 1
    return counts


# ----------------------------------------------------------------------- multi-freq-ldpy


def mf_run(oracle: str, k: int, eps: float, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """multi-freq-ldpy on ``items``: (the unbiased estimate from its reports, its MI estimate)."""
    n = items.size
    xs = [int(x) for x in items]
    if oracle == "grr":
        reports = [MF_GRR.GRR_Client(x, k, eps) for x in xs]
        p, q = (float(v[0]) for v in th.support_probabilities("grr", np.array([eps]), k))
        counts = np.bincount(np.asarray(reports), minlength=k).astype(np.float64)
        return _debias(counts, n, p, q), MF_GRR.GRR_Aggregator_MI(reports, k, eps)
    if oracle in ("sue", "oue"):
        optimal = oracle == "oue"
        name: th.Oracle = "oue" if optimal else "sue"
        vectors = [MF_UE.UE_Client(x, k, eps, optimal) for x in xs]
        p, q = (float(v[0]) for v in th.support_probabilities(name, np.array([eps]), k))
        counts = np.sum(vectors, axis=0)
        return _debias(counts, n, p, q), MF_UE.UE_Aggregator_MI(vectors, eps, optimal)
    if oracle in ("blh", "olh"):
        optimal = oracle == "olh"
        pairs = [MF_LH.LH_Client(x, k, eps, optimal) for x in xs]
        g = round(math.exp(eps)) + 1 if optimal else 2
        p = math.exp(eps) / (math.exp(eps) + g - 1)
        unbiased = _debias(_lh_counts(pairs, k, g), n, p, 1.0 / g)
        return unbiased, mi(unbiased)  # its MI is this post-processing of the same counts
    if oracle == "ss":
        subsets = [MF_SS.SS_Client(x, k, eps) for x in xs]
        d = max(1, int(np.rint(k / (math.exp(eps) + 1))))
        p, q = _ss_pq(d, k, eps)
        counts = np.bincount(np.concatenate(subsets), minlength=k).astype(np.float64)
        return _debias(counts, n, p, q), MF_SS.SS_Aggregator_MI(subsets, k, eps)
    raise AssertionError(oracle)


def _ss_pq(d: int, k: int, eps: float) -> tuple[float, float]:
    p = d * math.exp(eps) / (d * math.exp(eps) + k - d)
    return p, (d - p) / (k - 1)


def mf_variance(oracle: str, k: int, eps: float) -> float:
    """Eq. (2) summed over the items at multi-freq-ldpy's parameters (its own SS size)."""
    if oracle == "ss":
        p, q = _ss_pq(max(1, int(np.rint(k / (math.exp(eps) + 1)))), k, eps)
        return float(th.summed_variance(np.array([p]), np.array([q]), k)[0]) / N
    pp, qq = th.support_probabilities(cast(th.Oracle, oracle), np.array([eps]), k)
    return float(th.summed_variance(pp, qq, k)[0]) / N


# ----------------------------------------------------------------------------- pure-ldp


def pl_run(oracle: str, k: int, eps: float, items: np.ndarray) -> tuple[np.ndarray, None]:
    """pure-ldp on ``items`` (its items are 1..k): its server's unbiased estimate, as
    frequencies."""
    client: Any
    server: Any
    if oracle == "grr":
        client, server = DEClient(eps, k), DEServer(eps, k)
    elif oracle in ("sue", "oue"):
        client, server = (
            UEClient(eps, k, use_oue=oracle == "oue"),
            UEServer(eps, k, use_oue=oracle == "oue"),
        )
    elif oracle in ("blh", "olh"):
        client, server = (
            LHClient(eps, k, use_olh=oracle == "olh"),
            LHServer(eps, k, use_olh=oracle == "olh"),
        )
    elif oracle == "hr":
        server = HadamardResponseServer(eps, k)
        client = HadamardResponseClient(eps, k, server.get_hash_funcs())
    else:
        raise AssertionError(oracle)
    with warnings.catch_warnings():
        # its Hadamard response passes a float to random.randint (deprecated since Python 3.10)
        warnings.simplefilter("ignore", DeprecationWarning)
        for x in items:
            server.aggregate(client.privatise(int(x) + 1))
        counts = np.asarray(server.estimate_all(range(1, k + 1), suppress_warnings=True))
    return np.asarray(counts / items.size, dtype=np.float64), None


Runner = Callable[[str, int, float, np.ndarray], tuple[np.ndarray, Any]]
CASES: list[Any] = []
for _lib, _oracles in (
    ("multi-freq-ldpy", ("grr", "sue", "oue", "blh", "olh", "ss")),
    ("pure-ldp", ("grr", "sue", "oue", "blh", "olh", "hr")),
):
    for _oracle in _oracles:
        for _k in KS:
            for _eps in EPSILONS:
                if _oracle == "hr" and _eps > 1.0:
                    continue  # pure-ldp's HR is another scheme above ε = 1 (module docstring)
                heavy = _k == 64 and _oracle in ("blh", "olh")
                marks = [pytest.mark.slow] if heavy else []
                CASES.append(pytest.param(_lib, _oracle, _k, _eps, marks=marks))


@pytest.mark.parametrize(("library", "oracle", "k", "epsilon"), CASES)
def test_library_and_ours_agree_with_the_variance_and_each_other(
    library: str, oracle: str, k: int, epsilon: float
) -> None:
    seeds = 3 if k == 64 and oracle in ("blh", "olh") else 6
    items = zipf_items(k, N, seed=100 + k)
    f = frequencies(items, k)
    eps = np.full(N, epsilon)
    run: Runner = mf_run if library == "multi-freq-ldpy" else pl_run
    ours, ours_mi, theirs, theirs_mi = [], [], [], []
    for s in range(seeds):
        _seed(1000 + s)
        unbiased, post = run(oracle, k, epsilon, items)
        theirs.append(float(np.sum((unbiased - f) ** 2)))
        mine = np.asarray(run_once(oracle, k, items, eps, seed=s)["frequencies"])
        ours.append(float(np.sum((mine - f) ** 2)))
        if post is not None:
            theirs_mi.append(float(np.sum((np.asarray(post) - f) ** 2)))
            ours_mi.append(float(np.sum((mi(mine) - f) ** 2)))
    p, q = th.support_probabilities(cast(th.Oracle, oracle), eps[:1], k)
    formula_ours = float(th.summed_variance(p, q, k)[0]) / N
    formula_theirs = formula_ours
    if library == "multi-freq-ldpy":
        formula_theirs = mf_variance(oracle, k, epsilon)
    tol_ours = mse_tolerance(oracle, k, eps, formula_ours, seeds)
    tol_theirs = mse_tolerance(oracle, k, eps, formula_theirs, seeds)
    assert abs(np.mean(ours) - formula_ours) <= tol_ours
    assert abs(np.mean(theirs) - formula_theirs) <= tol_theirs
    gap = abs(np.mean(ours) - np.mean(theirs) - (formula_ours - formula_theirs))
    assert gap <= math.hypot(tol_ours, tol_theirs)
    if ours_mi:
        spread = math.sqrt((np.var(ours_mi, ddof=1) + np.var(theirs_mi, ddof=1)) / seeds)
        assert abs(np.mean(ours_mi) - np.mean(theirs_mi)) <= 5.0 * spread

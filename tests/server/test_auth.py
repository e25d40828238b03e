"""Tokens (server/runtime/auth.py)."""

from __future__ import annotations

import base64
import hmac
import tracemalloc

from fedldp.server.runtime.auth import (
    TokenCache,
    block_token_for,
    block_token_ok,
    new_secret,
    token_for,
    token_ok,
    tokens_for,
)


def test_tokens_are_per_study_and_participant() -> None:
    secret = new_secret()
    token = token_for(secret, "s1", 3)
    assert token_ok(secret, "s1", 3, token)
    assert not token_ok(secret, "s1", 4, token)
    assert not token_ok(secret, "s2", 3, token)
    assert not token_ok(new_secret(), "s1", 3, token)
    assert not token_ok(secret, "s1", 3, token[:-1] + "é")  # non-ASCII: refused, not an error


def test_the_cache_answers_like_the_hmac_and_stays_bounded() -> None:
    secret = new_secret()
    cache = TokenCache(capacity=10)
    good = token_for(secret, "a", 1)
    assert not cache.ok(secret, "a", 1, "forged")  # a bad token is never cached
    assert cache.ok(secret, "a", 1, good)
    assert cache.ok(secret, "a", 1, good)  # from the cache
    assert not cache.ok(secret, "a", 1, "forged")  # the cache does not accept another token
    assert not cache.ok(secret, "a", 2, good)
    for pid in range(20):  # a second study overflows the capacity: the older study goes
        assert cache.ok(secret, "b", pid, token_for(secret, "b", pid))
    assert "a" not in cache._known
    assert cache.ok(secret, "a", 1, good)  # still valid, recomputed


def test_tokens_for_many_are_each_the_hmac_of_study_and_participant() -> None:
    secret = new_secret()
    ids = [0, 1, 9, 10, 12345, 2**31 - 1]
    one_by_one = [
        base64.urlsafe_b64encode(hmac.digest(bytes.fromhex(secret), f"s1:{pid}".encode(), "sha256"))
        .rstrip(b"=")
        .decode()
        for pid in ids
    ]
    assert tokens_for(secret, "s1", ids) == one_by_one
    assert [token_for(secret, "s1", pid) for pid in ids] == one_by_one
    assert tokens_for(secret, "s1", []) == []


def test_the_cache_verifies_a_batch_token_by_token() -> None:
    secret = new_secret()
    cache = TokenCache()
    good = tokens_for(secret, "a", range(4))
    given = [good[0], "forged", good[1][:-1] + "é", good[3]]
    assert cache.verify(secret, "a", [0, 1, 2, 3], given) == [True, False, False, True]
    assert cache.verify(secret, "a", [0, 1, 2, 3], good) == [True, True, True, True]
    assert cache.verify(secret, "a", [1, 0], [good[0], good[1]]) == [False, False]


def test_the_cache_keeps_a_verified_token_in_about_8_bytes() -> None:
    """bench_ingest's server grew by 54 MiB over 400 000 reports of one study: the cache held
    each token as a str in a dict (about 145 bytes) and never dropped the only study. Now its
    64-bit hash, in blocks of 4096 ids (50 000 ids fill 13 blocks: 8.5 bytes an id); the
    tokens themselves, made before, are not counted."""
    secret = new_secret()
    n = 50_000
    ids = list(range(n))
    tokens = tokens_for(secret, "a", ids)
    cache = TokenCache()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assert all(cache.verify(secret, "a", ids, tokens))
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept / n < 9.0
    assert cache.verify(secret, "a", ids[:3], tokens[:3]) == [True] * 3  # served by the cache


def test_a_study_that_alone_overflows_the_cache_starts_again_empty() -> None:
    secret = new_secret()
    cache = TokenCache(capacity=2 * 4096)  # two blocks of ids
    ids = list(range(0, 3 * 4096, 7))  # three blocks
    tokens = tokens_for(secret, "a", ids)
    assert all(cache.verify(secret, "a", ids, tokens))
    assert cache._size <= cache.capacity
    assert all(cache.verify(secret, "a", ids, tokens))  # recomputed where dropped
    forged = [t[::-1] for t in tokens]
    assert not any(cache.verify(secret, "a", ids, forged))


def test_block_tokens_are_per_study_and_block() -> None:
    secret = new_secret()
    token = block_token_for(secret, "s1", 0, 10)
    assert block_token_ok(secret, "s1", 0, 10, token)
    for study, start, stop in (("s1", 0, 9), ("s1", 1, 10), ("s2", 0, 10)):
        assert not block_token_ok(secret, study, start, stop, token)
    assert not block_token_ok(new_secret(), "s1", 0, 10, token)
    assert not block_token_ok(secret, "s1", 0, 10, token[:-1] + "é")
    assert token not in {token_for(secret, "s1", pid) for pid in range(11)}

"""Tokens (server/auth.py)."""

from __future__ import annotations

from server.auth import TokenCache, new_secret, token_for, token_ok


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

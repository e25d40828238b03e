"""Participants' tokens and the admin key.

A token is HMAC-SHA256(study secret, "study id:participant id"), base64url: the server stores no
token and checks one in a microsecond or two, which the 50 000-report batches need.
"""

from __future__ import annotations

import base64
import hmac
import secrets
import threading
from collections import OrderedDict

from server.errors import AdminKeyInvalid, AdminKeyRequired

__all__ = ["TokenCache", "check_admin", "new_secret", "token_for", "token_ok"]


def new_secret() -> str:
    return secrets.token_hex(32)


def token_for(secret: str, study_id: str, participant_id: int) -> str:
    mac = hmac.digest(bytes.fromhex(secret), f"{study_id}:{participant_id}".encode(), "sha256")
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def token_ok(secret: str, study_id: str, participant_id: int, token: str) -> bool:
    # as bytes: compare_digest raises TypeError on str with non-ASCII characters (and a JSON
    # string may hold lone surrogates, which only "surrogatepass" encodes)
    given = token.encode("utf-8", "surrogatepass")
    return hmac.compare_digest(token_for(secret, study_id, participant_id).encode(), given)


class TokenCache:
    """Tokens already verified, per study: a batch agent asks with the same 10 000 tokens at
    every poll and every report batch, and recomputing each HMAC was a third of the server's time
    on the batch path. Bounded: past ``capacity`` tokens the least recently added study goes."""

    def __init__(self, capacity: int = 1_000_000) -> None:
        self.capacity = capacity
        self._known: OrderedDict[str, dict[int, str]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def ok(self, secret: str, study_id: str, participant_id: int, token: str) -> bool:
        known = self._known.get(study_id)
        cached = None if known is None else known.get(participant_id)
        if cached is not None:
            return hmac.compare_digest(cached.encode(), token.encode("utf-8", "surrogatepass"))
        if not token_ok(secret, study_id, participant_id, token):
            return False
        if known is None:
            with self._lock:
                known = self._known.setdefault(study_id, {})
        known[participant_id] = token  # one dict store: atomic, no lock needed
        self._size += 1  # a bound, not an exact count (threads may race on it)
        if self._size > self.capacity:
            with self._lock:
                while self._size > self.capacity and len(self._known) > 1:
                    _, dropped = self._known.popitem(last=False)
                    self._size -= len(dropped)
        return True


def check_admin(configured: str | None, given: str | None) -> None:
    """Admin requests need the configured key (none configured: open, for local runs)."""
    if configured is None:
        return
    if not given:
        raise AdminKeyRequired("this server requires the X-Admin-Key header for this request")
    if not hmac.compare_digest(configured.encode(), given.encode()):
        raise AdminKeyInvalid("the X-Admin-Key header does not match the server's admin key")

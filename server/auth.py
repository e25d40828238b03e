"""Participants' tokens and the admin key.

A token is HMAC-SHA256(study secret, "study id:participant id"), base64url: the server stores no
token and checks one in a microsecond or two, which the 50 000-report batches need.
"""

from __future__ import annotations

import base64
import hmac
import secrets

from server.errors import AdminKeyInvalid, AdminKeyRequired

__all__ = ["check_admin", "new_secret", "token_for", "token_ok"]


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


def check_admin(configured: str | None, given: str | None) -> None:
    """Admin requests need the configured key (none configured: open, for local runs)."""
    if configured is None:
        return
    if not given:
        raise AdminKeyRequired("this server requires the X-Admin-Key header for this request")
    if not hmac.compare_digest(configured.encode(), given.encode()):
        raise AdminKeyInvalid("the X-Admin-Key header does not match the server's admin key")

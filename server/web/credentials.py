"""Who may call what: the security schemes of the OpenAPI document and the checks that run
before a request body is validated (so callers without credentials get 401, never the detailed
422 of a body they may not send).

Four schemes: ``adminKey`` (header ``X-Admin-Key``: create, start and cancel studies, lease
ids), ``participantToken`` (``Authorization: Bearer <token>`` from enrollment, on every
single-participant endpoint; a report's body field ``token`` is its deprecated older place),
``blockToken`` (``Authorization: Bearer <start>.<stop>.<token>``, a block token from a batch
enrollment, on the batch endpoints, as an alternative to the body's ``tokens`` or ``blocks``)
and ``leaseToken`` (``Authorization: Bearer <token>`` from a lease, to enroll its ids).

A report's token is checked here against the study's key, which the process reads once per study
(``Context.study_secret``), so the per-report path makes no extra database round trip; the
check is an HMAC, then a cached dictionary lookup (``TokenCache``).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from fedldp.protocol.core.wire import MAX_ID
from fedldp.server.errors import InvalidToken, TokenRequired, UnknownStudy
from fedldp.server.runtime.auth import check_admin
from fedldp.server.runtime.context import Context

__all__ = [
    "PARTICIPANT_SCHEME",
    "BlockBearer",
    "LeaseBearer",
    "ParticipantBearer",
    "batch_credentials",
    "bearer",
    "enroll_credentials",
    "participant_bearer",
    "report_credentials",
    "require_admin",
    "require_token",
]

_admin_key = APIKeyHeader(
    name="X-Admin-Key",
    scheme_name="adminKey",
    description="the server's admin key (FEDLDP_ADMIN_KEY; no key configured: open)",
    auto_error=False,
)
PARTICIPANT_SCHEME = "participantToken"
participant_bearer = HTTPBearer(
    scheme_name=PARTICIPANT_SCHEME,
    description="the participant's token, from its enrollment",
    auto_error=False,
)
_block = HTTPBearer(
    scheme_name="blockToken",
    bearerFormat="start.stop.token",
    description="a block token from a batch enrollment, as start.stop.token: it stands for "
    "participants start..stop-1 (or give tokens or blocks in the body)",
    auto_error=False,
)
_lease = HTTPBearer(
    scheme_name="leaseToken",
    description="the token of a lease: enrolling explicit participant ids needs it, and only "
    "the lease's ids are accepted",
    auto_error=False,
)


def _context(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


async def require_admin(
    request: Request, key: Annotated[str | None, Depends(_admin_key)] = None
) -> None:
    """A dependency: the admin key, when the server has one (401/403 otherwise)."""
    check_admin(_context(request).settings.admin_key, key)


Credential = HTTPAuthorizationCredentials | None
ParticipantBearer = Annotated[Credential, Depends(participant_bearer)]
BlockBearer = Annotated[Credential, Depends(_block)]
LeaseBearer = Annotated[Credential, Depends(_lease)]


def bearer(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer`` header (None without one)."""
    value = request.headers.get("authorization")
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def require_token(credentials: Credential) -> str:
    if credentials is None or not credentials.credentials:
        raise TokenRequired("this endpoint needs the participant's token (Authorization: Bearer)")
    return credentials.credentials


async def report_credentials(request: Request, data: Any) -> Any:
    """A single report's token (the header's, else the body's deprecated ``token``), checked
    against its participant id before the body is validated (a body naming no valid participant
    id goes on to be refused by validation); the token the body then holds."""
    header = bearer(request)
    body = data if isinstance(data, dict) else {}
    token = header if header is not None else body.get("token")
    if not isinstance(token, str) or not token:
        raise TokenRequired("a report needs its participant's token (Authorization: Bearer)")
    pid = body.get("participant_id")
    if type(pid) is not int or not 0 <= pid <= MAX_ID:
        return body if header is None else {**body, "token": header}  # refused as invalid
    ctx = _context(request)
    study_id: str = request.path_params["study_id"]
    secret = ctx.secrets.get(study_id)
    if secret is None:
        secret = await asyncio.to_thread(ctx.study_secret, study_id)
        if secret is None:
            raise UnknownStudy(f"no study {study_id!r}")
    if not ctx.tokens.ok(secret, study_id, pid, token):
        raise InvalidToken(f"the token of participant {pid} is not valid for study {study_id}")
    return body if header is None else {**body, "token": header}


async def batch_credentials(request: Request, data: Any) -> Any:
    """A batch needs ``tokens`` or ``blocks`` in its body, or a block token as bearer (which
    becomes its ``blocks``); they are checked per participant once the body is valid."""
    body = data if isinstance(data, dict) else {}
    header = bearer(request)
    if header is not None and body.get("tokens") is None and body.get("blocks") is None:
        start, _, rest = header.partition(".")
        stop, _, token = rest.partition(".")
        if not (start.isdecimal() and stop.isdecimal() and token):
            raise InvalidToken("a block token bearer reads start.stop.token")
        body = {**body, "blocks": [{"start": int(start), "stop": int(stop), "token": token}]}
    if body.get("tokens") is None and body.get("blocks") is None:
        raise TokenRequired(
            "a batch needs its participants' tokens or block tokens (in the body, or a block "
            "token as Authorization: Bearer start.stop.token)"
        )
    return body


async def enroll_credentials(request: Request, data: Any) -> Any:
    """Enrolling explicit participant ids needs a lease token (checked with the lease)."""
    if _names_ids(data) and bearer(request) is None:
        raise TokenRequired(
            "enrolling explicit participant ids needs their lease's token (Authorization: Bearer)"
        )
    return data


def _names_ids(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    if data.get("participant_id") is not None or data.get("participant_ids") is not None:
        return True
    rows = data.get("participants")
    return isinstance(rows, list) and any(
        isinstance(row, dict) and row.get("participant_id") is not None for row in rows
    )

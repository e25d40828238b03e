"""The JSON error replies of the API (docs/architecture.md, convention 4: errors mapped to HTTP in
one place), used by the app's exception handlers (``fedldp.server.web.app``) and by the per-user
fast path (``fedldp.server.web.fastpath``), so both render every refusal with the same bytes."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi.responses import JSONResponse

from fedldp.server.errors import DatabaseUnavailable, FedldpError

__all__ = ["database_unavailable", "error_reply", "refusal"]

log = logging.getLogger("fedldp.server")


def error_reply(
    status: int, code: str, detail: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """``{"code", "detail"}`` with ``status``."""
    return JSONResponse({"code": code, "detail": detail}, status_code=status, headers=headers)


def refusal(exc: FedldpError) -> JSONResponse:
    """The reply to a refusal the services raised."""
    return error_reply(exc.status, exc.code, exc.detail)


def database_unavailable(method: str, path: str, exc: Exception) -> JSONResponse:
    """503 ``database_unavailable`` with ``Retry-After`` (a refused connection, a pool with no
    free connection, a lock that timed out: nothing of the request was committed)."""
    log.warning("database unavailable on %s %s: %s", method, path, exc)
    return error_reply(
        DatabaseUnavailable.status,
        DatabaseUnavailable.code,
        "the database refused or timed out the request's connection or lock; try again",
        {"Retry-After": "1"},
    )

"""The FastAPI application factory (STYLE.md rule 5: ``create_app(settings)``, no import-time app).

Request bodies are capped per route while they stream in (``fedldp.server.limits``). Errors:
every ``FedldpError`` renders as ``{"code", "detail"}`` with its status; request bodies that
fail validation as 422 ``invalid_request``; unknown routes as 404 ``not_found``; anything else as a
500 ``internal_error`` without a stack trace (which goes to the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from fedldp.server import __version__
from fedldp.server.bodies import add_body_schemas, validation_detail
from fedldp.server.context import Context
from fedldp.server.db import Database
from fedldp.server.errors import FedldpError
from fedldp.server.grouping import ReportGrouper
from fedldp.server.limits import BodyLimit
from fedldp.server.rounds import sweep
from fedldp.server.routes import router
from fedldp.server.settings import Settings

__all__ = ["create_app"]

log = logging.getLogger("fedldp.server")

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}


def _error(status: int, code: str, detail: str) -> JSONResponse:
    return JSONResponse({"code": code, "detail": detail}, status_code=status)


async def _sweeper(ctx: Context) -> None:
    """Close complete or late rounds and start studies whose enrollment deadline passed."""
    while True:
        try:
            await asyncio.to_thread(sweep, ctx)
        except Exception:
            log.exception("sweep failed; retrying in %.1f s", ctx.settings.sweep_interval_s)
        await asyncio.sleep(ctx.settings.sweep_interval_s)


def create_app(settings: Settings | None = None, *, sweeper: bool = True) -> FastAPI:
    """The app for ``settings`` (default: from the environment). ``sweeper=False`` leaves the
    deadline sweeper off (tests drive ``fedldp.server.rounds.sweep`` themselves)."""
    settings = settings or Settings()
    ctx = Context(settings, Database(settings))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(_sweeper(ctx)) if sweeper else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            ctx.db.dispose()

    app = FastAPI(
        title="fedldp aggregation server",
        version=__version__,
        description=(
            "Runs multi-round federated LDP protocols over privatized reports. Writing a "
            "client: docs/clients.md in the fedldp repository (one participant's round trip "
            "in curl and in plain Python, what to compute for every payload kind, and every "
            "broadcast field; GET /v1/protocols lists each protocol's broadcast fields and "
            "minimum population)."
        ),
        lifespan=lifespan,
    )
    app.state.ctx = ctx
    app.state.grouper = ReportGrouper(ctx)
    app.include_router(router)
    add_body_schemas(app)
    app.add_middleware(
        BodyLimit, single=settings.max_body_bytes, batch=settings.max_batch_body_bytes
    )

    @app.exception_handler(FedldpError)
    async def _fedldp(request: Request, exc: FedldpError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.detail)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, "invalid_request", validation_detail(exc.errors()) or "invalid request")

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        return _error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return _error(500, "internal_error", "the server hit an internal error (see its log)")

    return app

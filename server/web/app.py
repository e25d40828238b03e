"""The FastAPI application factory (docs/architecture.md, convention 5: ``create_app(settings)``, no
import-time app).

Request bodies are capped per route while they stream in (``fedldp.server.web.limits``). Errors:
every ``FedldpError`` renders as ``{"code", "detail"}`` with its status; request bodies that
fail validation as 422 ``invalid_request``; unknown routes as 404 ``not_found``; anything else as a
500 ``internal_error`` without a stack trace (which goes to the log); the replies are
``fedldp.server.web.replies``'. The two per-user requests (a participant's task, its report) are
answered by ``fedldp.server.web.fastpath`` ahead of FastAPI's router, with the same bytes.

Docs: ``/docs`` (Swagger UI) and ``/redoc`` load their scripts and styles from ``/docs-assets``,
files that ship in the ``fastapi-offline`` wheel, so they render with no network (FastAPI's default
pages fetch them from a CDN).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException
from starlette.routing import compile_path

from fedldp.server import __version__
from fedldp.server.errors import FedldpError
from fedldp.server.runtime.context import Context
from fedldp.server.services.grouping import ReportGrouper
from fedldp.server.services.rounds import sweep
from fedldp.server.services.studies import catalogue, count_by_phase
from fedldp.server.settings import Settings
from fedldp.server.store.db import Database
from fedldp.server.web.bodies import add_body_schemas, validation_detail
from fedldp.server.web.campaign_routes import campaign_router
from fedldp.server.web.dashboard import add_dashboard
from fedldp.server.web.fastpath import FastPath
from fedldp.server.web.limits import BodyLimit
from fedldp.server.web.observe import Observe
from fedldp.server.web.replies import database_unavailable, error_reply, refusal
from fedldp.server.web.routes import router

__all__ = ["create_app"]

log = logging.getLogger("fedldp.server")

DOCS_ASSETS = "/docs-assets"
"""Where the Swagger UI and ReDoc assets are served from (the installed package's files)."""

_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}


async def _sweeper(ctx: Context) -> None:
    """Close complete or late rounds and start studies whose enrollment deadline passed."""
    while True:
        try:
            await asyncio.to_thread(sweep, ctx)
        except (OperationalError, PoolTimeout) as exc:  # a fault, not a bug: one line, no trace
            log.warning(
                "sweep: database unavailable (%s); retrying in %.1f s",
                str(exc).splitlines()[0],
                ctx.settings.sweep_interval_s,
            )
        except Exception:
            log.exception("sweep failed; retrying in %.1f s", ctx.settings.sweep_interval_s)
        await asyncio.sleep(ctx.settings.sweep_interval_s)


def _allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the OpenAPI document lists for every path template matching ``path`` (RFC
    9110's ``Allow``)."""
    methods: set[str] = set()
    for template, operations in app.openapi().get("paths", {}).items():
        if compile_path(template)[0].match(path):
            methods |= {m.upper() for m in operations if m in _METHODS}
    return sorted(methods)


def create_app(settings: Settings | None = None, *, sweeper: bool = True) -> FastAPI:
    """The app for ``settings`` (default: from the environment). ``sweeper=False`` leaves the
    deadline sweeper off (tests drive ``fedldp.server.services.rounds.sweep`` themselves)."""
    settings = settings or Settings()
    ctx = Context(settings, Database(settings))
    ctx.metrics.watch_engine(ctx.db.engine)
    ctx.metrics.watch_studies(lambda: count_by_phase(ctx))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if sweeper:
            # a serving process works out the catalogue at the default ε before it answers: a
            # swarm's first request (GET /v1/protocols) searched every protocol's minimum
            # population while the swarm waited (0.1-0.3 s of a 10^5-user study)
            await asyncio.to_thread(catalogue, ctx, 1.0)
        task = asyncio.create_task(_sweeper(ctx)) if sweeper else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            ctx.db.dispose()

    app = FastAPIOffline(
        static_url=DOCS_ASSETS,
        swagger_ui_parameters={"validatorUrl": None},  # no badge fetched from swagger.io
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
    app.include_router(campaign_router)
    add_body_schemas(app)
    add_dashboard(app)
    # the innermost of the app's middleware: inside the request ids, metrics and body caps
    app.add_middleware(FastPath)
    app.add_middleware(Observe, metrics=ctx.metrics, access_log=settings.log_level == "debug")

    @app.get("/metrics", tags=["service"], response_class=Response)
    def metrics() -> Response:
        """Prometheus metrics of this process (fedldp.server.runtime.metrics)."""
        return Response(ctx.metrics.latest(), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(
        BodyLimit, single=settings.max_body_bytes, batch=settings.max_batch_body_bytes
    )

    @app.exception_handler(FedldpError)
    async def _fedldp(request: Request, exc: FedldpError) -> JSONResponse:
        return refusal(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_reply(
            422, "invalid_request", validation_detail(exc.errors()) or "invalid request"
        )

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI's "error parsing the body": a body that is not JSON
            return error_reply(422, "invalid_request", f"body: not valid JSON ({exc.detail})")
        headers = dict(exc.headers or {})
        allowed = _allowed_methods(app, request.url.path) if exc.status_code == 405 else []
        if allowed:  # every method of the path, not only those of the first route matched
            headers["Allow"] = ", ".join(allowed)
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        return error_reply(exc.status_code, code, str(exc.detail), headers)

    @app.exception_handler(OperationalError)
    @app.exception_handler(PoolTimeout)
    async def _database(request: Request, exc: Exception) -> JSONResponse:
        return database_unavailable(request.method, request.url.path, exc)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return error_reply(500, "internal_error", "the server hit an internal error (see its log)")

    return app

"""The per-user fast path: the two requests every simulated user sends, served without FastAPI's
routing and dependency injection (issue 15).

A per-user swarm sends each user's ``GET /v1/studies/{id}/participants/{pid}/task`` (with
``?hold=S``) and ``POST /v1/studies/{id}/reports``; on those, FastAPI's router, its dependency
solver and its exception middleware cost the server about as much CPU as the answers themselves.
``FastPath`` is a pure ASGI middleware, the innermost of the app's own (inside ``Observe`` and
``BodyLimit``: request ids, metrics under the route's template and body caps stay theirs), that
answers the well-formed requests of these two routes itself, with the route's own pieces: the path
patterns of the application's routing table, the same credentials
(``fedldp.server.web.credentials``), body parsing (``routes.report_body``), endpoint functions
(``routes.get_task``, ``routes.submit_report``), response models and error replies
(``fedldp.server.web.replies``). Every other request, and any request of these routes whose path or
query FastAPI would have to validate (a participant id that is not a plain decimal number within
``[0, MAX_ID]``, a ``hold`` outside ``[0, MAX_HOLD_S]`` or not a plain decimal, any other query
parameter), goes on to FastAPI, whose routes also keep these two endpoints in the OpenAPI
document. The answers are byte for byte FastAPI's (tests/server/test_fastpath.py asks both).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi.routing import APIRoute
from pydantic import TypeAdapter
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from fedldp.protocol.core import wire
from fedldp.server.errors import FedldpError
from fedldp.server.web import routes
from fedldp.server.web.credentials import participant_bearer
from fedldp.server.web.replies import database_unavailable, refusal

__all__ = ["FastPath"]

_DECIMAL = re.compile(r"[0-9]{1,10}")
"""A participant id FastAPI would parse as it is: a plain decimal number of at most 10 digits
(whose value must then lie within ``MAX_ID``, else FastAPI refuses it)."""
_HOLD = re.compile(rb"hold=([0-9]{1,2}(?:\.[0-9]{1,9})?)")
_TASK_JSON: TypeAdapter[Any] = TypeAdapter(wire.Task)
_RECEIPT_JSON = TypeAdapter(wire.Receipt)
_JSON = "application/json"


def _hold(query: bytes) -> float | None:
    """``hold`` of a query string that is empty or only ``hold=<decimal>`` within the route's
    bounds; None for any other (FastAPI validates those)."""
    if not query:
        return 0.0
    found = _HOLD.fullmatch(query)
    if found is None:
        return None
    hold = float(found[1])
    return hold if hold <= routes.MAX_HOLD_S else None


def _route(name: str) -> APIRoute:
    """The FastAPI route of endpoint ``name``: its path pattern is the one the fast path matches
    (from the application's routing table: no copy of the template), its template labels the
    request's metrics."""
    for route in routes.router.routes:
        if isinstance(route, APIRoute) and route.name == name:
            return route
    raise LookupError(f"no route {name}")  # pragma: no cover - the routes module defines both


class FastPath:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.task_route = _route(routes.get_task.__name__)
        self.report_route = _route(routes.submit_report.__name__)
        self.report_status: int = self.report_route.status_code or 201

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            method = scope["method"]
            if method == "GET":
                found = self.task_route.path_regex.match(scope["path"])
                hold = None if found is None else _hold(scope["query_string"])
                if found is not None and hold is not None:
                    study_id, pid = found["study_id"], found["participant_id"]
                    if _DECIMAL.fullmatch(pid) and int(pid) <= wire.MAX_ID:
                        scope["route"] = self.task_route
                        answer = self._task(scope, receive, study_id, int(pid), hold)
                        await self._reply(scope, receive, send, answer)
                        return
            elif method == "POST" and not scope["query_string"]:
                found = self.report_route.path_regex.match(scope["path"])
                if found is not None:
                    study_id = found["study_id"]
                    scope["route"] = self.report_route
                    await self._reply(scope, receive, send, self._report(scope, receive, study_id))
                    return
        await self.app(scope, receive, send)

    async def _task(
        self, scope: Scope, receive: Receive, study_id: str, participant_id: int, hold: float
    ) -> Response:
        request = Request(scope, receive)
        token = await participant_bearer(request)
        ctx = scope["app"].state.ctx
        task = await routes.get_task(study_id, participant_id, ctx, token, hold)
        return Response(_TASK_JSON.dump_json(task), media_type=_JSON)

    async def _report(self, scope: Scope, receive: Receive, study_id: str) -> Response:
        scope["path_params"] = {"study_id": study_id}
        request = Request(scope, receive)
        body = await routes.report_body(request)
        status = Response(status_code=self.report_status)
        receipt = await routes.submit_report(study_id, body, request, status)
        return Response(_RECEIPT_JSON.dump_json(receipt), status.status_code, media_type=_JSON)

    @staticmethod
    async def _reply(
        scope: Scope, receive: Receive, send: Send, answer: Awaitable[Response]
    ) -> None:
        """Send ``answer``, or the reply to the refusal or database error it raised (as the
        app's exception handlers render them); any other error goes up to the app's 500."""
        reply: Callable[[Scope, Receive, Send], Awaitable[None]]
        try:
            reply = await answer
        except FedldpError as exc:
            reply = refusal(exc)
        except (OperationalError, PoolTimeout) as exc:
            reply = database_unavailable(scope["method"], scope["path"], exc)
        await reply(scope, receive, send)

"""Request bodies: read under a size cap, decoded strictly, then validated by the wire model.

Every route with a body takes it through ``json_body(Model)``, a dependency that refuses, each with
a stable code and before any detailed validation: a body that is not UTF-8 (415
``invalid_encoding``), an object naming a key twice (422 ``duplicate_key``, since parsers
disagree on which value wins), a body that is not JSON (NaN and Infinity are not) or holds an
integer literal outside the 64-bit range (no field takes one; 422 ``invalid_request``). A route
may then check the caller's credentials on the parsed JSON (``authenticate``: callers without
credentials get 401, never a detailed 422), and only then is the body validated against its
strict wire model.
``documented(Model)`` keeps the body in the OpenAPI document (see ``add_body_schemas``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from pydantic import BaseModel, ValidationError

from fedldp.server.errors import (
    DuplicateKey,
    InvalidEncoding,
    InvalidRequest,
)

__all__ = ["Authenticate", "add_body_schemas", "documented", "json_body", "validation_detail"]

M = TypeVar("M", bound=BaseModel)

Authenticate = Callable[[Request, Any], Awaitable[Any]]
"""A credentials check on the parsed JSON, before validation: returns the JSON to validate
(possibly with the credentials of headers put in), raises a 401/403 ``FedldpError``."""

_MODELS: list[type[BaseModel]] = []
_INT64 = 2**63


def validation_detail(errors: Sequence[Mapping[str, Any]], prefix: tuple[str, ...] = ()) -> str:
    """The first problems of a validation error, one ``location: message`` each."""
    return "; ".join(
        f"{'.'.join(str(p) for p in (*prefix, *e.get('loc', ())))}: {e.get('msg', 'invalid')}"
        for e in errors[:10]
    )


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(f"the request body names the key {key!r} twice in one object")
            seen.add(key)
    return out


def _integer(text: str) -> int:
    # 20 characters hold every 64-bit integer with its sign; longer ones are not parsed at all
    if len(text) > 18 and (len(text) > 20 or not -_INT64 <= int(text) < _INT64):
        raise InvalidRequest(f"the integer {text[:30]}… is outside the 64-bit range")
    return int(text)


def _no_constant(name: str) -> Any:
    raise InvalidRequest(f"{name} is not JSON")


def parse_json(raw: bytes) -> Any:
    """The JSON value of a request body (see the module docstring for the refusals)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidEncoding(f"the request body is not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(
            text, object_pairs_hook=_unique, parse_int=_integer, parse_constant=_no_constant
        )
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"the request body is not JSON: {exc}") from None
    except RecursionError:
        raise InvalidRequest("the request body nests too deeply") from None


def json_body(
    model: type[M], authenticate: Authenticate | None = None
) -> Callable[[Request], Awaitable[M]]:
    """A dependency: the request body as ``model``, after ``authenticate`` when given."""

    async def parse(request: Request) -> M:
        data = parse_json(await request.body())
        if authenticate is not None:
            data = await authenticate(request, data)
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            detail = validation_detail(exc.errors(), ("body",)) or "invalid request body"
            raise InvalidRequest(detail) from None

    return parse


def documented(model: type[BaseModel], **extra: Any) -> dict[str, Any]:
    """``openapi_extra`` of a route whose body ``json_body(model)`` parses (``extra``: more of
    the operation, e.g. its ``security``)."""
    _MODELS.append(model)
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    body = {"required": True, "content": {"application/json": {"schema": ref}}}
    return {"requestBody": body, **extra}


def add_body_schemas(app: FastAPI) -> None:
    """Put the schemas of the ``documented`` bodies into the app's OpenAPI components."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            schemas = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in _MODELS:
                own = model.model_json_schema(ref_template="#/components/schemas/{model}")
                for name, definition in own.pop("$defs", {}).items():
                    schemas.setdefault(name, definition)
                schemas.setdefault(model.__name__, own)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

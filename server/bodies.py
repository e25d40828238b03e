"""Request bodies parsed by pydantic's own JSON parser, for the batch endpoints.

FastAPI decodes a JSON body with the standard library into Python objects and then validates
those; for a batch of 10 000 reports that is most of the request's time. ``json_body(Model)``
is a dependency that validates the raw bytes in one pass (``model_validate_json``), and
``documented(Model)`` keeps the body in the OpenAPI document (see ``add_body_schemas``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from pydantic import BaseModel, ValidationError

from fedldp.server.errors import InvalidRequest

__all__ = ["add_body_schemas", "documented", "json_body", "validation_detail"]

M = TypeVar("M", bound=BaseModel)

_MODELS: list[type[BaseModel]] = []


def validation_detail(errors: Sequence[Mapping[str, Any]], prefix: tuple[str, ...] = ()) -> str:
    """The first problems of a validation error, one ``location: message`` each."""
    return "; ".join(
        f"{'.'.join(str(p) for p in (*prefix, *e.get('loc', ())))}: {e.get('msg', 'invalid')}"
        for e in errors[:10]
    )


def json_body(model: type[M]) -> Callable[[Request], Awaitable[M]]:
    """A dependency: the request body as ``model`` (422 ``invalid_request`` when it is not)."""

    async def parse(request: Request) -> M:
        try:
            return model.model_validate_json(await request.body())
        except ValidationError as exc:
            detail = validation_detail(exc.errors(), ("body",)) or "invalid request body"
            raise InvalidRequest(detail) from None

    return parse


def documented(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` of a route whose body ``json_body(model)`` parses."""
    _MODELS.append(model)
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def add_body_schemas(app: FastAPI) -> None:
    """Put the schemas of the ``documented`` bodies into the app's OpenAPI components."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in _MODELS:
                own = model.model_json_schema(ref_template="#/components/schemas/{model}")
                for name, definition in own.pop("$defs", {}).items():
                    components.setdefault(name, definition)
                components.setdefault(model.__name__, own)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

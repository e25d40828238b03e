"""Request bodies: read under a size cap, decoded strictly, then validated by the wire model.

Every route with a body takes it through ``json_body(Model)``, a dependency that refuses, each with
a stable code and before any detailed validation: a body that is not UTF-8 (415
``invalid_encoding``), an object naming a key twice (422 ``duplicate_key``, since parsers
disagree on which value wins), a body that is not JSON (NaN and Infinity are not) or holds an
integer literal outside the 64-bit range (no field takes one; 422 ``invalid_request``). A route
may then check the caller's credentials on the parsed JSON (``authenticate``: callers without
credentials get 401, never a detailed 422), and only then is the body validated against its
strict wire model.
A batch route's body sent as ``application/vnd.fedldp.batch`` is read by its ``binary`` reader
(``fedldp.server.web.binary``) into the JSON value it stands for, then goes the same way.
``documented(Model)`` keeps the body in the OpenAPI document (see ``add_body_schemas``).

Decoding takes orjson's parser first (a batch's tens of thousands of numbers cost the standard
library's decoder about 3× more) and keeps its value only when the standard library's would be the
same: no key named twice (the keys the parsed objects hold are as many as the body's ``"...":``
key ends, which count every key it names, and strings that merely look like one), no number
outside the 64-bit integer range (orjson reads integers beyond 64 bits as floats, where the
standard library keeps the integer this module refuses). Any other body, and every body orjson
refuses, goes through the standard library's decoder, whose answers and refusals are this
module's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from pydantic import BaseModel, ValidationError

from fedldp.protocol.core.wire.binary import BATCH_MEDIA_TYPE
from fedldp.server.errors import (
    DuplicateKey,
    InvalidEncoding,
    InvalidRequest,
)

__all__ = [
    "Authenticate",
    "Binary",
    "add_body_schemas",
    "documented",
    "json_body",
    "media_type",
    "parse_json",
    "parse_json_stdlib",
    "validation_detail",
]

M = TypeVar("M", bound=BaseModel)

Authenticate = Callable[[Request, Any], Awaitable[Any]]
"""A credentials check on the parsed JSON, before validation: returns the JSON to validate
(possibly with the credentials of headers put in), raises a 401/403 ``FedldpError``."""
Binary = Callable[[bytes], tuple[Any, dict[str, Any]]]
"""A batch route's reader of binary bodies (``fedldp.server.web.binary.binary_form``): the
body's JSON value, and the validation context (arrays kept as they are)."""

_MODELS: list[type[BaseModel]] = []
_INT64 = 2**63
_NEAR = 2**62
"""orjson's value holds no number beyond ±``_NEAR`` (else the standard library decides): an
integer literal beyond 64 bits is a float there, which may round to ±2^63 exactly."""


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


def _too_large(value: int) -> InvalidRequest:
    return InvalidRequest(f"the integer {str(value)[:30]}… is outside the 64-bit range")


class _Undecided(Exception):
    """A number orjson may have read otherwise than the standard library (``_fast``)."""


def _int64_only(value: Any, fast: bool = False) -> int:
    """InvalidRequest if parsed JSON holds an integer outside the 64-bit range (``fast``, of
    orjson's value: _Undecided if it holds any number outside that range, which orjson reads as a
    float when it is an integer beyond 64 bits); else the number of keys its objects hold. A list
    of numbers (or of strings) is checked by its least and greatest element (``min``/``max`` run
    in C, and compare ints and floats exactly): a batch's tens of thousands of ids cost two passes
    at C speed, where a ``parse_int`` hook of the decoder was a Python call for each of them."""
    kind = type(value)
    if fast and kind in _NUMBERS:
        if not -_NEAR < value < _NEAR:
            raise _Undecided
    elif kind is int:
        if not -_INT64 <= value < _INT64:
            raise _too_large(value)
    elif kind is dict:
        keys = len(value)
        for item in value.values():  # loops, not generators: a frame per level of nesting
            keys += _int64_only(item, fast)
        return keys
    elif kind is list and value:
        try:
            low, high = min(value), max(value)
        except TypeError:  # not all numbers (nor all strings, nor all lists)
            low = high = None
        if type(low) in _NUMBERS and type(high) in _NUMBERS:
            if fast:
                if not (low > -_NEAR and high < _NEAR):
                    raise _Undecided
                return 0
            if low >= -_INT64 and high < _INT64:
                return 0
            for item in value:  # a float beyond the range, or an integer
                if type(item) is int and not -_INT64 <= item < _INT64:
                    raise _too_large(item)
            return 0
        if type(low) is str and type(high) is str:  # every item a string: nothing inside
            return 0
        keys = 0
        for item in value:
            keys += _int64_only(item, fast)
        return keys
    return 0


_NUMBERS = (int, float, bool)


def _no_constant(name: str) -> Any:
    raise InvalidRequest(f"{name} is not JSON")


_KEY_END = re.compile(rb'"[ \t\n\r]*:')
"""A ``"`` followed by a colon: every key's end, and some strings' quotes (never fewer)."""


def _fast(raw: bytes) -> Any:
    """The body's JSON value by orjson, or ``_SLOW`` when the standard library's decoder must
    decide (see the module docstring)."""
    try:
        value = orjson.loads(raw)
        keys = _int64_only(value, fast=True)
    except (orjson.JSONDecodeError, _Undecided):
        return _SLOW
    if keys != len(_KEY_END.findall(raw)):  # a key named twice, or a string like a key's end
        return _SLOW
    return value


_SLOW = object()


def parse_json(raw: bytes) -> Any:
    """The JSON value of a request body (see the module docstring for the refusals)."""
    try:
        value = _fast(raw)
    except RecursionError:
        raise InvalidRequest("the request body nests too deeply") from None
    return parse_json_stdlib(raw) if value is _SLOW else value


def parse_json_stdlib(raw: bytes) -> Any:
    """``parse_json`` by the standard library's decoder alone: what it answers for the bodies
    orjson must not decide (and what its fast path is tested against)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidEncoding(f"the request body is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, object_pairs_hook=_unique, parse_constant=_no_constant)
        _int64_only(value)
    except RecursionError:
        raise InvalidRequest("the request body nests too deeply") from None
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"the request body is not JSON: {exc}") from None
    except ValueError as exc:  # an integer literal of more digits than int() converts
        raise InvalidRequest(f"the request body holds an unreadable number: {exc}") from None
    return value


async def _read(request: Request) -> bytes:
    """The request body, read without keeping it on the request (``Request.body()`` keeps it
    for the request's life: a held task batch kept its bytes for the whole poll)."""
    return b"".join([chunk async for chunk in request.stream()])


def media_type(request: Request) -> str:
    """The request's content type, without its parameters, in lower case."""
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


def json_body(
    model: type[M], authenticate: Authenticate | None = None, *, binary: Binary | None = None
) -> Callable[[Request], Awaitable[M]]:
    """A dependency: the request body as ``model``, after ``authenticate`` when given; a batch
    route's ``binary`` reads the bodies of the binary batch type (``BATCH_MEDIA_TYPE``)."""

    async def parse(request: Request) -> M:
        raw = await _read(request)
        context: dict[str, Any] | None = None
        if binary is not None and media_type(request) == BATCH_MEDIA_TYPE:
            data, context = binary(raw)
        else:
            data = parse_json(raw)
        del raw
        if authenticate is not None:
            data = await authenticate(request, data)
        try:
            return model.model_validate(data, context=context)
        except ValidationError as exc:
            detail = validation_detail(exc.errors(), ("body",)) or "invalid request body"
            raise InvalidRequest(detail) from None

    return parse


BINARY_SCHEMA = {
    "type": "string",
    "format": "binary",
    "description": "the JSON body with its numeric lists as little-endian arrays after a JSON "
    "header (docs/server.md, Binary batch bodies)",
}


def documented(model: type[BaseModel], *, binary: bool = False, **extra: Any) -> dict[str, Any]:
    """``openapi_extra`` of a route whose body ``json_body(model)`` parses (``binary``: a batch
    route that also takes ``BATCH_MEDIA_TYPE``; ``extra``: more of the operation, e.g. its
    ``security``)."""
    _MODELS.append(model)
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    content: dict[str, Any] = {"application/json": {"schema": ref}}
    if binary:
        content[BATCH_MEDIA_TYPE] = {"schema": BINARY_SCHEMA}
    return {"requestBody": {"required": True, "content": content}, **extra}


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

"""Reading the binary batch bodies (``application/vnd.fedldp.batch``, the format is
``fedldp.protocol.core.wire.binary``'s) into the JSON value the same body would hold as JSON.

``decode_batch`` refuses, each with a stable code and before any array is read: a body whose
first bytes are not the magic and version 1 (415 ``invalid_encoding``); a truncated body, a
header that is not a JSON object (with the JSON bodies' refusals: ``fedldp.server.web.bodies``),
an array description that is not ``{"field", "dtype", "shape"}`` of a known number type and of
one or two dimensions, an array standing for a field the header also holds or for a field of a
field that is not an object, and arrays whose bytes do not end the body exactly (422
``invalid_request``); arrays of more than ``MAX_BATCH`` rows, or of more numbers in all than the
route's JSON body may hold values (``fedldp.server.web.limits.BATCH_VALUES``; 413
``body_too_large``), so that no body makes more Python numbers than its JSON form could (the
arrays kept as arrays, below, are bounded by the route's byte cap alone, as ``packed`` is). Each
array then becomes the list the JSON body would hold (``tolist``: integers for ``<i8``, floats
for ``<f8``), and the route's model validates it with every refusal of the JSON body (NaN and
infinities included: the models refuse them). The fields named in ``keep`` (a report batch's
``payloads`` rows) stay arrays, for the model to check as it checks ``packed`` rows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedldp.protocol.core.wire import MAX_BATCH
from fedldp.protocol.core.wire.binary import BATCH_VERSION, DTYPES, MAGIC, PREFIX
from fedldp.server.errors import BodyTooLarge, InvalidEncoding, InvalidRequest
from fedldp.server.web.bodies import Binary, parse_json
from fedldp.server.web.limits import BATCH_VALUES

__all__ = ["binary_form", "decode_batch"]


def _spec(spec: Any, i: int) -> tuple[tuple[str, ...], np.dtype[Any], tuple[int, ...]]:
    """An array's field path, number type and shape, checked."""
    where = f"arrays[{i}]"
    if not isinstance(spec, dict) or set(spec) != {"field", "dtype", "shape"}:
        raise InvalidRequest(f"{where} must be an object of field, dtype and shape")
    field, dtype, shape = spec["field"], spec["dtype"], spec["shape"]
    if not (
        isinstance(field, list)
        and 1 <= len(field) <= 2
        and all(isinstance(name, str) and name for name in field)
    ):
        raise InvalidRequest(f"{where}.field must be a list of one or two field names")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise InvalidRequest(f"{where}.dtype must be one of {sorted(DTYPES)}")
    if not (
        isinstance(shape, list)
        and 1 <= len(shape) <= 2
        and all(type(size) is int and size >= 0 for size in shape)
    ):
        raise InvalidRequest(f"{where}.shape must be a list of one or two sizes (integers >= 0)")
    if shape[0] > MAX_BATCH:
        raise BodyTooLarge(f"{where} has {shape[0]} rows, more than {MAX_BATCH}")
    return tuple(field), DTYPES[dtype], tuple(shape)


def decode_batch(
    raw: bytes, *, values: int, keep: frozenset[str] = frozenset()
) -> tuple[dict[str, Any], dict[str, NDArray[Any]]]:
    """The JSON value of a binary batch body (at most ``values`` numbers in its arrays), and
    the arrays of the top-level fields in ``keep``, left out of it (see the module docstring)."""
    if len(raw) < PREFIX.size:
        raise InvalidRequest(f"the batch body is truncated: {len(raw)} bytes, before its header")
    magic, version, length = PREFIX.unpack_from(raw)
    if magic != MAGIC or version != BATCH_VERSION or raw[5:8] != b"\0\0\0":
        raise InvalidEncoding(
            f"the body is not a batch body of version {BATCH_VERSION} (it starts with "
            f"{bytes(raw[:8])!r}, not {MAGIC + bytes([BATCH_VERSION]) + bytes(3)!r})"
        )
    end = PREFIX.size + length
    if end > len(raw):
        raise InvalidRequest(f"the batch body is truncated: its header takes {length} bytes")
    header = parse_json(raw[PREFIX.size : end])
    if not isinstance(header, dict) or not isinstance(header.get("arrays"), list):
        raise InvalidRequest("the batch body's header must be a JSON object with arrays")
    specs = [_spec(spec, i) for i, spec in enumerate(header.pop("arrays"))]
    sizes = [math.prod(shape) for _, _, shape in specs]
    listed = sum(
        size
        for size, (path, _, _) in zip(sizes, specs, strict=True)
        if path[0] not in keep or len(path) > 1
    )
    if listed > values:
        raise BodyTooLarge(
            f"the batch body's arrays hold {listed} numbers, more than {values} (this "
            "route's limit)"
        )
    taken = sum(size * dtype.itemsize for size, (_, dtype, _) in zip(sizes, specs, strict=True))
    if taken != len(raw) - end:
        raise InvalidRequest(
            f"the batch body's arrays take {taken} bytes, but {len(raw) - end} follow its header"
        )
    kept: dict[str, NDArray[Any]] = {}
    offset = end
    for (path, dtype, shape), size in zip(specs, sizes, strict=True):
        array = np.frombuffer(raw, dtype=dtype, count=size, offset=offset).reshape(shape)
        offset += size * dtype.itemsize
        *parents, name = path
        target = header
        for parent in parents:
            target = target.setdefault(parent, {})
            if not isinstance(target, dict):
                raise InvalidRequest(f"an array stands for {'.'.join(path)}, not in an object")
        if name in target or (not parents and name in kept):
            raise InvalidRequest(f"the batch body gives {'.'.join(path)} twice")
        if not parents and name in keep:
            kept[name] = array
        else:
            target[name] = array.tolist()
    return header, kept


def binary_form(route: str, keep: frozenset[str] = frozenset()) -> Binary:
    """The reader of a batch route's binary bodies (``route``: its path's end, a key of
    ``BATCH_VALUES``), for ``json_body``: the JSON value, and the kept arrays as the context
    of the model's validation."""
    values = BATCH_VALUES[route]

    def read(raw: bytes) -> tuple[Any, dict[str, Any]]:
        return decode_batch(raw, values=values, keep=keep)

    return read

"""The binary form of the batch request bodies (``application/vnd.fedldp.batch``, version 1).

A batch body (enrollment, task or report batch) is the JSON body with its numeric lists moved
out into little-endian arrays after a small JSON header, so that neither side formats or parses
tens of thousands of numbers as text:

======  ======  ==========================================================================
offset  bytes   field
======  ======  ==========================================================================
0       4       magic ``FLDB``
4       1       version: 1
5       3       zero
8       4       header length H (unsigned, little-endian)
12      H       header: a JSON object (UTF-8), the body's other fields, plus ``"arrays"``
12 + H  …       each array's numbers, in the order ``arrays`` lists them, row after row
======  ======  ==========================================================================

``arrays`` lists each array as ``{"field": [name, ...], "dtype": "<i8" | "<f8", "shape": [n]
| [n, k]}``: the field of the JSON body it stands for (a path: ``["participant_ids"]``,
``["metadata", "samples"]``), its numbers' type (64-bit integers or float64, little-endian) and
its shape (a list, or a list of equal-length rows). The body must end with the last array. The
server reads the body as the JSON body that holds each array as that list (integers for
``<i8``, numbers for ``<f8``) and validates it by the same model, with the same refusals; a
report batch's ``payloads`` array (``[n, k]`` float64) is read as the ``packed`` rows are.
``docs/clients.md`` shows a client that writes it; ``fedldp.server.web.binary`` reads it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "BATCH_MEDIA_TYPE",
    "BATCH_VERSION",
    "DTYPES",
    "MAGIC",
    "PREFIX",
    "encode_batch",
]

BATCH_MEDIA_TYPE = "application/vnd.fedldp.batch"
MAGIC = b"FLDB"
BATCH_VERSION = 1
PREFIX = struct.Struct("<4sB3xI")
"""Magic, version, three zero bytes, header length: the 12 bytes before the header."""
DTYPES = {"<i8": np.dtype("<i8"), "<f8": np.dtype("<f8")}
"""The arrays' number types: 64-bit integers and float64 numbers, little-endian."""


def encode_batch(fields: Mapping[str, Any], arrays: Mapping[Any, ArrayLike]) -> bytes:
    """A batch body of the JSON ``fields`` (plain JSON values) and ``arrays`` (by field: a
    name, or a path such as ``("metadata", "samples")``), each written as ``<i8`` if its
    numbers are integers, else as ``<f8``."""
    specs: list[dict[str, Any]] = []
    parts: list[bytes] = []
    for field, values in arrays.items():
        array = np.asarray(values)
        dtype = "<i8" if array.dtype.kind in "iu" else "<f8"
        data = np.ascontiguousarray(array, dtype=DTYPES[dtype])
        path: Sequence[str] = (field,) if isinstance(field, str) else field
        specs.append({"field": list(path), "dtype": dtype, "shape": list(data.shape)})
        parts.append(data.tobytes())
    header = json.dumps({**fields, "arrays": specs}, separators=(",", ":")).encode()
    return b"".join([PREFIX.pack(MAGIC, BATCH_VERSION, len(header)), header, *parts])

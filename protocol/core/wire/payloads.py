"""Report payloads: a discriminated union on ``kind`` and their numeric rows."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from fedldp.protocol.core.base.records import FloatArray, PayloadKind
from fedldp.protocol.core.wire.common import NonNegInt, Request

# --------------------------------------------------------------------------- payloads


class ScalarPayload(Request):
    kind: Literal["scalar"] = "scalar"
    value: float


class VectorPayload(Request):
    kind: Literal["vector"] = "vector"
    values: list[float]


class HistogramPayload(Request):
    kind: Literal["histogram"] = "histogram"
    values: list[float]


class BitPayload(Request):
    kind: Literal["bit"] = "bit"
    bit: Literal[-1, 1]


class IndexSignPayload(Request):
    kind: Literal["index-sign"] = "index-sign"
    index: NonNegInt
    sign: Literal[-1, 1]


class StatisticPayload(Request):
    """A user-wise statistic sent in the clear to a trusted (central-DP) aggregator."""

    kind: Literal["statistic"] = "statistic"
    values: list[float]


Payload = Annotated[
    ScalarPayload
    | VectorPayload
    | HistogramPayload
    | BitPayload
    | IndexSignPayload
    | StatisticPayload,
    Field(discriminator="kind"),
]


def payload_row(payload: Payload) -> FloatArray:
    """The numeric row a protocol works with (flattened per-participant payload)."""
    if isinstance(payload, ScalarPayload):
        return np.array([payload.value], dtype=np.float64)
    if isinstance(payload, BitPayload):
        return np.array([payload.bit], dtype=np.float64)
    if isinstance(payload, IndexSignPayload):
        return np.array([payload.index, payload.sign], dtype=np.float64)
    return np.asarray(payload.values, dtype=np.float64)


def payload_from_row(kind: PayloadKind, row: FloatArray) -> Payload:
    """Inverse of ``payload_row`` for a payload of ``kind``."""
    flat = np.asarray(row, dtype=np.float64).reshape(-1)
    if kind == "scalar":
        return ScalarPayload(value=float(flat[0]))
    if kind == "bit":
        return BitPayload(bit=1 if flat[0] > 0 else -1)
    if kind == "index-sign":
        return IndexSignPayload(index=int(flat[0]), sign=1 if flat[1] > 0 else -1)
    if kind == "histogram":
        return HistogramPayload(values=flat.tolist())
    if kind == "statistic":
        return StatisticPayload(values=flat.tolist())
    return VectorPayload(values=flat.tolist())

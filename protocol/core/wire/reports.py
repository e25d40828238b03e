"""Reports, single and batched (columnar, optionally packed), and their receipts."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Annotated, Literal

import numpy as np
from pydantic import ConfigDict, Field, PrivateAttr, ValidationInfo, model_validator

from fedldp.protocol.core.base.records import FloatArray, PayloadKind
from fedldp.protocol.core.wire.common import MAX_BATCH, Model, NonNegInt, Request, either
from fedldp.protocol.core.wire.participants import Credentials
from fedldp.protocol.core.wire.payloads import Payload

# --------------------------------------------------------------------------- reports


class ReportSubmit(Request):
    """One participant's privatized report for one round. Its token goes in
    ``Authorization: Bearer`` (as on every participant endpoint); the ``token`` field is the
    older place for it, still read when the header is absent."""

    participant_id: NonNegInt
    round: NonNegInt
    payload: Payload
    token: str | None = Field(
        default=None,
        description="deprecated: send the participant's token as Authorization: Bearer",
        json_schema_extra={"deprecated": True},
    )


class Receipt(Model):
    participant_id: int
    round: int
    digest: str
    received_at: datetime
    duplicate: bool


class ReportBatch(Credentials):
    """Many participants' already-privatized reports for one round (columnar). The payload rows
    come as JSON lists (``payloads``) or packed into one string (``packed``, see ``pack_rows``),
    which spares both sides formatting and parsing tens of thousands of numbers."""

    model_config = ConfigDict(
        json_schema_extra=either(("tokens", "blocks"), ("payloads", "packed"))
    )

    round: NonNegInt
    kind: PayloadKind
    participant_ids: Annotated[list[NonNegInt], Field(min_length=1, max_length=MAX_BATCH)]
    payloads: Annotated[list[list[float]], Field(max_length=MAX_BATCH)] | None = Field(
        default=None, description="each participant's payload row (give this or packed)"
    )
    packed: str | None = Field(
        default=None,
        description="the payload rows as one base64 string of little-endian float64 numbers, "
        "row after row, the same number of them for each participant (or payloads)",
    )

    _rows: FloatArray | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _one_payload_form(self, info: ValidationInfo) -> ReportBatch:
        self._one_token_each(len(self.participant_ids))
        rows = info.context.get(ROWS_CONTEXT) if isinstance(info.context, dict) else None
        forms = (self.payloads is not None) + (self.packed is not None) + (rows is not None)
        if forms != 1:
            raise ValueError("give either payloads or packed")
        if self.payloads is not None and len(self.payloads) != len(self.participant_ids):
            n = len(self.participant_ids)
            raise ValueError(f"{n} participant ids but {len(self.payloads)} payloads")
        if self.packed is not None:
            self.packed_rows()  # decodable, one row per participant, finite
        if rows is not None:
            self._rows = _checked_rows(rows, len(self.participant_ids), "payloads")
        return self

    def packed_rows(self) -> FloatArray:
        """The ``packed`` rows as an (n participants, k) matrix; ValueError if they are not
        base64 of finite float64 numbers that make one row per participant."""
        assert self.packed is not None
        try:
            raw = binascii.a2b_base64(self.packed, strict_mode=True)
        except (binascii.Error, ValueError):  # ValueError: non-ASCII characters
            raise ValueError("packed is not base64") from None
        n = len(self.participant_ids)
        if len(raw) % (8 * n):
            raise ValueError(f"packed holds {len(raw)} bytes: not {n} rows of float64 numbers")
        rows = np.frombuffer(raw, dtype="<f8").reshape((n, -1))
        return _checked_rows(rows, n, "packed")

    def matrix(self) -> FloatArray | None:
        """The payload rows as an (n participants, k) matrix when they came packed or as a
        binary body's array (``ROWS_CONTEXT``); None when they came as JSON lists."""
        if self._rows is not None:
            return self._rows
        return None if self.packed is None else self.packed_rows()


ROWS_CONTEXT = "payloads"
"""The validation context's key of a binary report batch's payload rows, an (n, k) float64
array (``fedldp.server.web.binary``): they stand for ``payloads`` and are checked as ``packed``."""


def _checked_rows(rows: FloatArray, n: int, name: str) -> FloatArray:
    """``rows`` as float64, if they make one row per participant of finite numbers."""
    if rows.ndim != 2 or rows.shape[0] != n:
        raise ValueError(f"{name} must hold {n} rows (one per participant id), not {rows.shape}")
    if not np.isfinite(rows).all():
        raise ValueError(f"{name} holds a number that is not finite")
    return np.array(rows, dtype=np.float64)  # a copy the caller may write


def pack_rows(rows: FloatArray) -> str:
    """The ``packed`` form of payload rows (one row per participant)."""
    return base64.b64encode(np.ascontiguousarray(rows, dtype="<f8").tobytes()).decode("ascii")


class BatchItemStatus(Model):
    participant_id: int
    status: Literal["accepted", "duplicate", "rejected"]
    code: str | None = None
    detail: str | None = None


class BatchReceipt(Model):
    round: int
    accepted: int
    duplicates: int
    rejected: int
    items: list[BatchItemStatus]
    """Only the rejected items (an accepted or duplicate report needs no line)."""

"""The base model and the bounds every wire message shares."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

MAX_BATCH = 50_000
MAX_ID = 2**31 - 1
"""Largest participant id, round index and enrollment target (a 32-bit database integer)."""
MAX_DEADLINE_S = 100 * 365.25 * 86400.0
"""Longest deadline a study may set (100 years; far larger ones overflow a datetime)."""
NonNegInt = Annotated[int, Field(ge=0, le=MAX_ID)]
PositiveFloat = Annotated[float, Field(gt=0)]
Seed = Annotated[int, Field(ge=0, lt=2**63)]
Deadline = Annotated[float, Field(gt=0, le=MAX_DEADLINE_S, description="seconds")]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

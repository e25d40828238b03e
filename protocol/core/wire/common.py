"""The base model and the bounds every wire message shares."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

MAX_BATCH = 50_000
MAX_ID = 2**31 - 1
"""Largest participant id, round index, event number and enrollment target (a 32-bit database
integer): the server refuses larger ones, in bodies, paths, queries and headers, with a 422."""
MAX_DEADLINE_S = 100 * 365.25 * 86400.0
"""Longest deadline a study may set (100 years; far larger ones overflow a datetime)."""
NonNegInt = Annotated[int, Field(ge=0, le=MAX_ID)]
Seed = Annotated[int, Field(ge=0, lt=2**63)]
EPSILON_MIN = 1e-6
"""Smallest ε a participant may enroll with (any study): below it no estimate is meaningful, and
subnormal ε's overflow noise scales to infinity. A study may narrow the range (``epsilon_min``)."""
EPSILON_MAX = 1e3
"""Largest ε a participant may enroll with (any study); a study may narrow it (``epsilon_max``)."""
Deadline = Annotated[float, Field(gt=0, le=MAX_DEADLINE_S, description="seconds")]
EpsilonBound = Annotated[float, Field(ge=EPSILON_MIN, le=EPSILON_MAX)]
Epsilon = Annotated[
    float,
    Field(
        description="the participant's ε; enrollment refuses one outside the study's range "
        "(epsilon_min..epsilon_max), zero and negative ones included, with epsilon_out_of_range"
    ),
]
"""A participant's declared ε: any finite number on the wire, so that every ε outside the study's
range (ε <= 0 as much as one above ``EPSILON_MAX``) gets the one code ``epsilon_out_of_range``
from the enrollment's range check, not ``invalid_request`` from the body's validation."""


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Request(Model):
    """A request body: strict (pydantic strict mode), so that no string or boolean passes for a
    number, no float for an integer, no number for a string; an integer still passes for a float
    (JSON has one number type)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


MAX_METADATA_KEYS = 64
"""Most metadata entries one participant may declare."""
MAX_METADATA_VECTOR = 4096
"""Longest vector one metadata entry may hold (a participant's public features)."""
MAX_SAMPLES = 10**9
"""Largest sample count a participant may declare (metadata ``samples``)."""
MetadataKey = Annotated[str, Field(min_length=1, max_length=64)]
MetadataValue = float | Annotated[list[float], Field(max_length=MAX_METADATA_VECTOR)]


def either(*pairs: tuple[str, str]) -> Callable[[dict[str, Any]], None]:
    """``json_schema_extra`` of a model that needs exactly one field of each pair (validated
    by its model validator): the rule in its JSON schema, as ``oneOf`` of the two required."""

    def extra(schema: dict[str, Any]) -> None:
        rules = [{"oneOf": [{"required": [a]}, {"required": [b]}]} for a, b in pairs]
        schema.setdefault("allOf", []).extend(rules)

    return extra

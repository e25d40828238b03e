"""Wire schema: every HTTP request and response body, shared by server and client (STYLE rule 3).

All models are pydantic v2, ``extra="forbid"``, frozen, and reject NaN/±inf. Report payloads are a
discriminated union on ``kind``; ``payload_row``/``payload_from_row`` convert them to and from the
numeric rows the protocols work with. The batch report form is columnar (one round, one kind, many
participants) because it carries up to tens of thousands of reports per request.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from protocol.base import FloatArray, PayloadKind

__all__ = [
    "EPSILON_MAX",
    "EPSILON_MIN",
    "MAX_PREDICT_ROWS",
    "BatchItemStatus",
    "BatchReceipt",
    "BitPayload",
    "BlockToken",
    "BudgetCharge",
    "BudgetView",
    "Credentials",
    "EnrollBatch",
    "EnrollRequest",
    "Enrollment",
    "EnrollmentBatch",
    "EpsilonSummary",
    "ErrorBarView",
    "ErrorBody",
    "Health",
    "HistogramPayload",
    "IndexSignPayload",
    "Lease",
    "LeaseRequest",
    "Payload",
    "PredictRequest",
    "PredictView",
    "ProtocolInfo",
    "ProtocolList",
    "Receipt",
    "ReportBatch",
    "ReportSubmit",
    "ResultView",
    "RoundProgress",
    "RoundTasks",
    "RoundView",
    "RoundsView",
    "ScalarPayload",
    "StatisticPayload",
    "StudyCreate",
    "StudyList",
    "StudyPhase",
    "StudyView",
    "Task",
    "TaskBatch",
    "TaskBatchItem",
    "TaskBatchRequest",
    "TaskDone",
    "TaskReport",
    "TaskWait",
    "VectorPayload",
    "pack_rows",
    "payload_from_row",
    "payload_row",
]

MAX_BATCH = 50_000
MAX_ID = 2**31 - 1
"""Largest participant id, round index and enrollment target (a 32-bit database integer)."""
MAX_DEADLINE_S = 100 * 365.25 * 86400.0
"""Longest deadline a study may set (100 years; far larger ones overflow a datetime)."""
EPSILON_MIN = 1e-6
"""Smallest ε a participant may enroll with (any study): below it no estimate is meaningful, and
subnormal ε's overflow noise scales to infinity. A study may narrow the range (``epsilon_min``)."""
EPSILON_MAX = 1e3
"""Largest ε a participant may enroll with (any study); a study may narrow it (``epsilon_max``)."""
NonNegInt = Annotated[int, Field(ge=0, le=MAX_ID)]
PositiveFloat = Annotated[float, Field(gt=0)]
Seed = Annotated[int, Field(ge=0, lt=2**63)]
Deadline = Annotated[float, Field(gt=0, le=MAX_DEADLINE_S, description="seconds")]
EpsilonBound = Annotated[float, Field(ge=EPSILON_MIN, le=EPSILON_MAX)]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# --------------------------------------------------------------------------- payloads


class ScalarPayload(Model):
    kind: Literal["scalar"] = "scalar"
    value: float


class VectorPayload(Model):
    kind: Literal["vector"] = "vector"
    values: list[float]


class HistogramPayload(Model):
    kind: Literal["histogram"] = "histogram"
    values: list[float]


class BitPayload(Model):
    kind: Literal["bit"] = "bit"
    bit: Literal[-1, 1]


class IndexSignPayload(Model):
    kind: Literal["index-sign"] = "index-sign"
    index: NonNegInt
    sign: Literal[-1, 1]


class StatisticPayload(Model):
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


# --------------------------------------------------------------------------- catalogue


class ProtocolInfo(Model):
    name: str
    version: str
    summary: str
    source: str
    heterogeneity: str
    trust: Literal["local", "central"]
    data_kind: str
    parameters: dict[str, Any]


class ProtocolList(Model):
    protocols: list[ProtocolInfo]


class Health(Model):
    status: Literal["ok"]
    version: str
    database: str


class ErrorBody(Model):
    code: str
    detail: str


# --------------------------------------------------------------------------- studies

StudyPhase = Literal["enrolling", "running", "finished", "failed", "cancelled"]


class StudyCreate(Model):
    protocol: str
    params: dict[str, Any] = Field(default_factory=dict)
    seed: Seed
    name: str | None = Field(default=None, max_length=200, pattern=r"^[^\x00]*$")
    enrollment_target: Annotated[int, Field(ge=1, le=MAX_ID)] | None = None
    enrollment_deadline_s: Deadline | None = None
    round_deadline_s: Deadline = 600.0
    quorum: Annotated[float, Field(gt=0, le=1)] = 1.0
    noise_seed: Seed | None = Field(
        None,
        description="central-trust protocols only: the seed of the server's noise, kept secret "
        "(never shown); default a random one. Give it only to reproduce a run in process.",
    )
    epsilon_min: EpsilonBound | None = Field(
        None,
        description=f"smallest ε a participant may enroll with (default {EPSILON_MIN:g}); a "
        "central-trust release uses the smallest enrolled ε for everyone, so set it there",
    )
    epsilon_max: EpsilonBound | None = Field(
        None, description=f"largest ε a participant may enroll with (default {EPSILON_MAX:g})"
    )

    @model_validator(mode="after")
    def _epsilon_range(self) -> StudyCreate:
        low = EPSILON_MIN if self.epsilon_min is None else self.epsilon_min
        high = EPSILON_MAX if self.epsilon_max is None else self.epsilon_max
        if low > high:
            raise ValueError(f"epsilon_min {low:g} exceeds epsilon_max {high:g}")
        return self


class RoundProgress(Model):
    index: int
    name: str
    status: Literal["pending", "open", "closed"]
    expected: int
    received: int
    deadline: datetime | None
    seconds_left: float | None


class StudyView(Model):
    id: str
    name: str | None
    protocol: str
    trust: Literal["local", "central"]
    params: dict[str, Any]
    seed: int
    phase: StudyPhase
    created_at: datetime
    n_participants: int
    enrollment_target: int | None
    enrollment_deadline: datetime | None
    round_deadline_s: float
    quorum: float
    current_round: int | None
    rounds: list[RoundProgress]
    failure_reason: str | None
    warnings: list[str]
    epsilon_min: float = Field(
        EPSILON_MIN, description="smallest ε enrollment accepts (the study's, else the global)"
    )
    epsilon_max: float = Field(
        EPSILON_MAX, description="largest ε enrollment accepts (the study's, else the global)"
    )


class StudyList(Model):
    studies: list[StudyView]


# --------------------------------------------------------------------------- participants


class EnrollRequest(Model):
    epsilon: PositiveFloat
    metadata: dict[str, float | list[float]] = Field(default_factory=dict)
    participant_id: NonNegInt | None = Field(
        default=None,
        description="an id from this swarm's lease (leased enrollment); omitted: the server "
        "numbers participants in arrival order",
    )


class EnrollBatch(Model):
    """Many participants at once: a list of ``participants``, or the same as columns (one ε per
    participant in ``epsilons``, each metadata key with one value per participant, optional
    ``participant_ids``), which spares large batches one object per participant."""

    participants: (
        Annotated[list[EnrollRequest], Field(min_length=1, max_length=MAX_BATCH)] | None
    ) = None
    epsilons: Annotated[list[PositiveFloat], Field(min_length=1, max_length=MAX_BATCH)] | None = (
        None
    )
    metadata: dict[str, list[float] | list[list[float]]] = Field(default_factory=dict)
    participant_ids: list[NonNegInt] | None = None
    block_only: bool = Field(
        default=False,
        description="answer with the block token only, not with every participant's token (a "
        "client of the batch endpoints alone needs no more); the ids must then be consecutive",
    )

    @model_validator(mode="after")
    def _one_form(self) -> EnrollBatch:
        if (self.participants is None) == (self.epsilons is None):
            raise ValueError("give either participants or epsilons (the columnar form)")
        if self.epsilons is not None:
            n = len(self.epsilons)
            if any(len(column) != n for column in self.metadata.values()):
                raise ValueError("every metadata column needs one value per epsilon")
            if self.participant_ids is not None and len(self.participant_ids) != n:
                raise ValueError("participant_ids needs one id per epsilon")
        elif self.metadata or self.participant_ids is not None:
            raise ValueError("metadata and participant_ids columns go with epsilons")
        return self

    def rows(self) -> tuple[list[float], list[dict[str, Any]], list[int | None]]:
        """Each participant's ε, metadata and requested id (None: numbered by the server). In
        the columnar form, a participant whose metadata equal the previous one's, bit for bit,
        shares its dict (read-only): the server then stores one JSON text for the run of them."""
        if self.participants is not None:
            return (
                [p.epsilon for p in self.participants],
                [dict(p.metadata) for p in self.participants],
                [p.participant_id for p in self.participants],
            )
        assert self.epsilons is not None
        n = len(self.epsilons)
        keys = list(self.metadata)
        columns = [self.metadata[k] for k in keys]
        metadata: list[dict[str, Any]] = [{}] * n
        if keys:
            rows = zip(zip(*columns, strict=True), _repeats(columns), strict=True)
            for i, (values, repeat) in enumerate(rows):
                metadata[i] = metadata[i - 1] if repeat else dict(zip(keys, values, strict=True))
        ids: list[int | None] = (
            list(self.participant_ids) if self.participant_ids is not None else [None] * n
        )
        return list(self.epsilons), metadata, ids


def _repeats(columns: list[list[float] | list[list[float]]]) -> list[bool]:
    """Whether each row of the columns holds the previous row's values, bit for bit (so that
    0.0 and -0.0 differ); the first row repeats nothing, and rows of ragged vectors neither."""
    n = len(columns[0])
    same = np.ones(n, dtype=np.bool_)
    same[:1] = False
    for column in columns:
        try:
            bits = np.asarray(column, dtype=np.float64).view(np.int64).reshape(n, -1)
        except ValueError:  # vectors of different lengths
            return [False] * n
        same[1:] &= (bits[1:] == bits[:-1]).all(axis=1)
    return same.tolist()


class Enrollment(Model):
    participant_id: int
    token: str


MAX_BLOCKS = 1000
"""Most block tokens one request may carry."""


class BlockToken(Model):
    """The secret token of a block of participants: ids ``start`` to ``stop - 1`` of one study,
    enrolled by one batch request, which returned it. A batch of task requests or reports may
    carry block tokens instead of one token per participant: each authorises exactly the
    participants of its block."""

    start: NonNegInt
    stop: Annotated[int, Field(ge=1, le=MAX_ID + 1)]
    token: str

    @model_validator(mode="after")
    def _not_empty(self) -> BlockToken:
        if self.stop <= self.start:
            raise ValueError("a block needs stop > start")
        return self


BlockTokens = Annotated[list[BlockToken], Field(min_length=1, max_length=MAX_BLOCKS)]


class EnrollmentBatch(Model):
    """Ids and secret tokens of a batch of enrolled participants, in request order (columnar),
    and the block token of them all when their ids are consecutive. ``tokens`` is empty when
    the request asked for the block token only."""

    participant_ids: list[int]
    tokens: list[str]
    block: BlockToken | None = None

    @property
    def enrollments(self) -> list[Enrollment]:
        if len(self.tokens) != len(self.participant_ids):
            raise ValueError("this batch was enrolled with a block token only")
        return [
            Enrollment(participant_id=p, token=t)
            for p, t in zip(self.participant_ids, self.tokens, strict=True)
        ]


class LeaseRequest(Model):
    size: Annotated[int, Field(ge=1, le=MAX_BATCH)]


class Lease(Model):
    """A block [start, stop) of participant ids reserved for one swarm (stop > start)."""

    study_id: str
    start: int
    stop: int


class TaskWait(Model):
    kind: Literal["wait"] = "wait"
    reason: str
    retry_after_s: float


class TaskReport(Model):
    kind: Literal["report"] = "report"
    round: int
    name: str
    broadcast: dict[str, Any]
    payload_kind: PayloadKind
    payload_shape: list[int]
    group: int
    epsilon: float
    deadline: datetime | None


class TaskDone(Model):
    kind: Literal["done"] = "done"
    phase: StudyPhase
    reported_rounds: list[int]


Task = Annotated[TaskWait | TaskReport | TaskDone, Field(discriminator="kind")]


class Credentials(Model):
    """A batch request's proof that its participants sent it: one token per participant
    (``tokens``, in the order of ``participant_ids``), or the block tokens that cover them
    (``blocks``), which spares a batch of tens of thousands their tokens."""

    tokens: list[str] | None = Field(
        default=None, description="each participant's token (give this or blocks)"
    )
    blocks: BlockTokens | None = Field(
        default=None, description="block tokens covering every participant (or tokens)"
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Credentials:
        if (self.tokens is None) == (self.blocks is None):
            raise ValueError("give either tokens (one per participant) or blocks")
        return self

    def _one_token_each(self, participants: int) -> None:
        if self.tokens is not None and len(self.tokens) != participants:
            raise ValueError(f"{participants} participant ids but {len(self.tokens)} tokens")


class TaskBatchRequest(Credentials):
    participant_ids: Annotated[list[NonNegInt], Field(min_length=1, max_length=MAX_BATCH)]

    @model_validator(mode="after")
    def _one_token_per_participant(self) -> TaskBatchRequest:
        self._one_token_each(len(self.participant_ids))
        return self


class TaskBatchItem(Model):
    participant_id: int
    task: Task


class RoundTasks(Model):
    """One round's report task for many participants, columnar: what they share once, then
    each participant's sub-task group and ε charge."""

    round: int
    name: str
    broadcast: dict[str, Any]
    payload_kind: PayloadKind
    payload_shape: list[int]
    deadline: datetime | None
    participant_ids: list[int]
    groups: list[int]
    epsilons: list[float]

    def task(self, i: int) -> TaskReport:
        """The task of the i-th participant listed."""
        return TaskReport(
            round=self.round,
            name=self.name,
            broadcast=self.broadcast,
            payload_kind=self.payload_kind,
            payload_shape=self.payload_shape,
            group=self.groups[i],
            epsilon=self.epsilons[i],
            deadline=self.deadline,
        )


class TaskBatch(Model):
    """The tasks of many participants: report tasks by round (columnar, as they are tens of
    thousands per answer), then who should ask again later and who has nothing left to do."""

    phase: StudyPhase
    reports: list[RoundTasks] = Field(default_factory=list)
    waiting: list[int] = Field(default_factory=list)
    wait_reason: str = ""
    retry_after_s: float = 0.0
    done: list[int] = Field(default_factory=list)

    def items(self) -> list[TaskBatchItem]:
        """One (participant, task) item each, by participant id: the form of the single-task
        endpoint (a done participant's reported rounds are not listed here)."""
        out = [
            TaskBatchItem(participant_id=pid, task=rt.task(i))
            for rt in self.reports
            for i, pid in enumerate(rt.participant_ids)
        ]
        wait = TaskWait(reason=self.wait_reason, retry_after_s=self.retry_after_s)
        out += [TaskBatchItem(participant_id=pid, task=wait) for pid in self.waiting]
        done = TaskDone(phase=self.phase, reported_rounds=[])
        out += [TaskBatchItem(participant_id=pid, task=done) for pid in self.done]
        return sorted(out, key=lambda item: item.participant_id)


# --------------------------------------------------------------------------- reports


class ReportSubmit(Model):
    participant_id: NonNegInt
    token: str
    round: NonNegInt
    payload: Payload


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

    round: NonNegInt
    kind: PayloadKind
    participant_ids: Annotated[list[NonNegInt], Field(min_length=1, max_length=MAX_BATCH)]
    payloads: list[list[float]] | None = Field(
        default=None, description="each participant's payload row (give this or packed)"
    )
    packed: str | None = Field(
        default=None,
        description="the payload rows as one base64 string of little-endian float64 numbers, "
        "row after row, the same number of them for each participant (or payloads)",
    )

    @model_validator(mode="after")
    def _one_payload_form(self) -> ReportBatch:
        self._one_token_each(len(self.participant_ids))
        if (self.payloads is None) == (self.packed is None):
            raise ValueError("give either payloads or packed")
        if self.payloads is not None and len(self.payloads) != len(self.participant_ids):
            n = len(self.participant_ids)
            raise ValueError(f"{n} participant ids but {len(self.payloads)} payloads")
        if self.packed is not None:
            self.packed_rows()  # decodable, one row per participant, finite
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
        rows = np.frombuffer(raw, dtype="<f8").astype(np.float64).reshape((n, -1))
        if not np.isfinite(rows).all():
            raise ValueError("packed holds a number that is not finite")
        return rows


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


# --------------------------------------------------------------------------- rounds and results


class RoundView(Model):
    index: int
    name: str
    status: Literal["pending", "open", "closed"]
    expected: int
    received: int
    opened_at: datetime | None
    closed_at: datetime | None
    broadcast: dict[str, Any] | None
    output: dict[str, Any] | None


class RoundsView(Model):
    rounds: list[RoundView]


class ErrorBarView(Model):
    half_width: float
    level: float
    kind: str
    approximate: bool
    norm: str


class EpsilonSummary(Model):
    participants: int
    charged: int
    max: float
    median: float
    mean: float


class ResultView(Model):
    study_id: str
    protocol: str
    trust: Literal["local", "central"]
    phase: StudyPhase
    estimate: float | list[float] | None
    error_bar: ErrorBarView | None
    diagnostics: dict[str, Any]
    epsilon_spent: EpsilonSummary
    warnings: list[str]
    failure_reason: str | None


MAX_PREDICT_ROWS = 10_000
"""Feature rows one prediction request may carry."""


class PredictRequest(Model):
    """Feature rows to predict from a finished nonparametric study (user-classify,
    user-regress); each row has the study's feature dimension."""

    features: list[list[float]] = Field(min_length=1, max_length=MAX_PREDICT_ROWS)


class PredictView(Model):
    study_id: str
    protocol: str
    predictions: list[float]


class BudgetCharge(Model):
    """One planned charge: ``messages`` Laplace messages of ``epsilon / messages`` each (e.g. one
    per coordinate its group estimates, user-level-ldp §4.1), composed to ``epsilon``."""

    round: int
    name: str
    epsilon: float
    messages: int = 1
    reported: bool


class BudgetView(Model):
    participant_id: int
    declared_epsilon: float
    planned: list[BudgetCharge]
    spent: float
    remaining: float

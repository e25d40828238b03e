"""Enrollment, leases, credentials and tasks: what a participant sends and is told."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import ConfigDict, Field, model_validator

from fedldp.protocol.core.base.records import PayloadKind
from fedldp.protocol.core.broadcast import glossary_text
from fedldp.protocol.core.wire.common import (
    MAX_BATCH,
    MAX_ID,
    MAX_METADATA_KEYS,
    MAX_METADATA_VECTOR,
    MAX_SAMPLES,
    Epsilon,
    MetadataKey,
    Model,
    NonNegInt,
    Request,
    either,
)
from fedldp.protocol.core.wire.studies import StudyPhase

# --------------------------------------------------------------------------- participants

BROADCAST_DESCRIPTION = (
    "The round's public broadcast: every constant the participant needs to compute its payload "
    "(which fields a protocol sends: GET /v1/protocols, broadcast_fields; how to use them: "
    "docs/clients.md). The fields of the catalogue's protocols:\n" + glossary_text()
)


SAMPLES_KEY = "samples"
"""The metadata entry that declares a participant's sample count: an integer in 1..MAX_SAMPLES."""

Vector = Annotated[list[float], Field(max_length=MAX_METADATA_VECTOR)]
Metadata = Annotated[
    dict[MetadataKey, int | float | Vector],
    Field(
        max_length=MAX_METADATA_KEYS,
        description=f"public metadata: at most {MAX_METADATA_KEYS} entries, each a number or a "
        f"vector of at most {MAX_METADATA_VECTOR}; '{SAMPLES_KEY}' is an integer in "
        f"1..{MAX_SAMPLES:.0e}",
    ),
]
MetadataColumns = Annotated[
    dict[
        MetadataKey,
        Annotated[list[int | float], Field(max_length=MAX_BATCH)]
        | Annotated[list[Vector], Field(max_length=MAX_BATCH)],
    ],
    Field(max_length=MAX_METADATA_KEYS),
]


def _check_samples(values: list[Any]) -> None:
    """ValueError unless every declared sample count is an integer in 1..MAX_SAMPLES (a column
    of integers is checked by its types, least and greatest value: loops in C)."""
    if (
        values
        and set(map(type, values)) == {int}
        and 1 <= min(values) <= max(values) <= MAX_SAMPLES
    ):
        return
    for v in values:
        if type(v) is not int or not 1 <= v <= MAX_SAMPLES:
            raise ValueError(f"{SAMPLES_KEY} must be an integer in 1..{MAX_SAMPLES}, not {v!r}")


class EnrollRequest(Request):
    """One participant: its ε, public metadata and, for leased enrollment, the id it takes
    from its swarm's lease (whose token then goes in ``Authorization: Bearer``)."""

    epsilon: Epsilon
    metadata: Metadata = Field(default_factory=dict)
    participant_id: NonNegInt | None = Field(
        default=None,
        description="an id from the caller's lease (leased enrollment; the lease token goes in "
        "Authorization: Bearer); omitted: the server numbers participants itself, outside "
        "every leased block",
    )

    @model_validator(mode="after")
    def _samples(self) -> EnrollRequest:
        if SAMPLES_KEY in self.metadata:
            _check_samples([self.metadata[SAMPLES_KEY]])
        return self


class EnrollBatch(Request):
    """Many participants at once: a list of ``participants``, or the same as columns (one ε per
    participant in ``epsilons``, each metadata key with one value per participant, optional
    ``participant_ids``), which spares large batches one object per participant."""

    model_config = ConfigDict(json_schema_extra=either(("participants", "epsilons")))

    participants: (
        Annotated[list[EnrollRequest], Field(min_length=1, max_length=MAX_BATCH)] | None
    ) = None
    epsilons: Annotated[list[Epsilon], Field(min_length=1, max_length=MAX_BATCH)] | None = None
    metadata: MetadataColumns = Field(default_factory=dict)
    participant_ids: Annotated[list[NonNegInt], Field(max_length=MAX_BATCH)] | None = None
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
            if SAMPLES_KEY in self.metadata:
                _check_samples(self.metadata[SAMPLES_KEY])
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
            # one dict per run of equal rows, repeated for the run (most populations declare
            # the same metadata for everyone: one run)
            starts = np.flatnonzero(~_repeats(columns)).tolist()
            metadata = []
            for start, stop in zip(starts, [*starts[1:], n], strict=True):
                values = [column[start] for column in columns]
                metadata += [dict(zip(keys, values, strict=True))] * (stop - start)
        ids: list[int | None] = (
            list(self.participant_ids) if self.participant_ids is not None else [None] * n
        )
        return list(self.epsilons), metadata, ids


def _repeats(columns: list[list[int | float] | list[list[float]]]) -> NDArray[np.bool_]:
    """Whether each row of the columns holds the previous row's values, bit for bit (so that
    0.0 and -0.0 differ); the first row repeats nothing, and rows of ragged vectors neither."""
    n = len(columns[0])
    same = np.ones(n, dtype=np.bool_)
    same[:1] = False
    for column in columns:
        try:
            bits = np.asarray(column, dtype=np.float64).view(np.int64).reshape(n, -1)
        except ValueError:  # vectors of different lengths
            return np.zeros(n, dtype=np.bool_)
        same[1:] &= (bits[1:] == bits[:-1]).all(axis=1)
    return same


class Enrollment(Model):
    participant_id: int
    token: str


MAX_BLOCKS = 1000
"""Most block tokens one request may carry."""


class BlockToken(Request):
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


class LeaseRequest(Request):
    size: Annotated[int, Field(ge=1, le=MAX_BATCH)]


class Lease(Model):
    """A block [start, stop) of participant ids reserved for one swarm (stop > start) until
    ``expires_at`` unless all of them enroll before. Enrolling them needs ``token`` (in
    ``Authorization: Bearer``): no other caller can take the block's ids."""

    study_id: str
    start: int
    stop: int
    token: str = ""
    expires_at: datetime | None = None


class TaskWait(Model):
    kind: Literal["wait"] = "wait"
    reason: str
    retry_after_s: float


class TaskReport(Model):
    kind: Literal["report"] = "report"
    round: int
    name: str
    broadcast: dict[str, Any] = Field(description=BROADCAST_DESCRIPTION)
    payload_kind: PayloadKind
    payload_shape: list[int]
    group: int
    epsilon: float
    deadline: datetime | None
    final: bool = Field(
        default=False,
        description=(
            "true when, by the study's fixed plan, this participant has no task in any later "
            "round: it may stop once this report is stored, without asking for a task again; "
            "false when it has one or when the server does not say (a batch answer says it for "
            "a round's participants together: ``RoundTasks.final``)"
        ),
    )


class TaskDone(Model):
    kind: Literal["done"] = "done"
    phase: StudyPhase
    reported_rounds: list[int]


Task = Annotated[TaskWait | TaskReport | TaskDone, Field(discriminator="kind")]


class Credentials(Request):
    """A batch request's proof that its participants sent it: one token per participant
    (``tokens``, in the order of ``participant_ids``), or the block tokens that cover them
    (``blocks``), which spares a batch of tens of thousands their tokens."""

    model_config = ConfigDict(json_schema_extra=either(("tokens", "blocks")))

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
    broadcast: dict[str, Any] = Field(description=BROADCAST_DESCRIPTION)
    payload_kind: PayloadKind
    payload_shape: list[int]
    deadline: datetime | None
    participant_ids: list[int]
    groups: list[int]
    epsilons: list[float]
    final: bool = Field(
        default=False,
        description=(
            "true when, by the study's fixed plan, none of these participants has a task in any "
            "later round: each may stop once its report is stored, without asking for a task "
            "again (a block of them asks once less); false when some of them have one"
        ),
    )

    def task(self, i: int) -> TaskReport:
        """The task of the i-th participant listed."""
        return self.task_at(self.groups[i], self.epsilons[i])

    def task_at(self, group: int, epsilon: float) -> TaskReport:
        """The task the listed participants share, for one in ``group`` charged ``epsilon``
        (a caller holding the groups and ε's as arrays takes them from there)."""
        return TaskReport(
            round=self.round,
            name=self.name,
            broadcast=self.broadcast,
            payload_kind=self.payload_kind,
            payload_shape=self.payload_shape,
            group=group,
            epsilon=epsilon,
            deadline=self.deadline,
            final=self.final,
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

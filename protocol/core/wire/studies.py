"""Catalogue, studies, rounds, results, predictions and budgets: what the API shows."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from fedldp.protocol.core.wire.common import (
    EPSILON_MAX,
    EPSILON_MIN,
    MAX_ID,
    Deadline,
    EpsilonBound,
    Model,
    Request,
    Seed,
)

# --------------------------------------------------------------------------- catalogue


class PopulationInfo(Model):
    """The smallest population the protocol plans for, every participant at ``epsilon``."""

    epsilon: float
    min_participants: int | None = Field(
        description="with the protocol's default parameters (and, for required parameters the "
        "minimum does not depend on, any value: see rule); None when it depends on a required "
        "parameter (depends_on), or no population of up to 2**21 plans"
    )
    rule: str = Field(description="the condition, in words (the paper's feasibility check)")
    depends_on: list[str] = Field(
        default_factory=list,
        description="the required parameters the minimum depends on (then min_participants is "
        "None: a create body's enrollment_target is still checked against its own parameters)",
    )


class ProtocolInfo(Model):
    name: str
    version: str
    summary: str
    source: str
    heterogeneity: str
    dropout: str = ""  # what a round closed on a quorum estimates
    trust: Literal["local", "central"]
    data_kind: str
    parameters: dict[str, Any]
    broadcast_fields: dict[str, str] = Field(
        description="each field of the protocol's round broadcasts (a task's broadcast) and "
        "what a client computes from it (docs/clients.md)"
    )
    population: PopulationInfo
    origin: str = Field(
        description="where its code comes from: 'built-in' (fedldp's own families) or the "
        "name of the installed distribution that declares it (a plugin)"
    )
    origin_version: str = Field(
        description="the version of that code: fedldp's for a built-in protocol, the "
        "distribution's for a plugin; a study records it (StudyView.protocol_version)"
    )


class BrokenProtocol(Model):
    """A plugin protocol installed beside the server that it does not serve, and why."""

    name: str = Field(description="the entry point's name")
    package: str = Field(description="the distribution that declares it")
    version: str = Field(description="that distribution's version")
    error: str = Field(
        description="why: it failed to import, is not a protocol, or its name clashes with a "
        "built-in protocol's or another plugin's"
    )


class ProtocolList(Model):
    protocols: list[ProtocolInfo]
    broken: list[BrokenProtocol] = Field(
        default_factory=list, description="declared plugin protocols that are not served"
    )


class Health(Model):
    status: Literal["ok"]
    version: str
    database: str


class ErrorBody(Model):
    code: str
    detail: str


# --------------------------------------------------------------------------- studies

StudyPhase = Literal["enrolling", "running", "finished", "failed", "cancelled"]
#: Who may enroll in a study: ``open``, anyone (ids numbered by the server, outside every lease,
#: or explicit ids inside the caller's lease); ``leased``, only holders of a lease, with the
#: explicit ids of their block (``POST …/participants`` without them: 403 ``enrollment_closed``).
EnrollmentPolicy = Literal["open", "leased"]


class StudyCreate(Request):
    protocol: str
    params: dict[str, Any] = Field(default_factory=dict)
    seed: Seed
    name: str | None = Field(default=None, max_length=200, pattern=r"^[^\x00]*$")
    enrollment_target: Annotated[int, Field(ge=1, le=MAX_ID)] | None = None
    enrollment_deadline_s: Deadline | None = None
    round_deadline_s: Deadline = 600.0
    quorum: Annotated[float, Field(gt=0, le=1)] = 1.0
    population_digest: str | None = Field(
        default=None,
        max_length=128,
        pattern=r"^[0-9a-f]*$",
        description="a keyed digest of the creator's population (HMAC under a key only the "
        "creator's private seed gives, so it tells the server nothing about the population): "
        "swarms joining the study by name must declare the same",
    )
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
    enrollment: EnrollmentPolicy = Field(
        "open",
        description="who may enroll: 'open', anyone; 'leased', only holders of a lease "
        "(POST …/leases), with their block's explicit participant ids. A population enrolled "
        "through leases (fedldp swarm) creates its study 'leased', so that nobody else can take "
        "one of its participants' places",
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
    refused: int = 0  # by the protocol's checks or plausibility bounds
    late: int = 0  # sent after the round had closed
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
    population_digest: str | None = Field(
        None, description="the keyed digest of its creator's population (see StudyCreate)"
    )
    enrollment: EnrollmentPolicy = Field(
        "open", description="who may enroll (see StudyCreate): 'open' or 'leased'"
    )
    protocol_origin: str | None = Field(
        None,
        description="where the protocol's code came from when the study was created "
        "(ProtocolInfo.origin); None for a study made before origins were recorded",
    )
    protocol_version: str | None = Field(
        None,
        description="that code's version (ProtocolInfo.origin_version): a swarm, and a server, "
        "running the study with another version are refused (protocol_version_mismatch)",
    )


class StudyList(Model):
    studies: list[StudyView]


# --------------------------------------------------------------------------- rounds and results


class RoundView(Model):
    index: int
    name: str
    status: Literal["pending", "open", "closed"]
    expected: int
    received: int
    refused: int = 0  # by the protocol's checks or plausibility bounds
    late: int = 0  # sent after the round had closed
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


class EpsilonLedgerView(Model):
    """The ε ledger of a study in aggregate: histograms of the participants' declared ε and of
    the ε their stored reports have spent so far, over the same ``edges`` (``bins`` + 1 values
    from 0 to the largest declared ε; the last bin includes its right edge)."""

    study_id: str
    participants: int
    edges: list[float]
    declared: list[int]
    spent: list[int]
    spent_total: float
    spent_max: float


MAX_PREDICT_ROWS = 10_000
"""Feature rows one prediction request may carry."""


class PredictRequest(Request):
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

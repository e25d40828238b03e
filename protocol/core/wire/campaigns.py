"""Campaigns: a study template repeated on a schedule over the same devices, and the devices'
ε ledger across its occurrences (docs/campaigns.md)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from fedldp.protocol.core.wire.common import (
    MAX_BATCH,
    MAX_ID,
    Deadline,
    EpsilonBound,
    Model,
    Request,
    Seed,
)
from fedldp.protocol.core.wire.studies import ErrorBarView, StudyPhase

__all__ = [
    "BUDGET_SLACK",
    "CAMPAIGN_PURPOSE",
    "MAX_DEVICE",
    "MAX_TRUTH",
    "BudgetSpend",
    "CampaignCreate",
    "CampaignList",
    "CampaignSpend",
    "CampaignView",
    "DeviceAdmission",
    "DeviceBatch",
    "DeviceBudgetView",
    "DeviceCharge",
    "OccurrenceTruth",
    "OccurrenceView",
    "budget_window",
    "occurrence_seed",
    "within_budget",
]

MAX_DEVICE = 64
"""Longest device id."""
DeviceId = Annotated[str, Field(min_length=1, max_length=MAX_DEVICE, pattern=r"^[A-Za-z0-9_.:-]+$")]
Days = Annotated[float, Field(gt=0, le=36525.0, description="days")]
BudgetDelta = Annotated[
    float,
    Field(
        gt=0,
        lt=1,
        allow_inf_nan=False,
        description="the δ at which a central protocol's (ε, δ) releases are composed",
    ),
]
CAMPAIGN_PURPOSE = 0x4F
BUDGET_SLACK = 1e-9
"""Relative rounding slack of a budget check: ten charges of 0.1 fit a budget of 1."""


def budget_window(day: float, period: float | None) -> int:
    """The budget window holding ``day``: [k·period, (k+1)·period) is window k; one window (0)
    for a lifetime budget. The device and the server both count spends by it."""
    return 0 if period is None else math.floor(day / period + BUDGET_SLACK)


def within_budget(spent: float, charge: float, budget: float) -> bool:
    """Whether a charge on top of a window's spend stays within the budget (basic composition
    of pure ε, with ``BUDGET_SLACK``)."""
    return spent + charge <= budget * (1.0 + BUDGET_SLACK)


def occurrence_seed(study_seed: int, occurrence: int) -> int:
    """The public study seed of a campaign's occurrence ``occurrence`` from occurrence 0's: the
    same for 0, a fresh one (SeedSequence spawning) for each later occurrence, in [0, 2**63).
    The server derives it for each occurrence it opens; the client checks it."""
    if occurrence < 0:
        raise ValueError(f"occurrence must be >= 0, got {occurrence}")
    if occurrence == 0:
        return study_seed
    state = np.random.SeedSequence(study_seed, spawn_key=(CAMPAIGN_PURPOSE, occurrence))
    return int(state.generate_state(1, np.uint64)[0] >> np.uint64(1))


class CampaignCreate(Request):
    """A study template (protocol, parameters, enrollment settings) and its schedule: occurrence
    k opens on the simulated day ``start + k·every``; each device may spend ``budget_epsilon``
    per ``budget_period`` days (None: over its lifetime; no budget: unlimited). A central
    protocol's releases are composed at ``budget_delta`` (required for one, refused for a local
    protocol), the budget being ε at that δ (docs/campaigns.md, *Central releases*)."""

    protocol: str
    params: dict[str, Any] = Field(default_factory=dict)
    seed: Seed = Field(description="the public study seed of occurrence 0")
    name: str | None = Field(default=None, max_length=200, pattern=r"^[^\x00]*$")
    every: Days
    times: Annotated[int, Field(ge=1, le=10_000)]
    start: Annotated[float, Field(ge=0, le=36525.0)] = 0.0
    budget_epsilon: EpsilonBound | None = None
    budget_period: Days | None = None
    budget_delta: BudgetDelta | None = None
    noise_seed: Seed | None = Field(
        None,
        description="central-trust protocols only: the seed of occurrence 0's server noise, "
        "each later occurrence's derived from it (occurrence_seed); kept secret (never shown); "
        "default a random one per occurrence. Give it only to reproduce a run in process.",
    )
    round_deadline_s: Deadline = 600.0
    quorum: Annotated[float, Field(gt=0, le=1)] = 1.0
    population_digest: str | None = Field(default=None, max_length=128, pattern=r"^[0-9a-f]*$")


MAX_TRUTH = 4096
"""Most components of a declared truth (a categorical law's item frequencies)."""


class OccurrenceTruth(Request):
    """The truth of an occurrence's population (the day's law's mean, or item frequencies), as
    the driver that simulates the population declares it: the server cannot know it, and shows
    it beside the estimate (``fedldp campaign run`` declares it for every occurrence it runs)."""

    truth: float | Annotated[list[float], Field(min_length=1, max_length=MAX_TRUTH)]


class OccurrenceView(Model):
    index: int
    day: float
    study_id: str
    phase: StudyPhase
    n_participants: int
    estimate: Any = Field(None, description="the occurrence's result estimate once finished")
    error_bar: ErrorBarView | None = Field(None, description="the estimate's error bar")
    truth: float | list[float] | None = Field(
        None, description="the day's truth as the driver declared it (None: not declared)"
    )
    devices_charged: int = Field(0, description="devices charged ε for this occurrence")
    epsilon_charged: float = Field(
        0.0,
        description="the sum of their charges by the server's rule (as the device budget route "
        "states them; less than the declared ε's for a memoized or composed protocol)",
    )


class CampaignSpend(Model):
    """The devices' cumulative ε over the campaign in aggregate (each device's ``cumulative``
    after its last charge, as the device budget route states it): how many were charged, the mean
    and largest spend, and a histogram of the spends over ``edges`` (``counts[i]`` devices in
    [edges[i], edges[i+1]), the last bin closed)."""

    devices: int
    total: float
    mean: float
    max: float
    edges: list[float]
    counts: list[int]


class CampaignView(Model):
    id: str
    name: str | None
    protocol: str
    params: dict[str, Any]
    seed: int
    every: float
    times: int
    start: float
    budget_epsilon: float | None
    budget_period: float | None
    budget_delta: float | None = Field(
        None, description="the δ central releases are composed at (None: pure ε)"
    )
    clock: float | None = Field(description="the simulated day of the last opened occurrence")
    created_at: datetime
    occurrences: list[OccurrenceView]
    spent: CampaignSpend | None = Field(
        None, description="the devices' cumulative ε in aggregate (None before any charge)"
    )


class CampaignList(Model):
    campaigns: list[CampaignView]


class DeviceCharge(Request):
    device: DeviceId
    epsilon: EpsilonBound


class DeviceBatch(Request):
    """Devices asking to take part in an occurrence, each with the ε it will declare."""

    devices: Annotated[list[DeviceCharge], Field(min_length=1, max_length=MAX_BATCH)]


class DeviceAdmission(Model):
    occurrence: int
    admitted: int = Field(description="devices charged (again: the same answer)")


class BudgetSpend(Model):
    occurrence: Annotated[int, Field(ge=0, le=MAX_ID)]
    day: float
    epsilon: float = Field(
        description="the ε charged: the protocol's server-side charge rule (docs/longitudinal.md "
        "§5), the declared ε under basic composition"
    )
    declared: float = Field(description="the ε the device declared for its reports")
    cumulative: float = Field(
        description="the device's spend over the campaign after this occurrence: the sum of "
        "its charges so far, or for a central protocol the composed ε at δ of its releases so "
        "far (dp-accounting's PLD accountant)"
    )


class DeviceBudgetView(Model):
    """A device's charges over the campaign, and what is left in the window of the clock."""

    device: str
    budget_epsilon: float | None
    budget_period: float | None
    budget_delta: float | None = Field(
        None, description="the δ its central releases are composed at (None: pure ε)"
    )
    spent_total: float
    spent_window: float = Field(description="in the budget window holding the campaign's clock")
    remaining: float | None
    spends: list[BudgetSpend]

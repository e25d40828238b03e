"""Every occurrence of a campaign in process, under a simulated clock.

Occurrence k runs on day ``template.day(k)`` with the population of that day
(``build_population(spec, seed, day=…, occurrence=k)``: the same devices, slots, ε and data
streams, the drifting law of the day, fresh privatization noise and a fresh public seed). Before
each occurrence every device checks its budget (``DeviceLedger.admits``) with the ε it would
declare; those that accept enroll (``simulate(members=…)``) and are charged that ε. The result
holds each occurrence's estimate against the day's truth, and each device's cumulative spend.
The swarm driver (``fedldp.client.campaign.drive``) must give the same numbers over HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedldp.client.campaign.budget import NO_STATE, ChargeRule, DeviceLedger
from fedldp.client.campaign.template import CampaignTemplate
from fedldp.client.population.build import AnyPopulation, build_population
from fedldp.client.population.ranges import check_data_range
from fedldp.client.seeds import round_key
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.base.records import JSON, FloatArray, IntArray
from fedldp.protocol.core.streams import UserStreams

__all__ = [
    "CampaignResult",
    "Occurrence",
    "admitted",
    "charge_rule",
    "check_accountable",
    "check_campaign_data",
    "device_states",
    "estimate_json",
    "occurrence_population",
    "simulate_campaign",
]


@dataclass(frozen=True)
class Occurrence:
    """One occurrence's outcome: its day, who enrolled and refused, estimate and truth."""

    index: int
    day: float
    enrolled: int
    refused: int
    estimate: float | list[float] | None
    truth: float | list[float]
    study: str | None = None  # the server's study id (over HTTP)

    def as_json(self) -> JSON:
        return {
            "index": self.index,
            "day": self.day,
            "enrolled": self.enrolled,
            "refused": self.refused,
            "estimate": self.estimate,
            "truth": self.truth,
            "study": self.study,
        }


@dataclass(frozen=True)
class CampaignResult:
    """Each occurrence's outcome and each device's cumulative ε spend (by slot): ``spent`` by
    its own charge rule, ``bound`` by the server's (docs/longitudinal.md §5)."""

    occurrences: tuple[Occurrence, ...]
    spent: FloatArray
    bound: FloatArray

    def as_json(self) -> JSON:
        return {
            "occurrences": [o.as_json() for o in self.occurrences],
            "spent": _summary(self.spent),
            "server_spent": _summary(self.bound),
        }


def _summary(spent: FloatArray) -> JSON:
    return {"min": float(spent.min()), "max": float(spent.max()), "mean": float(spent.mean())}


def estimate_json(value: Any) -> float | list[float]:
    """An estimate or truth as JSON: a float, or a flat list of floats."""
    array = np.asarray(value, dtype=np.float64)
    return float(array) if array.ndim == 0 else [float(v) for v in array.reshape(-1)]


def occurrence_population(template: CampaignTemplate, seed: int, k: int) -> AnyPopulation:
    """The population of occurrence ``k`` (see the module docstring)."""
    return build_population(template.population, seed, day=template.day(k), occurrence=k)


def check_campaign_data(template: CampaignTemplate, seed: int) -> None:
    """ValueError when the protocol's declared data range (``Protocol.data_range``) does not
    hold the values of some occurrence's population (a drifting law is checked on every day),
    before any occurrence runs or a campaign is created on a server."""
    protocol = get_protocol(template.protocol)
    for k in range(template.times):
        population = occurrence_population(template, seed, k)
        params = protocol.parse_params(fill_from_population(protocol, template.params, population))
        check_data_range(protocol, params, population)
        if k == 0:
            check_accountable(template, ChargeRule(protocol, params, _delta(template)), population)


def _delta(template: CampaignTemplate) -> float | None:
    return None if template.budget is None else template.budget.delta


def check_accountable(
    template: CampaignTemplate, rule: ChargeRule, population: AnyPopulation
) -> None:
    """ValueError when a central protocol's release, at the largest ε a device declares, has
    no finite ε at the budget's δ (a release that is not differentially private, or whose own δ
    is not below the budget's): no device could ever take part."""
    if not rule.central:
        return
    largest = float(np.max(np.asarray(population.epsilon, dtype=np.float64)))
    if not np.isfinite(rule.composed([largest])):
        raise ValueError(
            f"{template.protocol} with these parameters has no finite ε at the budget's "
            f"δ = {rule.delta:g}: its release is not differentially private, or its own δ is "
            "not below the budget's"
        )


def charge_rule(template: CampaignTemplate, population: AnyPopulation) -> ChargeRule:
    """The campaign protocol's charge rule at its parameters (filled from the population)."""
    protocol = get_protocol(template.protocol)
    params = protocol.parse_params(fill_from_population(protocol, template.params, population))
    return ChargeRule(protocol, params, _delta(template))


def device_states(rule: ChargeRule, population: AnyPopulation) -> IntArray:
    """Each device's memoized state for this occurrence (``Protocol.memo_state``: from its data
    of the day and its persistent device streams, as its ``privatize`` will draw them), or
    ``NO_STATE`` for a protocol, or mode, that memoizes nothing."""
    n = population.n
    if rule.protocol is None or rule.params is None:
        return np.full(n, NO_STATE, dtype=np.int64)
    slots = np.arange(n, dtype=np.int64)
    key = round_key(population.population_seed, 0, population.occurrence)
    epsilon = np.asarray(population.epsilon, dtype=np.float64)
    states = rule.protocol.memo_state(
        rule.params, population.data(slots), epsilon, UserStreams(key, slots)
    )
    if states is None:
        return np.full(n, NO_STATE, dtype=np.int64)
    return np.asarray(states, dtype=np.int64)


def admitted(
    ledger: DeviceLedger, population: AnyPopulation, day: float, states: IntArray
) -> IntArray:
    """The slots of the devices whose budget admits an occurrence on ``day`` at the ε each
    declares, in its memoized state: by its own charge and by the server's
    (``DeviceLedger.admits``)."""
    epsilon = np.asarray(population.epsilon, dtype=np.float64)
    return np.flatnonzero(ledger.admits(day, epsilon, states)).astype(np.int64)


def simulate_campaign(
    template: CampaignTemplate, seed: int, *, occurrences: range | None = None
) -> CampaignResult:
    """Run the template's occurrences (all, or ``occurrences``) in process from a fresh ledger;
    ValueError on bad input. An occurrence that no device accepts has no estimate."""
    protocol = get_protocol(template.protocol)
    check_campaign_data(template, seed)
    ledger: DeviceLedger | None = None
    out: list[Occurrence] = []
    for k in occurrences if occurrences is not None else range(template.times):
        population = occurrence_population(template, seed, k)
        rule = charge_rule(template, population)
        if ledger is None:
            ledger = DeviceLedger(population.n, template.budget, rule)
        day = template.day(k)
        states = device_states(rule, population)
        members = admitted(ledger, population, day, states)
        estimate: float | list[float] | None = None
        if members.size:
            assert rule.params is not None
            run = simulate(protocol, rule.params, population, seed, members=members)
            estimate = estimate_json(run.result.estimate)
            eps = np.asarray(population.epsilon, dtype=np.float64)
            ledger.record(k, day, members, eps[members], states[members])
        out.append(
            Occurrence(
                k,
                day,
                int(members.size),
                population.n - int(members.size),
                estimate,
                estimate_json(population.truth),
            )
        )
    assert ledger is not None
    return CampaignResult(tuple(out), ledger.total(), ledger.server_total())

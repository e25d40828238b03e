"""A campaign over HTTP: each occurrence run as a swarm against a server, the devices' state in a
local store (``fedldp campaign run``).

The driver creates the campaign on the server once (its id is kept in the device store), then for
each occurrence: asks the server for the next occurrence (the server advances the simulated
clock, ``fedldp.server.services.campaigns``), lets each device check its budget against its own
ledger, charges the devices that accept in the store and then on the server (which checks its
own ledger keyed by device: ``budget_exceeded`` when the two disagree), runs those devices as a
swarm (``run_swarm(members=…)``) and records the estimate. A second run with the same folder goes
on where the first stopped; a study left half-run by a killed driver is cancelled and the
occurrence run again. The numbers are ``simulate_campaign``'s (tests/client/campaign/).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from fedldp.client.api.client import ApiClient, NotFoundError, PhaseError
from fedldp.client.campaign.simulate import (
    CampaignResult,
    Occurrence,
    admitted,
    charge_rule,
    check_campaign_data,
    device_states,
    estimate_json,
    occurrence_population,
)
from fedldp.client.campaign.store import DeviceStore
from fedldp.client.campaign.template import CampaignTemplate
from fedldp.client.seeds import derive_seeds, noise_seed, population_digest
from fedldp.client.simulate import fill_from_population
from fedldp.client.swarm.run import run_swarm
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import (
    MAX_BATCH,
    CampaignCreate,
    DeviceBatch,
    DeviceCharge,
    OccurrenceTruth,
)

__all__ = ["device_id", "run_campaign"]


def device_id(slot: int) -> str:
    """A device's id on the server: its population slot (public, as a participant id is)."""
    return f"d{slot}"


def _fingerprint(template: CampaignTemplate, seed: int) -> str:
    digest = population_digest(seed, template.population.model_dump(mode="json"))
    text = json.dumps({"template": template.model_dump(mode="json"), "population": digest})
    return hashlib.sha256(text.encode()).hexdigest()


def _create(template: CampaignTemplate, seed: int, name: str | None) -> CampaignCreate:
    protocol = get_protocol(template.protocol)
    population = occurrence_population(template, seed, 0)
    budget = template.budget
    return CampaignCreate(
        protocol=template.protocol,
        params=fill_from_population(protocol, template.params, population),
        seed=derive_seeds(seed)[0],
        name=name,
        every=template.every,
        times=template.times,
        start=template.start,
        budget_epsilon=None if budget is None else budget.epsilon,
        budget_period=None if budget is None else budget.period,
        budget_delta=None if budget is None else budget.delta,
        # central trust: the servers' noise, from the private seed, fresh for every occurrence
        noise_seed=noise_seed(seed) if protocol.trust == "central" else None,
        population_digest=population_digest(seed, template.population.model_dump(mode="json")),
    )


async def run_campaign(
    server_url: str,
    template: CampaignTemplate,
    seed: int,
    folder: Path,
    *,
    name: str | None = None,
    batch: int | None = 256,
    admin_key: str | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    limit: int | None = None,
) -> CampaignResult:
    """Run the campaign's remaining occurrences (at most ``limit`` of them in this call) against
    the server at ``server_url``, keeping the devices' state in ``folder``; the result holds
    every occurrence finished so far (this run's and earlier runs') and each device's spend."""
    check_campaign_data(template, seed)  # before anything is created on the server
    with DeviceStore(folder) as store:
        campaign_id = store.bind(_fingerprint(template, seed))
        ran = 0
        async with ApiClient(server_url, admin_key=admin_key, transport=transport) as api:
            if campaign_id is None:
                campaign_id = (await api.create_campaign(_create(template, seed, name))).id
                store.set_campaign(campaign_id)
            else:
                await _known(api, campaign_id, store, server_url)
            while limit is None or ran < limit:
                try:
                    occurrence = await api.next_occurrence(campaign_id)
                except PhaseError as exc:
                    if exc.code == "campaign_complete":
                        break
                    raise
                if occurrence.phase != "enrolling" or occurrence.n_participants:
                    # left half-run by a driver that died: run it again with a fresh study
                    await api.cancel_study(occurrence.study_id)
                    continue
                run = _Run(api, server_url, template, seed, store, campaign_id, batch, admin_key)
                await run.occurrence(occurrence.index, occurrence.study_id, transport)
                ran += 1
        population = occurrence_population(template, seed, 0)
        ledger = store.ledger(population.n, template.budget, charge_rule(template, population))
        finished = tuple(
            Occurrence(index, day, enrolled, refused, estimate, truth, study)
            for index, day, study, enrolled, refused, estimate, truth in store.finished()
        )
    return CampaignResult(finished, ledger.total(), ledger.server_total())


async def _known(api: ApiClient, campaign_id: str, store: DeviceStore, server_url: str) -> None:
    """ValueError when the store's campaign is not on this server (another server, or its
    database was replaced): the devices' ledgers would no longer match the server's."""
    try:
        await api.campaign(campaign_id)
    except NotFoundError:
        raise ValueError(
            f"the device store {store.path} belongs to campaign {campaign_id}, which the server "
            f"at {server_url} does not hold: give another folder (or the campaign's server)"
        ) from None


@dataclass(frozen=True)
class _Run:
    """What running one occurrence needs."""

    api: ApiClient
    server_url: str
    template: CampaignTemplate
    seed: int
    store: DeviceStore
    campaign_id: str
    batch: int | None
    admin_key: str | None

    async def occurrence(
        self, index: int, study_id: str, transport: httpx.AsyncBaseTransport | None
    ) -> None:
        """Admit the devices whose budget accepts occurrence ``index``, run them as a swarm on
        its study ``study_id`` and store the outcome."""
        run, api, template, seed, store = self, self.api, self.template, self.seed, self.store
        population = occurrence_population(template, seed, index)
        day = template.day(index)
        # the devices' own check, against their ledger without this occurrence (a rerun of it)
        rule = charge_rule(template, population)
        ledger = store.ledger(population.n, template.budget, rule, without=index)
        states = device_states(rule, population)
        members = admitted(ledger, population, day, states)
        epsilon = np.asarray(population.epsilon, dtype=np.float64)[members]
        truth = estimate_json(population.truth)
        # the simulator knows the day's truth; the server shows it beside the estimate
        await api.declare_truth(run.campaign_id, index, OccurrenceTruth(truth=truth))
        estimate = None
        if members.size:
            # write-ahead: never under-counted
            store.charge(ledger.record(index, day, members, epsilon, states[members]))
            for start in range(0, int(members.size), MAX_BATCH):
                devices = [
                    DeviceCharge(device=device_id(int(s)), epsilon=float(e))
                    for s, e in zip(
                        members[start : start + MAX_BATCH],
                        epsilon[start : start + MAX_BATCH],
                        strict=True,
                    )
                ]
                await api.admit_devices(run.campaign_id, index, DeviceBatch(devices=devices))
            swarm = await run_swarm(
                run.server_url,
                population=population,
                study_id=study_id,
                members=members,
                batch=run.batch,
                progress=False,
                admin_key=run.admin_key,
                transport=transport,
            )
            estimate = swarm.result.estimate
        else:  # nobody takes part: the occurrence ends without estimate
            await api.cancel_study(study_id)
        store.finish(
            (
                index,
                day,
                study_id,
                int(members.size),
                population.n - int(members.size),
                None if estimate is None else estimate_json(estimate),
                truth,
            )
        )

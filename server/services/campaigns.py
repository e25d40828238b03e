"""Campaign services: a study template repeated on a schedule over the same devices, and the
devices' ε ledger across its occurrences (docs/campaigns.md; no HTTP here, see
``fedldp.server.web.campaign_routes``).

The simulated clock is advanced by the driver: ``next_occurrence`` opens occurrence k (its day
``start + k·every`` becomes the campaign's clock) once occurrence k − 1's study has ended, and
answers the open occurrence again while its study runs, so a driver, or a restarted server, goes
on from the database alone. A cancelled occurrence that had enrolled devices (a driver that died
mid-occurrence cancels its half-run study) is opened again with a new study of the same public
seed: the devices re-send the same randomized reports, so no new privacy loss. One cancelled with
nobody enrolled (no device's budget admitted it) counts as run, without estimate, and so does a
failed one (its failure would repeat: the same seeds, the same reports).

A device declares an ε for an occurrence when it is admitted (``admit``), once per occurrence:
declaring it again for the same occurrence answers the same. The ledger keeps the declared ε's;
what a device is *charged* for occurrence t is the protocol's server-side charge rule
(``Protocol.repeated_epsilon`` with no states: a bound over every sequence of memoized states,
as the server sees no value; docs/longitudinal.md §5): the increase, from its declared ε's
before t to those up to t. Basic composition (the charge is the declared ε) for a protocol that
memoizes nothing or runs fresh; less for a memoized one (memo-1bitmean: nothing after the first
s + 1 collections). The admission is refused (``budget_exceeded``) when the charge would take the
device's spend in the budget window holding the occurrence's day past the campaign's budget, and
(``invalid_request``) when the rule does not cover the declared ε's (a memoized response asked at
another ε).

A central-trust protocol's (ε, δ) releases are composed instead (``_composer``): each is
described by the protocol's ``release_event`` at the ε the device declares and the device's
releases in a budget window are composed by dp-accounting's PLD accountant
(``fedldp.protocol.core.accounting``) into an ε at the campaign's ``budget_delta``. The charge of
an occurrence is the increase of that composed ε over the window's earlier releases, the
admission is refused (``budget_exceeded``) when the window's composed ε would pass the budget,
and a device's total is the composition of all its releases. The device's ledger
(``fedldp.client.campaign.budget``) computes the same numbers.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.wire import (
    ENDED_PHASES,
    BudgetSpend,
    CampaignCreate,
    CampaignSpend,
    CampaignView,
    DeviceAdmission,
    DeviceBatch,
    DeviceBudgetView,
    OccurrenceTruth,
    OccurrenceView,
    StudyCreate,
    budget_window,
    occurrence_seed,
    within_budget,
)
from fedldp.server.errors import (
    BudgetExceeded,
    CampaignComplete,
    CampaignExists,
    DuplicateConflict,
    InvalidParams,
    InvalidRequest,
    StudyNotEnrolling,
    UnknownCampaign,
    UnknownOccurrence,
    UnknownProtocol,
)
from fedldp.server.runtime.context import Context
from fedldp.server.services import studies
from fedldp.server.store import campaign_rows as rows
from fedldp.server.store.tables import (
    CampaignRow,
    DeviceSpendRow,
    OccurrenceRow,
    StudyRow,
    utcnow,
)

__all__ = [
    "admit",
    "create",
    "declare_truth",
    "device_budget",
    "get",
    "list_all",
    "next_occurrence",
]

SPEND_BINS = 12
"""Bins of the histogram of the devices' cumulative ε in a campaign's view."""


def _require(session: Session, campaign_id: str, *, lock: bool = False) -> CampaignRow:
    found = (rows.locked_campaign if lock else rows.campaign)(session, campaign_id)
    if found is None:
        raise UnknownCampaign(f"no campaign {campaign_id!r}")
    return found


def _occurrence_view(
    occurrence: OccurrenceRow, study: StudyRow, charges: tuple[int, float] = (0, 0.0)
) -> OccurrenceView:
    result: dict[str, Any] = (study.result or {}) if study.phase == "finished" else {}
    return OccurrenceView(
        index=occurrence.index,
        day=occurrence.day,
        study_id=study.id,
        phase=study.phase,
        n_participants=study.n_participants,
        estimate=result.get("estimate"),
        error_bar=result.get("error_bar"),
        truth=occurrence.truth,
        devices_charged=charges[0],
        epsilon_charged=charges[1],
    )


def _aggregate(
    session: Session, c: CampaignRow
) -> tuple[dict[int, tuple[int, float]], CampaignSpend | None]:
    """What the campaign's view draws of its ledger: per occurrence, the devices charged and
    the sum of their charges (the rule's, as ``device_budget`` states them: not the declared
    ε's, which a memoized or composed charge is less than), and the histogram of the devices'
    cumulative spends. Devices with the same history (occurrences, days and declared ε's:
    most of a campaign's devices) are worked out once."""
    histories: dict[tuple[tuple[int, float, float], ...], tuple[str, int]] = {}
    for device, spends in itertools.groupby(rows.all_spends(session, c.id), key=lambda s: s[0]):
        key = tuple((k, day, e) for _, k, day, e in spends)
        _, count = histories.get(key, (device, 0))
        histories[key] = (device, count + 1)
    if not histories:
        return {}, None
    history = _history_rule(c)
    per_occurrence: dict[int, tuple[int, float]] = {}
    totals, counts = [], []
    for key, (device, count) in histories.items():
        charges, cumulative = history(device, [(day, e) for _, day, e in key])
        for (k, _, _), charge in zip(key, charges, strict=True):
            n, total = per_occurrence.get(k, (0, 0.0))
            per_occurrence[k] = (n + count, total + count * charge)
        totals.append(cumulative[-1])
        counts.append(count)
    values = np.asarray(totals, dtype=np.float64)
    weights = np.asarray(counts, dtype=np.int64)
    top = float(values.max())
    binned, edges = np.histogram(
        values, bins=SPEND_BINS, range=(0.0, top if top > 0 else 1.0), weights=weights
    )
    devices = int(weights.sum())
    total = math.fsum((values * weights).tolist())
    spend = CampaignSpend(
        devices=devices,
        total=total,
        mean=total / devices,
        max=top,
        edges=[float(e) for e in edges],
        counts=[int(n) for n in binned],
    )
    return per_occurrence, spend


def _view(session: Session, c: CampaignRow) -> CampaignView:
    charges, spent = _aggregate(session, c)
    return CampaignView(
        id=c.id,
        name=c.name,
        protocol=c.protocol,
        params=c.params,
        seed=c.seed,
        every=c.every,
        times=c.times,
        start=c.start,
        budget_epsilon=c.budget_epsilon,
        budget_period=c.budget_period,
        budget_delta=c.budget_delta,
        clock=c.clock,
        created_at=c.created_at,
        occurrences=[
            _occurrence_view(o, s, charges.get(o.index, (0, 0.0)))
            for o, s in rows.occurrences(session, c.id)
        ],
        spent=spent,
    )


def create(ctx: Context, body: CampaignCreate) -> CampaignView:
    """A new campaign of an offered local-trust protocol (UnknownProtocol, InvalidParams,
    InvalidRequest for a budget period without a budget, CampaignExists for a taken name)."""
    if body.protocol not in ctx.offered or body.protocol not in CATALOGUE:
        raise UnknownProtocol(
            f"no protocol {body.protocol!r} on this server; it offers {', '.join(ctx.offered)}"
        )
    protocol = CATALOGUE[body.protocol]
    try:
        params = protocol.parse_params(body.params)
        event = protocol.release_event(params, 1.0)
    except (ValidationError, ValueError) as exc:
        raise InvalidParams(f"invalid parameters for {protocol.name}: {exc}") from None
    if body.budget_period is not None and body.budget_epsilon is None:
        raise InvalidRequest("budget_period needs budget_epsilon")
    if event is None and body.budget_delta is not None:
        raise InvalidRequest(
            f"{protocol.name} is charged pure ε: budget_delta applies only to central "
            "protocols' (ε, δ) releases"
        )
    if event is not None:
        if body.budget_delta is None:
            raise InvalidRequest(
                f"{protocol.name} releases (ε, δ)-DP estimates: a campaign of it needs "
                "budget_delta, the δ its releases are composed at"
            )
        from fedldp.protocol.core.accounting import is_private  # half a second: only here

        if not is_private(event, body.budget_delta):
            raise InvalidParams(
                f"{protocol.name} with these parameters has no finite ε at budget_delta = "
                f"{body.budget_delta:g}: its release is not differentially private, or its own "
                "δ is not below the budget's"
            )
    row = CampaignRow(
        id=uuid.uuid4().hex,
        name=body.name,
        protocol=protocol.name,
        params=dict(body.params),
        seed=body.seed,
        every=body.every,
        times=body.times,
        start=body.start,
        budget_epsilon=body.budget_epsilon,
        budget_period=body.budget_period,
        budget_delta=body.budget_delta,
        noise_seed=body.noise_seed if protocol.trust == "central" else None,
        round_deadline_s=body.round_deadline_s,
        quorum=body.quorum,
        population_digest=body.population_digest,
        clock=None,
        created_at=utcnow(),
    )
    try:
        with ctx.transaction() as session:
            rows.add_campaign(session, row)
            return _view(session, row)
    except IntegrityError:
        raise CampaignExists(f"a campaign named {body.name!r} exists already") from None


def list_all(ctx: Context) -> list[CampaignView]:
    with ctx.transaction() as session:
        return [_view(session, c) for c in rows.all_campaigns(session)]


def get(ctx: Context, campaign_id: str) -> CampaignView:
    with ctx.transaction() as session:
        return _view(session, _require(session, campaign_id))


def next_occurrence(ctx: Context, campaign_id: str) -> OccurrenceView:
    """The open occurrence, else the next one opened (see the module docstring);
    CampaignComplete once every occurrence has been opened and has ended."""
    with ctx.transaction() as session:
        c = _require(session, campaign_id, lock=True)
        done = rows.occurrences(session, campaign_id)
        if done and done[-1][1].phase not in ENDED_PHASES:
            return _occurrence_view(*done[-1])
        if done and done[-1][1].phase == "cancelled" and done[-1][1].n_participants > 0:
            index, replaced = done[-1][0].index, done[-1][1].id
        elif len(done) >= c.times:
            raise CampaignComplete(f"campaign {campaign_id} ran all its {c.times} occurrences")
        else:
            index, replaced = len(done), None
        spec = StudyCreate(
            protocol=c.protocol,
            params=c.params,
            seed=occurrence_seed(c.seed, index),
            # central trust: each release's noise is fresh (composition assumes it)
            noise_seed=None if c.noise_seed is None else occurrence_seed(c.noise_seed, index),
            round_deadline_s=c.round_deadline_s,
            quorum=c.quorum,
            population_digest=c.population_digest,
            # only lease holders enroll (the admin key, when the server has one, as admission)
            enrollment="leased",
        )
        day = c.start + index * c.every
    study = studies.create(ctx, spec)  # its own transaction
    loser: str | None = None
    with ctx.transaction() as session:
        _require(session, campaign_id, lock=True)
        existing = rows.occurrence(session, campaign_id, index)
        if existing is None:
            opened = OccurrenceRow(campaign_id=campaign_id, index=index, study_id=study.id, day=day)
            rows.add_occurrence(session, opened)
        elif existing.study_id == replaced:
            rows.set_occurrence_study(session, campaign_id, index, study.id)
        else:  # another driver opened it meanwhile: ours is never used
            loser = study.id
        rows.set_clock(session, campaign_id, day)
        found = rows.occurrences(session, campaign_id)
        view = next(_occurrence_view(o, s) for o, s in found if o.index == index)
    if loser is not None:
        studies.cancel(ctx, loser)
    return view


def declare_truth(
    ctx: Context, campaign_id: str, index: int, body: OccurrenceTruth
) -> OccurrenceView:
    """Record the truth of occurrence ``index`` as its driver declares it (UnknownOccurrence
    before the occurrence is opened); declaring it again replaces it."""
    with ctx.transaction() as session:
        c = _require(session, campaign_id)
        if rows.occurrence(session, campaign_id, index) is None:
            raise UnknownOccurrence(f"campaign {campaign_id} has not opened occurrence {index}")
        rows.set_truth(session, campaign_id, index, body.truth)
        found = rows.occurrences(session, campaign_id)
        charges, _ = _aggregate(session, c)
        return next(
            _occurrence_view(o, s, charges.get(o.index, (0, 0.0)))
            for o, s in found
            if o.index == index
        )


def admit(ctx: Context, campaign_id: str, index: int, body: DeviceBatch) -> DeviceAdmission:
    """Charge each device of ``body`` its ε for occurrence ``index`` (see the module
    docstring): UnknownOccurrence, StudyNotEnrolling once the occurrence's study has started,
    DuplicateConflict for a device charged another ε (or listed twice), BudgetExceeded naming
    the first device the budget refuses; all or nothing."""
    with ctx.transaction() as session:
        c = _require(session, campaign_id, lock=True)
        occurrence = rows.occurrence(session, campaign_id, index)
        if occurrence is None:
            raise UnknownOccurrence(f"campaign {campaign_id} has not opened occurrence {index}")
        study = studies.require_study(session, occurrence.study_id)
        if study.phase != "enrolling":
            raise StudyNotEnrolling(
                f"occurrence {index}'s study {study.id} is {study.phase}: too late to admit devices"
            )
        asked = [d.device for d in body.devices]
        if len(set(asked)) != len(asked):
            raise DuplicateConflict("a device is listed twice")
        window = budget_window(occurrence.day, c.budget_period)
        rule = _rule(c)
        compose = _composer(c)
        history: dict[str, list[DeviceSpendRow]] = defaultdict(list)
        charged: dict[str, float] = {}
        for s in rows.device_spends(session, campaign_id, asked):
            if s.occurrence == index:
                charged[s.device] = s.epsilon
            else:
                history[s.device].append(s)
        new: list[dict[str, object]] = []
        for d in body.devices:
            if d.device in charged:
                if charged[d.device] != d.epsilon:
                    raise DuplicateConflict(
                        f"device {d.device} declared ε = {charged[d.device]:g} for occurrence "
                        f"{index}, not {d.epsilon:g}"
                    )
                continue
            past = sorted(history[d.device], key=lambda s: s.occurrence)
            if compose is not None:  # the window's releases, composed at δ
                here = [s.epsilon for s in past if budget_window(s.day, c.budget_period) == window]
                spent = compose(here)
                charge = max(compose([*here, d.epsilon]) - spent, 0.0)
            else:
                declared = [s.epsilon for s in past]
                charges = _charges(rule, c.protocol, d.device, [*declared, d.epsilon])
                charge = charges[-1]
                spent = math.fsum(
                    ch
                    for s, ch in zip(past, charges, strict=False)
                    if budget_window(s.day, c.budget_period) == window
                )
            if c.budget_epsilon is not None and not within_budget(spent, charge, c.budget_epsilon):
                raise BudgetExceeded(
                    f"device {d.device} has spent ε = {spent:g} of its budget "
                    f"{c.budget_epsilon:g} in this window; occurrence {index} would charge "
                    f"{charge:g} more"
                )
            new.append(
                {
                    "campaign_id": campaign_id,
                    "device": d.device,
                    "occurrence": index,
                    "day": occurrence.day,
                    "epsilon": d.epsilon,
                }
            )
        rows.add_spends(session, new)
        return DeviceAdmission(occurrence=index, admitted=len(body.devices))


def device_budget(ctx: Context, campaign_id: str, device: str) -> DeviceBudgetView:
    """A device's charges over the campaign and what remains in the clock's window."""
    with ctx.transaction() as session:
        c = _require(session, campaign_id)
        spends = rows.spends_of(session, campaign_id, device)
        clock = c.clock if c.clock is not None else c.start
        charges, cumulative = _history_rule(c)(device, [(s.day, s.epsilon) for s in spends])
        in_window = _window_spend(
            c, [(s.day, s.epsilon) for s in spends], charges, budget_window(clock, c.budget_period)
        )
        total = cumulative[-1] if cumulative else 0.0
        return DeviceBudgetView(
            device=device,
            budget_epsilon=c.budget_epsilon,
            budget_period=c.budget_period,
            budget_delta=c.budget_delta,
            spent_total=total,
            spent_window=in_window,
            remaining=None if c.budget_epsilon is None else max(0.0, c.budget_epsilon - in_window),
            spends=[
                BudgetSpend(
                    occurrence=s.occurrence,
                    day=s.day,
                    epsilon=ch,
                    declared=s.epsilon,
                    cumulative=cu,
                )
                for s, ch, cu in zip(spends, charges, cumulative, strict=True)
            ],
        )


History = Callable[[str, list[tuple[float, float]]], tuple[list[float], list[float]]]
"""A device's charges by the campaign's rule: (device, its (day, declared ε) by occurrence) →
(each occurrence's charge, the device's cumulative spend after it)."""


def _history_rule(c: CampaignRow) -> History:
    """The campaign's rule over a device's whole history. Pure ε: each charge is the increase of
    the protocol's cumulative ε (``_rule``), the cumulative spend their sum. Central: each
    release's charge is the increase of its budget window's composed ε, the cumulative spend
    the composition of all the device's releases (a lifetime figure, not the sum of the
    charges)."""
    compose = _composer(c)
    if compose is None:
        rule = _rule(c)

        def pure(device: str, spends: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
            charges = _charges(rule, c.protocol, device, [e for _, e in spends])
            return charges, list(itertools.accumulate(charges))

        return pure
    composer = compose

    def central(device: str, spends: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
        windows = [budget_window(day, c.budget_period) for day, _ in spends]
        declared = [e for _, e in spends]
        charges: list[float] = []
        cumulative: list[float] = []
        for t, e in enumerate(declared):
            here = [p for p, w in zip(declared[:t], windows[:t], strict=True) if w == windows[t]]
            charges.append(max(composer([*here, e]) - composer(here), 0.0))
            cumulative.append(composer(declared[: t + 1]))
        return charges, cumulative

    return central


def _window_spend(
    c: CampaignRow, spends: list[tuple[float, float]], charges: list[float], window: int
) -> float:
    """A device's spend in budget ``window``: the sum of its charges there (pure ε), or the
    composition of its releases there (central)."""
    compose = _composer(c)
    inside = [budget_window(day, c.budget_period) == window for day, _ in spends]
    if compose is None:
        return math.fsum(ch for ch, i in zip(charges, inside, strict=True) if i)
    return compose([e for (_, e), i in zip(spends, inside, strict=True) if i])


def _composer(c: CampaignRow) -> Callable[[list[float]], float] | None:
    """For a central protocol's campaign: the composed ε at the campaign's δ of releases at the
    declared ε's (the module docstring); None for a pure-ε one."""
    protocol = CATALOGUE[c.protocol]
    params = protocol.parse_params(c.params)
    if c.budget_delta is None or protocol.release_event(params, 1.0) is None:
        return None
    from fedldp.protocol.core.accounting import composed_epsilon  # half a second: only here

    delta = c.budget_delta
    memo: dict[tuple[float, ...], float] = {}

    def compose(declared: list[float]) -> float:
        key = tuple(sorted(declared))  # composition commutes; devices share histories
        if key not in memo:
            memo[key] = composed_epsilon([protocol.release_event(params, e) for e in key], delta)
        return memo[key]

    return compose


def _rule(c: CampaignRow) -> Callable[[list[float]], float]:
    """The server's charge rule of the campaign's protocol: a device's cumulative ε after
    collections at the declared ε's, whatever its memoized states."""
    protocol = CATALOGUE[c.protocol]
    params = protocol.parse_params(c.params)
    return lambda declared: protocol.repeated_epsilon(params, declared)


def _charges(
    rule: Callable[[list[float]], float], protocol: str, device: str, declared: list[float]
) -> list[float]:
    """Each collection's charge: the increase of the rule's cumulative ε (InvalidRequest for
    declared ε's it does not cover)."""
    out: list[float] = []
    prior = 0.0
    for t in range(len(declared)):
        try:
            total = rule(declared[: t + 1])
        except ValueError as exc:
            raise InvalidRequest(f"device {device}: {exc}") from None
        out.append(max(total - prior, 0.0))
        prior = total
    return out

"""The campaign routes (docs/campaigns.md): create, list and view campaigns, open the next
occurrence (the driver advances the simulated clock), admit devices to an occurrence (the ledger
keyed by device), and a device's budget. Each parses, calls ``fedldp.server.services.campaigns``
and answers."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, status

from fedldp.protocol.core import wire
from fedldp.server.errors import (
    BudgetExceeded,
    CampaignComplete,
    CampaignExists,
    DuplicateConflict,
    InvalidParams,
    InvalidRequest,
    KeyUnavailable,
    StudyNotEnrolling,
    UnknownCampaign,
    UnknownOccurrence,
    UnknownProtocol,
)
from fedldp.server.services import campaigns
from fedldp.server.web.bodies import documented, json_body
from fedldp.server.web.routes import _ADMIN, _BODY, Admin, Ctx, _refusals

__all__ = ["campaign_router"]

campaign_router = APIRouter()

OccurrenceIndex = Annotated[int, Path(ge=0, le=wire.MAX_ID)]
DeviceId = Annotated[
    str, Path(min_length=1, max_length=wire.MAX_DEVICE, pattern=r"^[A-Za-z0-9_.:-]+$")
]


@campaign_router.post(
    "/v1/campaigns",
    status_code=status.HTTP_201_CREATED,
    dependencies=Admin,
    responses=_refusals(*_ADMIN, *_BODY, UnknownProtocol, InvalidParams, CampaignExists),
    tags=["campaigns"],
    openapi_extra=documented(wire.CampaignCreate),
)
def create_campaign(
    body: Annotated[wire.CampaignCreate, Depends(json_body(wire.CampaignCreate))], ctx: Ctx
) -> wire.CampaignView:
    """Create a campaign: a study template repeated ``times`` times, every ``every`` simulated
    days, with each device's ε budget (admin key needed when the server has one)."""
    return campaigns.create(ctx, body)


@campaign_router.get("/v1/campaigns", tags=["campaigns"])
def list_campaigns(ctx: Ctx) -> wire.CampaignList:
    return wire.CampaignList(campaigns=campaigns.list_all(ctx))


@campaign_router.get(
    "/v1/campaigns/{campaign_id}", responses=_refusals(UnknownCampaign), tags=["campaigns"]
)
def get_campaign(campaign_id: str, ctx: Ctx) -> wire.CampaignView:
    """The campaign, its clock and each occurrence's study, phase and estimate."""
    return campaigns.get(ctx, campaign_id)


@campaign_router.post(
    "/v1/campaigns/{campaign_id}/occurrences/next",
    dependencies=Admin,
    responses=_refusals(*_ADMIN, UnknownCampaign, CampaignComplete, KeyUnavailable),
    tags=["campaigns"],
)
def next_occurrence(campaign_id: str, ctx: Ctx) -> wire.OccurrenceView:
    """The open occurrence, or the next one opened once the last has ended (its day becomes
    the campaign's clock); ``campaign_complete`` after the last."""
    return campaigns.next_occurrence(ctx, campaign_id)


@campaign_router.put(
    "/v1/campaigns/{campaign_id}/occurrences/{index}/truth",
    dependencies=Admin,
    responses=_refusals(*_ADMIN, *_BODY, UnknownCampaign, UnknownOccurrence),
    tags=["campaigns"],
    openapi_extra=documented(wire.OccurrenceTruth),
)
def declare_truth(
    campaign_id: str,
    index: OccurrenceIndex,
    body: Annotated[wire.OccurrenceTruth, Depends(json_body(wire.OccurrenceTruth))],
    ctx: Ctx,
) -> wire.OccurrenceView:
    """Record the truth of an occurrence's population (the day's law's mean or item
    frequencies) as the driver that simulates it declares it: the server cannot know it, and
    shows it beside the estimate. Declaring it again replaces it."""
    return campaigns.declare_truth(ctx, campaign_id, index, body)


@campaign_router.post(
    "/v1/campaigns/{campaign_id}/occurrences/{index}/devices",
    dependencies=Admin,
    responses=_refusals(
        *_ADMIN,
        *_BODY,
        UnknownCampaign,
        UnknownOccurrence,
        StudyNotEnrolling,
        DuplicateConflict,
        BudgetExceeded,
        InvalidRequest,
    ),
    tags=["campaigns"],
    openapi_extra=documented(wire.DeviceBatch),
)
def admit_devices(
    campaign_id: str,
    index: OccurrenceIndex,
    body: Annotated[wire.DeviceBatch, Depends(json_body(wire.DeviceBatch))],
    ctx: Ctx,
) -> wire.DeviceAdmission:
    """Charge each device the ε it declares for the occurrence (once; again: the same answer),
    all or nothing: ``budget_exceeded`` names the first device its budget refuses."""
    return campaigns.admit(ctx, campaign_id, index, body)


@campaign_router.get(
    "/v1/campaigns/{campaign_id}/devices/{device}/budget",
    responses=_refusals(UnknownCampaign, InvalidRequest),
    tags=["campaigns"],
)
def device_budget(campaign_id: str, device: DeviceId, ctx: Ctx) -> wire.DeviceBudgetView:
    """A device's charges over the campaign (occurrence, day, ε) and what is left of its budget
    in the window holding the campaign's clock."""
    return campaigns.device_budget(ctx, campaign_id, device)

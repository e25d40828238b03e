"""The repository of campaigns (SQL only; the rules are in ``fedldp.server.services.campaigns``):
campaign rows, their occurrences and the devices' ε ledger."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from fedldp.server.store.tables import CampaignRow, DeviceSpendRow, OccurrenceRow, StudyRow

__all__ = [
    "add_campaign",
    "add_occurrence",
    "add_spends",
    "all_campaigns",
    "all_spends",
    "campaign",
    "campaign_named",
    "device_spends",
    "locked_campaign",
    "occurrence",
    "occurrences",
    "set_clock",
    "set_occurrence_study",
    "set_truth",
    "spends_of",
]

_IN_CHUNK = 500
"""Device ids per ``IN (…)`` list (SQLite allows 32766 bound parameters; this stays far below)."""


def add_campaign(session: Session, row: CampaignRow) -> None:
    session.add(row)
    session.flush()


def campaign(session: Session, campaign_id: str) -> CampaignRow | None:
    return session.get(CampaignRow, campaign_id)


def locked_campaign(session: Session, campaign_id: str) -> CampaignRow | None:
    """The campaign row, locked to the end of the transaction (PostgreSQL; SQLite's transactions
    are serialized at BEGIN IMMEDIATE), so that budget checks and charges of one campaign never
    interleave."""
    stmt = select(CampaignRow).where(CampaignRow.id == campaign_id).with_for_update()
    return session.execute(stmt).scalar_one_or_none()


def campaign_named(session: Session, name: str) -> CampaignRow | None:
    return session.execute(select(CampaignRow).where(CampaignRow.name == name)).scalar_one_or_none()


def all_campaigns(session: Session) -> list[CampaignRow]:
    return list(session.scalars(select(CampaignRow).order_by(CampaignRow.created_at)))


def occurrences(session: Session, campaign_id: str) -> list[tuple[OccurrenceRow, StudyRow]]:
    """The campaign's occurrences in order, each with its study."""
    stmt = (
        select(OccurrenceRow, StudyRow)
        .join(StudyRow, StudyRow.id == OccurrenceRow.study_id)
        .where(OccurrenceRow.campaign_id == campaign_id)
        .order_by(OccurrenceRow.index)
    )
    return [(o, s) for o, s in session.execute(stmt)]


def occurrence(session: Session, campaign_id: str, index: int) -> OccurrenceRow | None:
    return session.get(OccurrenceRow, (campaign_id, index))


def add_occurrence(session: Session, row: OccurrenceRow) -> None:
    session.add(row)
    session.flush()


def set_occurrence_study(session: Session, campaign_id: str, index: int, study_id: str) -> None:
    """Point occurrence ``index`` at another study (an occurrence opened again)."""
    session.execute(
        update(OccurrenceRow)
        .where(OccurrenceRow.campaign_id == campaign_id, OccurrenceRow.index == index)
        .values(study_id=study_id)
    )


def set_truth(session: Session, campaign_id: str, index: int, truth: object) -> None:
    """Record the declared truth of occurrence ``index``."""
    session.execute(
        update(OccurrenceRow)
        .where(OccurrenceRow.campaign_id == campaign_id, OccurrenceRow.index == index)
        .values(truth=truth)
    )


def all_spends(session: Session, campaign_id: str) -> list[tuple[str, int, float, float]]:
    """Every charge in the campaign as (device, occurrence, day, declared ε), by device and
    occurrence."""
    stmt = (
        select(
            DeviceSpendRow.device,
            DeviceSpendRow.occurrence,
            DeviceSpendRow.day,
            DeviceSpendRow.epsilon,
        )
        .where(DeviceSpendRow.campaign_id == campaign_id)
        .order_by(DeviceSpendRow.device, DeviceSpendRow.occurrence)
    )
    return [(str(d), int(k), float(t), float(e)) for d, k, t, e in session.execute(stmt)]


def set_clock(session: Session, campaign_id: str, day: float) -> None:
    """Move the campaign's simulated clock to ``day``."""
    session.execute(update(CampaignRow).where(CampaignRow.id == campaign_id).values(clock=day))


def device_spends(
    session: Session, campaign_id: str, devices: Sequence[str]
) -> list[DeviceSpendRow]:
    """Every charge of ``devices`` in the campaign."""
    out: list[DeviceSpendRow] = []
    for start in range(0, len(devices), _IN_CHUNK):
        chunk = list(devices[start : start + _IN_CHUNK])
        stmt = select(DeviceSpendRow).where(
            DeviceSpendRow.campaign_id == campaign_id, DeviceSpendRow.device.in_(chunk)
        )
        out.extend(session.scalars(stmt))
    return out


def spends_of(session: Session, campaign_id: str, device: str) -> list[DeviceSpendRow]:
    """One device's charges in the campaign, by occurrence."""
    stmt = (
        select(DeviceSpendRow)
        .where(DeviceSpendRow.campaign_id == campaign_id, DeviceSpendRow.device == device)
        .order_by(DeviceSpendRow.occurrence)
    )
    return list(session.scalars(stmt))


def add_spends(session: Session, rows: Sequence[dict[str, object]]) -> None:
    """Charge devices (one bulk insert of ``device_spends`` rows given as column mappings)."""
    if rows:
        session.execute(insert(DeviceSpendRow), list(rows))

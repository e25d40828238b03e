"""A campaign's template: a study (protocol, parameters), a population, a schedule, a budget.

The schedule is ``every`` (a duration written ``1d``, ``12h``, ``90m`` or ``30s``) and ``times``
(the number of occurrences); occurrence k runs on the simulated day ``start + k·every``, counted
in days. Every occurrence enrolls the same devices (the population's slots under one private seed)
that the budget admits (``fedldp.client.campaign.budget``). A central-trust protocol's (ε, δ)
releases are composed at the budget's ``delta``, which it must declare (and a local protocol
must not: its budget is pure ε).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fedldp.client.campaign.budget import DeviceBudget, parse_every
from fedldp.client.population.spec import PopulationSpec
from fedldp.protocol.catalogue import get_protocol

__all__ = ["CampaignTemplate", "load_template", "parse_every"]


class CampaignTemplate(BaseModel):
    """What a campaign repeats and when (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: str = Field(description="the catalogue protocol every occurrence runs")
    params: dict[str, Any] = Field(default_factory=dict, description="its parameters")
    population: PopulationSpec = Field(description="the devices (one private seed: same devices)")
    every: float = Field(description="days between occurrences (written 1d, 12h, ...)")
    times: int = Field(ge=1, le=10_000, description="number of occurrences")
    start: float = Field(0.0, ge=0, description="the simulated day of occurrence 0")
    budget: DeviceBudget | None = Field(None, description="each device's ε budget")

    @field_validator("every", mode="before")
    @classmethod
    def _every(cls, v: Any) -> float:
        return parse_every(v)

    @model_validator(mode="after")
    def _protocol(self) -> CampaignTemplate:
        protocol = get_protocol(self.protocol)  # ValueError naming the known ones
        delta = None if self.budget is None else self.budget.delta
        if protocol.trust == "central" and delta is None:
            raise ValueError(
                f"{self.protocol} releases central (ε, δ)-DP estimates: its campaign's budget "
                "states ε at a δ, so it needs budget.epsilon and budget.delta "
                "(docs/campaigns.md)"
            )
        if protocol.trust != "central" and delta is not None:
            raise ValueError(
                f"{self.protocol} is charged pure ε (basic composition or its memo rule): "
                "budget.delta applies only to central protocols' (ε, δ) releases"
            )
        if self.population.csv is not None:
            raise ValueError("a campaign's population is a synthetic law, not a CSV file")
        return self

    def day(self, occurrence: int) -> float:
        """The simulated day occurrence ``occurrence`` runs on."""
        return self.start + occurrence * self.every


def _underscored(raw: Any) -> Any:
    """Mapping keys written with ``-`` (as flags are) turned into field names, at every depth
    but a protocol's parameters (which are its own names)."""
    if not isinstance(raw, dict):
        return raw
    return {
        str(k).replace("-", "_"): v if k == "params" else _underscored(v) for k, v in raw.items()
    }


def load_template(path: Path) -> CampaignTemplate:
    """The campaign template in a YAML or JSON file (ValueError saying what is wrong)."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ValueError(f"cannot read campaign file {path}: {e.strerror}") from None
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"campaign file {path} is not valid: {e}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"campaign file {path} must hold a mapping")
    return CampaignTemplate.model_validate(_underscored(raw))

"""Audit trials: an experiment of ``kind: audit`` runs, per trial, the empirical privacy audit
of one randomizer (``fedldp.protocol.mechanisms.audit``) instead of a simulation.

The trial's ``protocol`` names an audit case of ``fedldp.protocol.catalogue.AUDITS`` (a
randomizer on its worst-case neighbouring inputs) and its ``params`` are ``AuditParams``; the
seed seeds the draws. Its row holds the audit (``epsilon``, ``loss``, ``lower``, ``upper``,
``bins``, ``draws``, ``confidence``), ``tight`` (1 when the case's loss reaches ε) and the two
ratios the claims read: ``lower_ratio`` = lower/ε (≤ 1 for an ε-LDP randomizer, > 1 when the
audit catches too little noise) and ``upper_ratio`` = upper/ε (≥ 1 for a tight randomizer).

``collections`` = T > 1 audits the transcript of T reports of one device (a case of a repeated
collection, ``AuditCase.repeated``: docs/longitudinal.md); such a row also holds
``collections`` and, when the case knows it, ``exact``, the exact privacy loss of the audited
statistic's law at (ε, T) (empty when infinite: a value one input never produces).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fedldp.protocol.catalogue import get_audit
from fedldp.protocol.mechanisms.audit import run_audit

__all__ = ["AuditParams", "audit_row"]


class AuditParams(BaseModel):
    """The settings of one audit trial (user-level-ldp.md §4.2 TP3: 10⁶ draws, 40 bins,
    Clopper–Pearson at 99.9 %; ``noise`` 0.5 is its negative control)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    epsilon: float = Field(gt=0, description="the ε the randomizer claims (and is run at)")
    draws: int = Field(1_000_000, ge=100, le=20_000_000, description="draws on each input")
    noise: float = Field(
        1.0,
        gt=0,
        description="fraction of the noise scale the randomizer runs with (< 1: a "
        "negative control, run at ε/noise while the audit claims ε)",
    )
    bins: int = Field(40, ge=2, le=1000, description="bins of equal probability per input")
    confidence: float = Field(0.999, gt=0, lt=1, description="the audit's joint confidence")
    collections: int = Field(
        1,
        ge=1,
        le=4096,
        description="T: audit the transcript of T reports of one device (a case of a repeated "
        "collection only)",
    )


def audit_row(case: str, params: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The result columns of one audit trial."""
    audit_case = get_audit(case)
    p = AuditParams.model_validate(params)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xA0D17]))
    audit = run_audit(
        audit_case,
        p.epsilon,
        draws=p.draws,
        rng=rng,
        noise=p.noise,
        bins=p.bins,
        confidence=p.confidence,
        collections=p.collections,
    )
    repeated: dict[str, Any] = {}
    if audit_case.repeated is not None:
        repeated["collections"] = p.collections
        if audit_case.exact is not None:
            exact = audit_case.exact(p.epsilon, p.collections)
            if math.isfinite(exact):  # an infinite loss leaves the cell empty
                repeated["exact"] = exact
    return {
        **audit.as_json(),
        **repeated,
        "noise": p.noise,
        "tight": int(audit_case.tight),
        "lower_ratio": audit.lower / audit.epsilon,
        "upper_ratio": audit.upper / audit.epsilon,
    }

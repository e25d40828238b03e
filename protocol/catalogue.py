"""The protocol catalogue: every protocol the server and the simulator can run, by name."""

from __future__ import annotations

from typing import Any

from fedldp.protocol.central import protocols as central
from fedldp.protocol.core.base.protocol import Protocol
from fedldp.protocol.heterogeneous import audit as hetero_audit
from fedldp.protocol.heterogeneous import frequency as hetero_frequency
from fedldp.protocol.heterogeneous import means as hetero_means
from fedldp.protocol.mechanisms.audit import AuditCase, ClientAudit
from fedldp.protocol.semi_feature import audit as semi_feature_audit
from fedldp.protocol.semi_feature import hist_ldp, histoftree, tree_baselines
from fedldp.protocol.user_level import audit as user_level_audit
from fedldp.protocol.user_level import baselines as user_level_baselines
from fedldp.protocol.user_level import binned, multi_d, sgd
from fedldp.protocol.user_level import means as user_level

__all__ = [
    "AUDITS",
    "AUDIT_EXEMPT",
    "CATALOGUE",
    "CLIENT_AUDITS",
    "get_audit",
    "get_protocol",
]

CATALOGUE: dict[str, Protocol[Any]] = {
    p.name: p
    for p in (
        *user_level.PROTOCOLS,
        *user_level_baselines.PROTOCOLS,
        *multi_d.PROTOCOLS,
        *sgd.PROTOCOLS,
        *binned.PROTOCOLS,
        *histoftree.PROTOCOLS,
        *hist_ldp.PROTOCOLS,
        *tree_baselines.PROTOCOLS,
        *central.PROTOCOLS,
        *hetero_means.PROTOCOLS,
        *hetero_frequency.PROTOCOLS,
    )
}


def get_protocol(name: str) -> Protocol[Any]:
    """The protocol called ``name``; ValueError naming the known ones otherwise."""
    try:
        return CATALOGUE[name]
    except KeyError:
        known = ", ".join(sorted(CATALOGUE))
        raise ValueError(f"unknown protocol {name!r}; known protocols: {known}") from None


AUDITS: dict[str, AuditCase] = {c.name: c for c in (*user_level_audit.AUDITS, *hetero_audit.AUDITS)}
"""Every randomizer with an empirical privacy audit (``fedldp.protocol.mechanisms.audit``), by
name: a family adds its cases (a module's ``AUDITS`` tuple) here."""


def get_audit(name: str) -> AuditCase:
    """The audit case called ``name``; ValueError naming the known ones otherwise."""
    try:
        return AUDITS[name]
    except KeyError:
        known = ", ".join(sorted(AUDITS))
        raise ValueError(f"unknown audit case {name!r}; known audit cases: {known}") from None


CLIENT_AUDITS: dict[str, tuple[ClientAudit, ...]] = {}
"""The end-to-end privacy audits of every local protocol, by protocol name: its own client step
in every round kind, on its worst-case neighbours (``ClientAudit``; the cases live with their
families' ``audit`` modules)."""
for _case in (
    *user_level_audit.CLIENT_AUDITS,
    *hetero_audit.CLIENT_AUDITS,
    *semi_feature_audit.CLIENT_AUDITS,
):
    CLIENT_AUDITS[_case.protocol] = (*CLIENT_AUDITS.get(_case.protocol, ()), _case)

AUDIT_EXEMPT: dict[str, str] = {
    p.name: (
        "central trust: each participant sends its clear local mean to a trusted server, which "
        "adds the noise to the release (central DP of the estimate); the report makes no LDP "
        "claim to audit"
    )
    for p in central.PROTOCOLS
}
"""Catalogue protocols without an end-to-end audit, with the reason: exactly the central-trust
ones (tests/protocol/test_client_audit.py checks it, so a new local protocol cannot go
unaudited)."""

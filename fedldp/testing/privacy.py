"""The kit's privacy check: the protocol's own client step passes the end-to-end audit
(``fedldp.protocol.mechanisms.audit``) at the ε its plan charges, on worst-case neighbouring
datasets, at each of the kit's ε's.

The neighbouring datasets are the protocol's to give: ``check_protocol(audits=...)``, else the
protocol's ``client_audits()`` hook, else (a catalogue protocol, or a subclass of one) the
catalogue's cases (``fedldp.protocol.catalogue.CLIENT_AUDITS``) with the client step of the
protocol under test in place of the catalogue's. Central-trust protocols make no local claim and
are exempt (``AUDIT_EXEMPT``).

The kit's second privacy check (``check_marginals``) runs on the same cases, without their
statistics: the marginal audit (``fedldp.protocol.mechanisms.marginal_audit``) of each report
coordinate and of the whole report, so a leak in a part of the report the case's statistic does
not look at fails too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedldp.protocol.catalogue import AUDIT_EXEMPT, CATALOGUE, CLIENT_AUDITS
from fedldp.protocol.core.base.protocol import Protocol
from fedldp.protocol.mechanisms.audit import ClientAudit, ClientStep, run_client_audit
from fedldp.protocol.mechanisms.marginal_audit import DRAWS as MARGINAL_DRAWS
from fedldp.protocol.mechanisms.marginal_audit import run_marginal_audit
from fedldp.testing.local import CheckFailed, CheckSkipped, ensure

__all__ = ["AUDIT_HOOK", "NoAudits", "check_marginals", "check_privacy", "client_audits"]

AUDIT_HOOK = "client_audits"
"""The protocol's hook: ``client_audits()`` (a method, classmethod or staticmethod) returns its
``ClientAudit`` cases, one per round kind (``fedldp.protocol.mechanisms.audit``)."""


class NoAudits(CheckFailed):
    """A local-trust protocol without neighbouring datasets to audit it on."""


def _retargeted(case: ClientAudit, protocol: Protocol[Any]) -> ClientAudit:
    """``case`` auditing ``protocol``'s client step (its plan and broadcasts as the case makes
    them)."""

    def setup(epsilon: float) -> ClientStep:
        return dataclasses.replace(case.setup(epsilon), protocol=protocol)

    return dataclasses.replace(case, setup=setup)


def client_audits(
    protocol: Protocol[Any], audits: Sequence[ClientAudit] | None = None
) -> tuple[ClientAudit, ...] | None:
    """The cases to audit ``protocol`` on (module docstring), or None when it is exempt;
    ``NoAudits`` when a local protocol has none."""
    if audits is not None:
        found: tuple[ClientAudit, ...] = tuple(audits)
    elif callable(hook := getattr(protocol, AUDIT_HOOK, None)):
        found = tuple(hook())
    elif (built := CATALOGUE.get(protocol.name)) is not None and isinstance(protocol, type(built)):
        if protocol.name in AUDIT_EXEMPT and protocol.trust == "central":
            return None
        found = tuple(_retargeted(case, protocol) for case in CLIENT_AUDITS.get(protocol.name, ()))
    elif protocol.trust == "central":
        return None
    else:
        found = ()
    if not found:
        raise NoAudits(
            f"{protocol.name} makes a local privacy claim but the kit has no neighbouring "
            f"datasets to audit it on: pass check_protocol(audits=[ClientAudit(...), ...]) or "
            f"give the protocol a {AUDIT_HOOK}() returning them (one ClientAudit per round "
            "kind: a setup planning a study at ε, the audited participant's two worst-case "
            "neighbouring datasets and a statistic; fedldp.protocol.mechanisms.audit)"
        )
    return found


def _cases(
    protocol: Protocol[Any], audits: Sequence[ClientAudit] | None
) -> tuple[ClientAudit, ...]:
    cases = client_audits(protocol, audits)
    if cases is None:
        raise CheckSkipped(
            f"exempt: {AUDIT_EXEMPT.get(protocol.name, 'central trust: no local claim')}"
        )
    return cases


def check_privacy(
    protocol: Protocol[Any],
    audits: Sequence[ClientAudit] | None,
    epsilons: Sequence[float],
    *,
    draws: int,
    seed: int,
    confidence: float,
) -> str:
    """Every case at every ε (``CheckSkipped`` for an exempt protocol): the audited reports
    pass the protocol's checks, the audit's ε is what the plan charges the participant in that
    round (the ledger), its lower bound stays at or below that ε, and a tight case's upper bound
    reaches it (the audit has the power to see a leak)."""
    cases = _cases(protocol, audits)
    worst = 0.0
    for case in cases:
        for eps in epsilons:
            step = case.setup(eps)
            where = f"{case.name} at ε={eps:g}"
            ensure(step.protocol is protocol, f"{where}: the case audits another protocol object")
            rp = step.plan.rounds[step.round]
            charged = rp.epsilon[np.flatnonzero(rp.cohort == step.slot)]
            ensure(
                charged.size == 1 and float(charged[0]) == step.epsilon,
                f"{where}: the audited ε {step.epsilon:g} is not what the plan charges",
            )
            for data in (case.a, case.b):
                rows = step.privatize(data, 16, seed).reshape(16, *rp.payload_shape)
                ok = protocol.check(step.params, step.task, np.full(16, step.epsilon), rows)
                ok &= protocol.check_members(
                    step.params, step.plan, step.task, np.full(16, step.slot), rows
                )
                ensure(bool(np.all(ok)), f"{where}: the audited reports fail the protocol's check")
            audit = run_client_audit(case, eps, draws=draws, seed=seed, confidence=confidence)
            ensure(
                audit.lower <= audit.epsilon,
                f"{where}: the reports are distinguishable beyond the charged ε={audit.epsilon:g} "
                f"(loss at least {audit.lower:.3g} at confidence {confidence:g}; point "
                f"estimate {audit.loss:.3g})",
            )
            ensure(
                not case.tight or audit.upper >= audit.epsilon,
                f"{where}: a tight case whose loss stays below its charge ε={audit.epsilon:g} "
                f"(at most {audit.upper:.3g}): the statistic or the neighbours are not the "
                "worst case, or the step adds more noise than its charge needs",
            )
            worst = max(worst, audit.lower / audit.epsilon)
    return (
        f"{len(cases)} case(s) at ε {', '.join(f'{e:g}' for e in epsilons)}: largest "
        f"lower bound {worst:.2f}·ε"
    )


def check_marginals(
    protocol: Protocol[Any],
    audits: Sequence[ClientAudit] | None,
    epsilons: Sequence[float],
    *,
    draws: int,
    seed: int,
    confidence: float,
) -> str:
    """Every case at every ε (``CheckSkipped`` for an exempt protocol) passes the marginal audit
    (``run_marginal_audit``, at most ``MARGINAL_DRAWS`` of ``draws`` reports per dataset): no
    event of one report coordinate, or of the whole report, tells the case's neighbours apart
    beyond the ε the plan charges, at ``confidence``. (Whether that ε is the plan's charge, and
    the reports pass the protocol's checks, is ``check_privacy``'s to say.)"""
    cases = _cases(protocol, audits)
    worst = 0.0
    for case in cases:
        for eps in epsilons:
            step = case.setup(eps)
            audit = run_marginal_audit(
                step,
                case.a,
                case.b,
                seed=seed,
                draws=min(draws, MARGINAL_DRAWS),
                confidence=confidence,
            )
            ensure(
                audit.lower <= audit.epsilon,
                f"{case.name} at ε={eps:g}: the marginal audit tells the neighbours apart beyond "
                f"the charged ε={audit.epsilon:g} on {audit.where} (loss at least "
                f"{audit.lower:.3g} at confidence {confidence:g}; point estimate "
                f"{audit.loss:.3g}): a leak the case's statistic does not look at, or too little "
                "noise",
            )
            worst = max(worst, audit.lower / audit.epsilon)
    return (
        f"{len(cases)} case(s) at ε {', '.join(f'{e:g}' for e in epsilons)}: largest lower "
        f"bound on a marginal's loss {worst:.2f}·ε"
    )

"""``check_protocol``: run every check of the kit on one protocol (the package docstring of
``fedldp.testing`` is the guide)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fedldp.client.population.build import AnyPopulation, PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population
from fedldp.protocol.core.base.protocol import Protocol
from fedldp.protocol.mechanisms.audit import ClientAudit
from fedldp.testing.local import (
    CheckFailed,
    CheckSkipped,
    Subject,
    check_chunking,
    check_describe,
    check_ledger,
    check_pickle,
    check_reports,
    check_same_seed,
    simulate_subject,
)
from fedldp.testing.privacy import check_marginals, check_privacy
from fedldp.testing.report import CheckResult, KitReport
from fedldp.testing.served import KitServer, check_create, check_http

__all__ = ["AUDIT_EPSILONS", "CHECKS", "HTTP_BATCH", "check_protocol"]

CHECKS: tuple[str, ...] = (
    "same-seed",
    "http-per-user",
    "http-batch",
    "privacy-audit",
    "privacy-marginals",
    "ledger",
    "report-checks",
    "chunking",
    "create-refusals",
    "pickle",
    "describe",
)
"""Every check's name, in the order ``check_protocol`` runs them."""

HTTP = frozenset({"http-per-user", "http-batch"})
"""The checks that need a running server."""

AUDIT_EPSILONS = (1.0, 2.0)
"""The ε's every participant of an audited study enrolls with (the catalogue's cases plan at
ε >= 1 with their background populations)."""

HTTP_BATCH = 100
"""Reports per request of the batch HTTP check."""


def check_protocol(
    protocol: Protocol[Any],
    *,
    population: PopulationSpec | AnyPopulation,
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
    server: KitServer | str | None = None,
    http: bool = True,
    audits: Sequence[ClientAudit] | None = None,
    epsilons: Sequence[float] = AUDIT_EPSILONS,
    draws: int = 50_000,
    confidence: float = 0.999,
    invalid_params: Sequence[Mapping[str, Any]] = (),
    only: Sequence[str] | None = None,
    strict: bool = False,
) -> KitReport:
    """Run the kit's checks on ``protocol`` (module docstring of ``fedldp.testing``).

    ``population``: a ``PopulationSpec`` (built for ``seed``) or a population built for it;
    ``params``: the study's raw parameters (what the population determines is filled in);
    ``server``: a running ``KitServer`` or a server URL for the HTTP checks (default: one is
    started for this call); ``http=False`` skips them. ``audits``: the privacy check's cases
    (default: the protocol's ``client_audits()`` hook, else the catalogue's); ``epsilons``,
    ``draws``, ``confidence``: the audit's. ``invalid_params``: more parameter sets the create
    route must refuse. ``only``: run just these checks (names of ``CHECKS``). ``strict``: raise
    ``ProtocolCheckError`` naming the failed checks instead of returning the report."""
    wanted = list(CHECKS if only is None else only)
    unknown = sorted(set(wanted) - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown checks {unknown}; the kit's checks: {', '.join(CHECKS)}")
    pop = (
        build_population(population, seed) if isinstance(population, PopulationSpec) else population
    )
    raw = fill_from_population(protocol, dict(params or {}), pop)
    results: list[CheckResult] = []
    subject: Subject | None = None
    broken = ""  # why the in-process run fails: every check but the privacy audit needs it
    try:
        run = simulate_subject(protocol, raw, pop, pop.seed)
        subject = Subject(protocol, raw, protocol.parse_params(raw), pop, pop.seed, run)
    except Exception as exc:  # the protocol's own error is the finding
        broken = f"the in-process run fails: {type(exc).__name__}: {exc}"
    own: KitServer | None = None

    def ran() -> Subject:
        if subject is None:
            raise CheckFailed(broken)
        return subject

    checks: dict[str, Callable[[], str]] = {
        "same-seed": lambda: check_same_seed(ran()),
        "http-per-user": lambda: check_http(ran(), url(), None),
        "http-batch": lambda: check_http(ran(), url(), HTTP_BATCH),
        "privacy-audit": lambda: check_privacy(
            protocol, audits, epsilons, draws=draws, seed=seed, confidence=confidence
        ),
        "privacy-marginals": lambda: check_marginals(
            protocol, audits, epsilons, draws=draws, seed=seed, confidence=confidence
        ),
        "ledger": lambda: check_ledger(ran()),
        "report-checks": lambda: check_reports(ran()),
        "chunking": lambda: check_chunking(ran()),
        "create-refusals": lambda: check_create(ran(), list(invalid_params)),
        "pickle": lambda: check_pickle(ran()),
        "describe": lambda: check_describe(ran()),
    }

    def url() -> str:
        nonlocal own
        if isinstance(server, str):
            return server
        if server is not None:
            return server.url
        if own is None:
            own = KitServer().start()
        return own.url

    try:
        for name in CHECKS:
            if name not in wanted:
                continue
            if name in HTTP and not http:
                results.append(CheckResult(name, "skipped", "http=False"))
                continue
            results.append(_one(name, checks[name]))
    finally:
        if own is not None:
            own.close()
    return _done(KitReport(protocol.name, tuple(results)), strict)


def _one(name: str, check: Callable[[], str]) -> CheckResult:
    began = time.perf_counter()
    try:
        covered = check()
    except CheckFailed as exc:
        return CheckResult(name, "failed", str(exc))
    except CheckSkipped as exc:
        return CheckResult(name, "skipped", str(exc))
    except Exception as exc:  # a protocol step that raises is a failure of the check
        return CheckResult(name, "failed", f"{type(exc).__name__}: {exc}")
    return CheckResult(name, "passed", f"{covered} [{time.perf_counter() - began:.1f} s]")


def _done(report: KitReport, strict: bool) -> KitReport:
    return report.raise_for_failures() if strict else report

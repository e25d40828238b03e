"""fedldp.testing: the conformance kit every protocol must pass (issue 25, "Bring your own
protocol"), in the manner of scikit-learn's ``check_estimator``.

Use
---
::

    from fedldp.client.population.api import PopulationSpec
    from fedldp.testing import check_protocol

    report = check_protocol(
        MyProtocol(),
        population=PopulationSpec(users=600, samples=16, distribution="two-point"),
        params={"bound": 1.0},
        seed=0,
    )
    print(report)                  # every check by name: passed, failed or skipped, and why
    report.raise_for_failures()    # ProtocolCheckError (an AssertionError) naming the failures

``check_protocol(protocol, *, population, params=None, seed=0, server=None, http=True,
audits=None, epsilons=AUDIT_EPSILONS, draws=50_000, confidence=0.999, invalid_params=(),
only=None, strict=False) -> KitReport``:

* ``population``: a ``PopulationSpec`` (built for ``seed``) or a population built for it, of
  the protocol's data kind and large enough for its plan (``min_participants``); parameters the
  population determines (``samples_per_user``, ``dimension``, ...) are filled into ``params``
  as ``fedldp simulate`` fills them (``fedldp.client.simulate.fill_from_population``);
* ``server``: a running ``KitServer`` (or a server URL) for the HTTP checks; without one, a
  server is started for the call and stopped after it; ``http=False`` skips those checks;
* ``audits``, ``epsilons``, ``draws``, ``confidence``: the privacy check's (below);
* ``invalid_params``: parameter sets the create route must refuse, besides the kit's own;
* ``only``: the names of the checks to run (default all); ``strict=True`` raises
  ``ProtocolCheckError`` instead of returning a report with failures.

A ``KitReport`` lists a ``CheckResult(name, status, reason)`` per check (``report["ledger"]``,
``report.failures``, ``report.ok``); a check passes, fails (the reason says what broke), or is
skipped (``http=False``; the privacy audit of a central-trust protocol). A protocol step that
raises fails the check it raised in.
Call it from synchronous code (it runs its own event loops).

The checks (``CHECKS``, in this order)
--------------------------------------
``same-seed``
    Two in-process runs (``fedldp.client.simulate.simulate``) with the seed agree to the last
    digit.
``http-per-user``, ``http-batch``
    A real server (``python -m fedldp.server`` on a temporary SQLite file,
    ``fedldp.client.swarm.server_process``) driven by the swarm (``run_swarm``) per user and in
    batches of ``HTTP_BATCH``: the estimate equals the simulator's to the last digit. The server
    and the swarm run the protocol their catalogue names, so the protocol must be registered
    under its name (a protocol object of another class fails these checks, saying so).
``privacy-audit``
    The protocol's own client step (``privatize``) in every round kind passes the end-to-end
    audit (``fedldp.protocol.mechanisms.audit.run_client_audit``) at every ε of ``epsilons``
    (each participant of the audited study enrolls at it), at the ε its plan charges the audited
    participant (what the ledger records): the audit's lower bound on the privacy loss stays at
    or below that charge, and a case declared tight reaches it (the audit could see a leak). Its
    cases: ``audits=`` (a list of ``ClientAudit``), else the protocol's hook ``client_audits()``
    (``AUDIT_HOOK``: a method returning them), else, for a catalogue protocol or a subclass of
    one, ``fedldp.protocol.catalogue.CLIENT_AUDITS`` (the catalogue's plans and broadcasts, the
    client step of the protocol under test). A local-trust protocol with none fails, saying what
    to provide; central-trust protocols are exempt (``AUDIT_EXEMPT``: skipped, with the
    reason). A ``ClientAudit`` holds a ``setup(epsilon)`` that plans a study at ε and returns
    the audited participant's step (``client_step``), that participant's two worst-case
    neighbouring datasets (``one_user``) and a scalar statistic of a report (``scaled_loss``
    for Laplace reports). The audit's false-failure probability is at most 1 − ``confidence``
    per case and ε (fixed seeds: a given protocol passes or fails every time).
``privacy-marginals``
    The same cases and ε's without their statistics: the marginal audit
    (``fedldp.protocol.mechanisms.marginal_audit.run_marginal_audit``, 2 000 pilot reports and
    ``min(draws, 20 000)`` audited reports per dataset) of the client step's reports at the
    charged ε. For each report coordinate (the 16 whose pilot laws differ most, in a wider
    report), and for the whole report when it takes at most 32 distinct values, it bounds the
    privacy loss of the events "equals v" (a target with few values) or "≤ t", "> t" at 15
    pooled quantiles t (a coordinate with many), and fails when the lower confidence bound on
    any of them exceeds the charge. The events are fixed on the pilot, so the counts are
    binomial. Clopper–Pearson bounds with a Bonferroni correction over the events, directions
    and counts keep the false-failure probability at most 1 − ``confidence`` per case and ε.
    This catches a leak the case's statistic ignores, such as a report coordinate computed from
    the data that the statistic never reads. It cannot see a leak only several coordinates show
    together, such as a Laplace vector at twice its charge split across d coordinates (each
    coordinate loses 2ε/d), or a leak on an event finer than its thresholds. A protocol still
    needs a statistic for its mechanism's worst case in ``privacy-audit``.
``ledger``
    With the population's ε's and with unequal ones (every other participant at twice its ε),
    every round charges each cohort member a finite ε > 0 no larger than its own, and nobody's
    charges over the plan's rounds add up to more than its declared ε
    (``fedldp.protocol.core.ledger``); the same plan twice charges the same. (The protocol
    contract states how unequal ε's combine only in words, its ``heterogeneity``: nothing more
    is checked.)
``report-checks``
    Every round of the run: the honest reports pass the server's checks (``check``,
    ``check_members``, the plausibility bounds of ``report_bounds``, as
    ``fedldp.server.services.ingest`` applies them); a report holding NaN or ±inf, or of the
    wrong shape, is refused; where the protocol declares report bounds, the output attacker's
    crafted report (``fedldp.client.behaviour``: the upper bound itself) lies within them and a
    report just past either bound, on each of the first ``OUTSIDE_COORDINATES`` coordinates, is
    refused. Whether the protocol's own checks accept the crafted report is reported.
``chunking``
    Every round's reports, in participant order (the server streams them in that order whatever
    order they arrived in: arrival order is the server's to undo, and the HTTP checks cover it),
    aggregate to the simulator's output to the last digit when cut as the simulator and the
    server cut them, and to the same output up to the grouping of sums (relative 1e-9) when cut
    one report per chunk or into uneven chunks; ``aggregate`` gets a one-pass iterator.
``create-refusals``
    The create route (the app in process, ``httpx.ASGITransport``) accepts the parameters and
    answers 422 ``invalid_params`` to each field set just outside its declared range (its JSON
    schema's minimum, maximum, exclusive bounds and enums), to an unknown field and to each of
    ``invalid_params``.
``pickle``
    The protocol and its parameters survive ``pickle`` (Dask ships them to its workers) and the
    copy simulates to the same estimate.
``describe``
    ``describe()`` is JSON naming the protocol with its parameter schema, and
    ``min_participants`` (at the population's largest ε) is None or the smallest population that
    plans: that many participants plan, one fewer do not.

In a test suite
---------------
The plugin ``fedldp.testing.plugin`` (a ``pytest11`` entry point of the installed package, or
``pytest_plugins = ["fedldp.testing.plugin"]``) gives two fixtures: ``fedldp_kit_server`` (one
server for the session) and ``fedldp_check_protocol`` (``check_protocol`` with that server and
``strict=True``)::

    def test_my_protocol_conforms(fedldp_check_protocol):
        fedldp_check_protocol(MyProtocol(), population=PopulationSpec(users=600, samples=16))

Importing ``fedldp.testing`` needs no pytest; its names load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedldp.testing.kit import AUDIT_EPSILONS, CHECKS, HTTP_BATCH, check_protocol
    from fedldp.testing.local import OUTSIDE_COORDINATES
    from fedldp.testing.privacy import AUDIT_HOOK
    from fedldp.testing.report import CheckResult, KitReport, ProtocolCheckError
    from fedldp.testing.served import KitServer

__all__ = [
    "AUDIT_EPSILONS",
    "AUDIT_HOOK",
    "CHECKS",
    "HTTP_BATCH",
    "OUTSIDE_COORDINATES",
    "CheckResult",
    "KitReport",
    "KitServer",
    "ProtocolCheckError",
    "check_protocol",
]

_HOMES = {
    "AUDIT_EPSILONS": "fedldp.testing.kit",
    "CHECKS": "fedldp.testing.kit",
    "HTTP_BATCH": "fedldp.testing.kit",
    "check_protocol": "fedldp.testing.kit",
    "OUTSIDE_COORDINATES": "fedldp.testing.local",
    "AUDIT_HOOK": "fedldp.testing.privacy",
    "CheckResult": "fedldp.testing.report",
    "KitReport": "fedldp.testing.report",
    "ProtocolCheckError": "fedldp.testing.report",
    "KitServer": "fedldp.testing.served",
}


def __getattr__(name: str) -> Any:
    """Import a public name from its home module on first use (PEP 562)."""
    try:
        home = _HOMES[name]
    except KeyError:
        raise AttributeError(f"module 'fedldp.testing' has no attribute {name!r}") from None
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

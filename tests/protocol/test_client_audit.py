"""The end-to-end privacy audit of every catalogue protocol (``CLIENT_AUDITS`` of
protocol/catalogue.py, the driver ``run_client_audit`` of protocol/mechanisms/audit.py): each
protocol's own client step, in every round kind, at the ε its plan charges, on its worst-case
neighbours.

Every audit holds at confidence 0.999: an ε-LDP client step gives ``lower`` > ε, and a tight one
``upper`` < ε, with probability at most 0.001 each (fixed seeds: the outcome is deterministic; a
false failure would have had that probability). ``DRAWS`` = 50 000 reports per dataset resolve a
loss of 2ε from ε with a wide margin: measured over the tight cases, lower/ε 0.79–0.97,
upper/ε ≥ 1.03, and with half the noise lower/ε 1.66–1.96 (charged ε 0.3–1).

Leaks injected into the real code paths (the randomizer as a protocol module imports it) must
fail the audit: the negative controls the randomizer-level audits could not give.

Every case passes the statistic-free marginal audit too (protocol/mechanisms/marginal_audit.py,
at its defaults: a 2 000-report pilot and 20 000 reports per dataset, confidence 0.999; measured
at ε = 1 and seed 17: lower/ε at most 0.97 over the cases, 0.09 s per case), and the injected
Laplace leak fails it as well.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedldp.protocol.catalogue import AUDIT_EXEMPT, CATALOGUE, CLIENT_AUDITS
from fedldp.protocol.heterogeneous import means as hetero_means
from fedldp.protocol.mechanisms.audit import ClientAudit, run_client_audit
from fedldp.protocol.mechanisms.marginal_audit import run_marginal_audit
from fedldp.protocol.mechanisms.randomizers import laplace_mean_report, laplace_scale
from fedldp.protocol.semi_feature import common as semi_common
from fedldp.protocol.semi_feature.audit import neighbour
from fedldp.protocol.user_level import two_stage

DRAWS = 50_000
EPSILON = 1.0
CASES = [case for cases in CLIENT_AUDITS.values() for case in cases]


def _case(name: str) -> ClientAudit:
    return next(case for case in CASES if case.name == name)


def test_every_local_protocol_is_audited_and_only_central_trust_is_exempt() -> None:
    central = {name for name, p in CATALOGUE.items() if p.trust == "central"}
    assert set(AUDIT_EXEMPT) == central
    assert set(CLIENT_AUDITS) == set(CATALOGUE) - central
    assert all(reason for reason in AUDIT_EXEMPT.values())
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("name", sorted(CLIENT_AUDITS))
def test_every_round_of_a_protocol_is_audited(name: str) -> None:
    cases = CLIENT_AUDITS[name]
    plan = cases[0].setup(EPSILON).plan
    assert {case.round for case in cases} == {rp.name for rp in plan.rounds}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_client_step_is_ldp_at_its_charge_and_reaches_it(case: ClientAudit) -> None:
    step = case.setup(EPSILON)
    rp = step.plan.rounds[step.round]
    # the audit's ε is what the plan (the ledger) charges this participant in this round
    assert step.epsilon == rp.epsilon[np.flatnonzero(rp.cohort == step.slot)[0]] <= EPSILON
    # the audited reports are ones the server accepts from that participant
    for data in (case.a, case.b):
        rows = step.privatize(data, 50, 7)
        eps = np.full(50, step.epsilon)
        slots = np.full(50, step.slot)
        payloads = rows.reshape(50, *rp.payload_shape)
        assert np.all(step.protocol.check(step.params, step.task, eps, payloads))
        assert np.all(
            step.protocol.check_members(step.params, step.plan, step.task, slots, payloads)
        )
    audit = run_client_audit(case, EPSILON, draws=DRAWS, seed=11)
    assert audit.epsilon == step.epsilon
    assert audit.lower <= audit.epsilon, audit
    if case.tight:
        assert audit.upper >= audit.epsilon, audit


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_client_step_passes_the_marginal_audit_at_its_charge(case: ClientAudit) -> None:
    step = case.setup(EPSILON)
    audit = run_marginal_audit(step, case.a, case.b, seed=17)
    assert audit.epsilon == step.epsilon
    assert audit.lower <= audit.epsilon, audit


CAPPED = "hetero-mean-laplace:report:eps-cap"


@pytest.mark.slow
@pytest.mark.parametrize(
    "case", [c for c in CASES if c.tight and c.name != CAPPED], ids=lambda c: c.name
)
def test_half_the_noise_in_a_client_step_is_caught(case: ClientAudit) -> None:
    audit = run_client_audit(case, EPSILON, draws=DRAWS, seed=12, noise=0.5)
    assert audit.lower > audit.epsilon, audit


def test_eps_cap_holds_whatever_epsilon_the_client_step_is_handed() -> None:
    # the heterogeneous client step runs at min(ε, eps_cap): handed twice its charge of 0.5, it
    # still releases at 0.5 (so this case has no half-noise control)
    audit = run_client_audit(_case(CAPPED), EPSILON, draws=DRAWS, seed=12, noise=0.5)
    assert audit.epsilon == 0.5
    assert audit.lower <= audit.epsilon <= audit.upper, audit


# --------------------------------------------------------------------------- injected leaks


def _doubled(report: Any, eps_position: int) -> Any:
    """``report`` called with its ε argument (positional ``eps_position``) doubled."""

    def leaky(*args: Any, **kwargs: Any) -> Any:
        args = (
            *args[:eps_position],
            2.0 * np.asarray(args[eps_position]),
            *args[eps_position + 1 :],
        )
        return report(*args, **kwargs)

    return leaky


def test_a_hetero_laplace_client_at_twice_its_charge_fails_the_audit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # protocol/heterogeneous/means.py: laplace_mean_report(means, eps, rng, lo, hi)
    case = _case("hetero-mean-laplace:report")
    assert run_client_audit(case, EPSILON, draws=DRAWS, seed=13).lower <= EPSILON
    assert getattr(hetero_means, "laplace_mean_report") is laplace_mean_report  # noqa: B009
    monkeypatch.setattr(hetero_means, "laplace_mean_report", _doubled(laplace_mean_report, 1))
    assert run_client_audit(case, EPSILON, draws=DRAWS, seed=13).lower > EPSILON
    assert run_marginal_audit(case.setup(EPSILON), case.a, case.b, seed=13).lower > EPSILON


@pytest.mark.parametrize(
    ("function", "position", "stage"),
    [("stage_one_report", 2, "stage-1"), ("stage_two_report", 3, "stage-2")],
)
def test_a_user_mean_client_at_twice_its_charge_fails_the_audit(
    monkeypatch: pytest.MonkeyPatch, function: str, position: int, stage: str
) -> None:
    # protocol/user_level/means.py calls ts.stage_one_report(means, design, epsilon, rng) and
    # ts.stage_two_report(means, lo, hi, epsilon, rng, radius)
    case = _case(f"user-mean:{stage}")
    monkeypatch.setattr(two_stage, function, _doubled(getattr(two_stage, function), position))
    audit = run_client_audit(case, EPSILON, draws=DRAWS, seed=14)
    assert audit.lower > audit.epsilon, audit


@pytest.mark.parametrize("name", ["histoftree:label", "histoftree-tuned:label", "pardt:report"])
def test_half_the_label_noise_fails_the_audit(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    # protocol/semi_feature/common.py label_report: Lap(laplace_scale(2M, ε)) on the label
    assert getattr(semi_common, "laplace_scale") is laplace_scale  # noqa: B009
    monkeypatch.setattr(semi_common, "laplace_scale", lambda s, e: 0.5 * laplace_scale(s, e))
    audit = run_client_audit(_case(name), EPSILON, draws=DRAWS, seed=15)
    assert audit.lower > audit.epsilon, audit


def test_labeldt_protects_the_label_only() -> None:
    # its features travel in clear: neighbours that differ in a private feature are told apart
    # with certainty (the reason labeldt's case moves the label alone)
    case = _case("labeldt:report")
    moved = ClientAudit(
        case.protocol, case.round, "", case.setup, case.a, neighbour(0.95, 3.0), case.statistic
    )
    audit = run_client_audit(moved, EPSILON, draws=1_000, seed=16)
    assert audit.loss == np.inf

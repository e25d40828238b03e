"""The heterogeneous-ε randomizers under the empirical privacy audit (heterogeneous-ldp.md §3,
§5 E4): N = 200 000 draws per input, ε ∈ {0.1, 1, 5}, seed 45678 as in the spec's reference run.

Each audit holds at confidence 0.999 (``fedldp.protocol.mechanisms.audit``): an ε-LDP randomizer
gives ``lower`` > ε, and a tight one ``upper`` < ε, with probability at most 0.001 each (fixed
seed: the outcome is deterministic; a false failure would have had that probability). The
negative control runs the same client code with half its noise (a 2ε randomizer) and must be
caught: its lower bound exceeds ε."""

from __future__ import annotations

import numpy as np
import pytest

from fedldp.protocol.catalogue import AUDITS as CATALOGUE_AUDITS
from fedldp.protocol.heterogeneous.audit import AUDITS
from fedldp.protocol.mechanisms.audit import AuditCase, run_audit

DRAWS = 200_000
SEED = 45678


@pytest.mark.parametrize("case", AUDITS, ids=lambda c: c.name)
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
def test_every_randomizer_passes_its_audit_and_reaches_epsilon(
    case: AuditCase, epsilon: float
) -> None:
    audit = run_audit(case, epsilon, draws=DRAWS, rng=np.random.default_rng(SEED))
    assert audit.lower <= epsilon, audit
    assert case.tight
    assert audit.upper >= epsilon, audit


@pytest.mark.parametrize("case", AUDITS, ids=lambda c: c.name)
@pytest.mark.parametrize("epsilon", [0.1, 1.0])
def test_half_the_noise_is_caught(case: AuditCase, epsilon: float) -> None:
    audit = run_audit(case, epsilon, draws=DRAWS, rng=np.random.default_rng(SEED), noise=0.5)
    assert audit.lower > epsilon, audit


def test_the_catalogue_lists_the_heterogeneous_cases() -> None:
    for case in AUDITS:
        assert CATALOGUE_AUDITS[case.name] is case

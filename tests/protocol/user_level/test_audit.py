"""The user-level randomizers' audit cases (user-level-ldp.md §4.2 TP3, TP6; §6.2 E10): each
passes at its ε, reaches it when it is a Laplace mechanism, and fails with half its noise."""

from __future__ import annotations

import numpy as np
import pytest

from fedldp.protocol.catalogue import AUDITS, get_audit
from fedldp.protocol.mechanisms.audit import AuditCase, run_audit
from fedldp.protocol.user_level.audit import AUDITS as USER_LEVEL

DRAWS = 100_000


def test_every_user_level_case_is_in_the_catalogue() -> None:
    assert {c.name for c in USER_LEVEL} <= set(AUDITS)
    with pytest.raises(ValueError, match="known audit cases"):
        get_audit("no-such-case")


@pytest.mark.parametrize("case", USER_LEVEL, ids=lambda c: c.name)
def test_a_case_is_epsilon_ldp_and_tight(case: AuditCase) -> None:
    # each audit's lower bound exceeds a true ε with probability <= 0.001 (joint confidence)
    audit = run_audit(case, 1.0, draws=DRAWS, rng=np.random.default_rng(3))
    assert audit.lower <= 1.0
    if case.tight:
        assert audit.upper >= 1.0


@pytest.mark.parametrize("case", [c for c in USER_LEVEL if c.tight], ids=lambda c: c.name)
def test_half_the_noise_is_caught(case: AuditCase) -> None:
    audit = run_audit(case, 1.0, draws=DRAWS, rng=np.random.default_rng(4), noise=0.5)
    assert audit.lower > 1.0

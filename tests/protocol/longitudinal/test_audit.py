"""Injected leaks in the memoizing protocols' client steps fail the end-to-end audit of their
one-shot reports (the catalogue's cases, protocol/longitudinal/audit.py; the passing audits and
the half-noise controls are tests/protocol/test_client_audit.py's, over every catalogue case).
Confidence 0.999 and 50 000 draws, as there; fixed seeds."""

from __future__ import annotations

import numpy as np
import pytest

from fedldp.protocol.api import FloatArray, run_client_audit
from fedldp.protocol.catalogue import CLIENT_AUDITS
from fedldp.protocol.longitudinal import rappor, telemetry

DRAWS = 50_000
EPSILON = 1.0


def test_rappor_sending_its_permanent_response_without_the_irr_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the memoized PRR alone is ε_∞-LDP (5.9 at the audit's f = 0.1), not ε
    (case,) = CLIENT_AUDITS["memo-rappor"]
    assert run_client_audit(case, EPSILON, draws=DRAWS, seed=21).lower <= EPSILON
    honest = rappor.report_probabilities

    def no_irr(epsilon: FloatArray, f: float) -> tuple[FloatArray, FloatArray]:
        q_star, _ = honest(epsilon, f)
        return q_star, np.ones_like(q_star)

    monkeypatch.setattr(rappor, "report_probabilities", no_irr)
    audit = run_client_audit(case, EPSILON, draws=DRAWS, seed=21)
    assert audit.lower > audit.epsilon, audit


def test_1bitmean_at_twice_its_charge_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    honest = telemetry.one_bit_probability

    def doubled(grid: FloatArray, levels: int, epsilon: FloatArray) -> FloatArray:
        return honest(grid, levels, 2.0 * np.asarray(epsilon))

    monkeypatch.setattr(telemetry, "one_bit_probability", doubled)
    for case in CLIENT_AUDITS["memo-1bitmean"]:
        audit = run_client_audit(case, EPSILON, draws=DRAWS, seed=22)
        assert audit.lower > audit.epsilon, (case.name, audit)


def test_dbitflip_at_twice_its_charge_fails() -> None:
    (case,) = CLIENT_AUDITS["memo-dbitflip"]
    audit = run_client_audit(case, EPSILON, draws=DRAWS, seed=23, noise=0.5)
    assert audit.lower > audit.epsilon, audit

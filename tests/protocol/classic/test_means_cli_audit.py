"""The classic means through the command line (``fedldp simulate``) and the end-to-end privacy
audit at a second ε (tests/protocol/test_client_audit.py audits every case at ε = 1).

The audit: 50 000 reports per dataset at confidence 0.999 (a false failure has probability at
most 0.001 per bound; fixed seeds make the outcome deterministic). ε = 5 makes the vector
protocols sample k = 2 coordinates (Alg. 4), so the composition over coordinates is audited too.

The command line: S seeds of ``fedldp simulate --protocol <name> --epsilon 2`` on two-point
data (every user's mean is ±1, so t² = 1 and the mechanism's exact variance is (A + B)/n, and
the sample mean of the users deviates from the law's mean μ = 0.3 with variance (1 − μ²)/n).
The printed errors e_s are then independent, mean 0, variance σ² = (A + B + 1 − μ²)/n, close
to Gaussian at n = 2000, so Σ e_s²/σ² is χ²_S: it must lie between χ²_S's 10^-5/2 quantiles.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import chi2

from fedldp.client.cli.main import main
from fedldp.protocol.catalogue import CLIENT_AUDITS
from fedldp.protocol.classic import means_theory as th
from fedldp.protocol.classic.means import PROTOCOLS, ClassicMean
from fedldp.protocol.mechanisms.audit import run_client_audit

SECOND_EPSILON = 5.0
CASES = [c for p in PROTOCOLS for c in CLIENT_AUDITS[p.name]]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_client_step_is_ldp_and_tight_at_a_second_epsilon(case: object) -> None:
    audit = run_client_audit(case, SECOND_EPSILON, draws=50_000, seed=31)  # type: ignore[arg-type]
    assert audit.epsilon == SECOND_EPSILON
    assert audit.lower <= audit.epsilon, audit
    assert audit.upper >= audit.epsilon, audit


def test_the_vector_audits_sample_two_coordinates_at_the_second_epsilon() -> None:
    assert int(th.sampled_coordinates([SECOND_EPSILON], 4)[0]) == 2


USERS, SEEDS, MU = 2000, 12, 0.3


@pytest.mark.parametrize("protocol", [p for p in PROTOCOLS if not getattr(p, "vector", True)])
def test_simulate_prints_an_estimate_whose_error_matches_the_formula(
    protocol: ClassicMean, capsys: pytest.CaptureFixture[str]
) -> None:
    errors = []
    for seed in range(SEEDS):
        argv = [
            *("simulate", "--protocol", protocol.name, "--epsilon", "2", "--json"),
            *("--users", str(USERS), "--distribution", "two-point", "--mean", str(MU)),
            *("--seed", str(seed)),
        ]
        assert main(argv) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["truth"] == pytest.approx(MU)
        errors.append(out["estimate"] - out["truth"])
        assert out["diagnostics"]["predicted_mse"] > 0
    a, b = th.variance_terms(protocol.mechanism, [2.0])
    sigma2 = float(a[0] + b[0] + 1.0 - MU**2) / USERS
    statistic = float(np.sum(np.square(errors))) / sigma2
    assert chi2.ppf(5e-6, SEEDS) <= statistic <= chi2.isf(5e-6, SEEDS), statistic

"""The conformance kit (``fedldp.testing``) on every catalogue protocol, and on protocols broken
on purpose: each check must be able to fail, and name itself when it does.

The whole kit runs on every protocol with small populations against one server (the plugin's
session fixture): about 1 s per protocol besides the per-user HTTP runs (0.4-1.4 s each, marked
``slow``). The privacy audit runs at the kit's defaults (50 000 draws, confidence 0.999: a
false failure has probability at most 0.001 per case and ε, and fixed seeds make the outcome
the same on every run); so does the marginal audit (``privacy-marginals``: 20 000 draws after a
2 000-draw pilot, the same confidence). tests/test_kit_marginals.py has the leaks only the
marginal audit sees.
"""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import pytest

from fedldp.client.population.build import PopulationSpec
from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base.protocol import Protocol
from fedldp.protocol.core.base.records import (
    JSON,
    BoolArray,
    FloatArray,
    IntArray,
    Plan,
    ReportChunk,
    RoundTask,
    UserData,
)
from fedldp.protocol.core.streams import RandomSource
from fedldp.protocol.mechanisms.audit import ClientAudit, client_step, one_user, scaled_loss
from fedldp.protocol.user_level.baselines import BaselineClippedLaplace, BaselineParams
from fedldp.testing import CHECKS, KitReport, KitServer, ProtocolCheckError, check_protocol

MIXED = "1:0.5,2:0.5"
"""Half the users at ε = 1, half at ε = 2."""

KIT_POPULATIONS: dict[str, PopulationSpec] = {  # by data kind, or by protocol
    "scalar": PopulationSpec(
        users=600, samples=16, distribution="two-point", mean=0.3, epsilon_mix=MIXED
    ),
    "vector": PopulationSpec(
        users=600, samples=4, distribution="two-point", mean=0.2, dimension=3, epsilon_mix=MIXED
    ),
    "categorical": PopulationSpec(
        users=600, samples=4, distribution="categorical", items=6, epsilon_mix=MIXED
    ),
    "labeled": PopulationSpec(users=300, distribution="sin-sum", epsilon_mix=MIXED),
    "user-sgd": PopulationSpec(users=1200, samples=4, distribution="sparse-linear", epsilon=2.0),
    "user-classify": PopulationSpec(
        users=600, samples=4, distribution="binned-classification", epsilon=2.0
    ),
    "user-regress": PopulationSpec(
        users=1200, samples=4, distribution="binned-regression", epsilon=2.0
    ),
}
KIT_POPULATIONS["memo-1bitmean"] = PopulationSpec(  # inside the [0, m] it clips to
    users=600, samples=16, distribution="uniform", low=0.0, high=1.0, epsilon_mix=MIXED
)
KIT_PARAMS: dict[str, dict[str, Any]] = {"user-sgd": {"rounds": 2}}
IN_PROCESS = [c for c in CHECKS if not c.startswith("http-")]


def population_of(protocol: Protocol[Any]) -> PopulationSpec:
    return KIT_POPULATIONS.get(protocol.name) or KIT_POPULATIONS[protocol.data_kind]


def kit(protocol: Protocol[Any], server: KitServer, only: Sequence[str]) -> KitReport:
    return check_protocol(
        protocol,
        population=population_of(protocol),
        params=KIT_PARAMS.get(protocol.name, {}),
        server=server,
        only=only,
    )


def test_the_kit_imports_without_pytest() -> None:
    script = (
        "import sys\n"
        "sys.modules['pytest'] = None  # any import of pytest fails\n"
        "import fedldp.testing as t\n"
        "assert callable(t.check_protocol) and t.KitServer and t.CHECKS\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_catalogue_protocol_passes_the_kit(name: str, fedldp_kit_server: KitServer) -> None:
    protocol = CATALOGUE[name]
    report = kit(protocol, fedldp_kit_server, [*IN_PROCESS, "http-batch"])
    assert set(report.names) == {*IN_PROCESS, "http-batch"}
    exempt = {"privacy-audit", "privacy-marginals"} if protocol.trust == "central" else set()
    assert {r.name for r in report if r.status == "skipped"} == exempt, str(report)
    assert all(r.passed for r in report if r.name not in exempt), str(report)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_catalogue_protocol_matches_over_http_per_user(
    name: str, fedldp_kit_server: KitServer
) -> None:
    report = kit(CATALOGUE[name], fedldp_kit_server, ["http-per-user"])
    assert report["http-per-user"].passed, str(report)


def test_the_fixture_raises_naming_the_failed_checks(
    fedldp_check_protocol: Callable[..., KitReport],
) -> None:
    protocol = CATALOGUE["hetero-mean-laplace"]
    spec = KIT_POPULATIONS["scalar"]
    with pytest.raises(ProtocolCheckError, match="create-refusals") as caught:
        # a valid bound the create route accepts, handed over as one it must refuse
        fedldp_check_protocol(
            protocol, population=spec, only=["create-refusals"], invalid_params=[{}]
        )
    assert [f.name for f in caught.value.failures] == ["create-refusals"]
    assert fedldp_check_protocol(protocol, population=spec, only=["pickle"]).ok


# --------------------------------------------------------------------------- a leaking client


class LeakyClippedLaplace(BaselineClippedLaplace):
    """The catalogue's clipped-Laplace baseline with a client step that randomizes at twice the
    ε its plan charges."""

    def privatize(
        self,
        params: BaselineParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        return super().privatize(params, task, data, 2.0 * epsilon, group, rng)


def test_a_client_step_at_twice_its_charge_fails_the_privacy_check(
    fedldp_kit_server: KitServer,
) -> None:
    report = kit(LeakyClippedLaplace(), fedldp_kit_server, CHECKS)
    # its reports still pass every other in-process check (the Laplace bounds at 2ε are
    # narrower); the server runs the catalogue's own class, so the HTTP checks refuse to vouch
    assert {f.name for f in report.failures} == {
        "privacy-audit",
        "privacy-marginals",
        "http-per-user",
        "http-batch",
        "create-refusals",
    }, str(report)
    assert "beyond the charged ε" in report["privacy-audit"].reason
    assert "beyond the charged ε" in report["privacy-marginals"].reason
    assert "register the protocol" in report["http-batch"].reason
    with pytest.raises(ProtocolCheckError, match="privacy-audit"):
        report.raise_for_failures()


# --------------------------------------------------------------------------- own audits


class MyMean(BaselineClippedLaplace):
    """A protocol the catalogue does not hold (the audit cases are its own to give)."""

    name: ClassVar[str] = "my-clipped-mean"


AUDIT_PARAMS = {"samples_per_user": 8, "bound": 1.0}


def own_case(protocol: Protocol[Any]) -> ClientAudit:
    """Its one round on two participants at ε, the audited one's samples all at −1 against
    all at +1 (the clipped mean's worst case)."""
    background = UserData(np.zeros(16), np.array([8, 8], dtype=np.int64))

    def setup(epsilon: float) -> Any:
        return client_step(protocol, AUDIT_PARAMS, epsilon, background, 0)

    a, b = one_user(np.full(8, -1.0)), one_user(np.full(8, 1.0))
    return ClientAudit(protocol.name, "report", "ends", setup, a, b, scaled_loss)


class MyMeanWithHook(MyMean):
    def client_audits(self) -> tuple[ClientAudit, ...]:
        return (own_case(self),)


def test_a_protocol_outside_the_catalogue_brings_its_neighbours() -> None:
    spec = KIT_POPULATIONS["scalar"]
    bare = check_protocol(MyMean(), population=spec, only=["privacy-audit"])
    assert bare["privacy-audit"].failed
    assert "audits=[ClientAudit" in bare["privacy-audit"].reason
    mine = MyMean()
    given = check_protocol(mine, population=spec, only=["privacy-audit"], audits=[own_case(mine)])
    assert given["privacy-audit"].passed, str(given)
    hooked = check_protocol(MyMeanWithHook(), population=spec, only=["privacy-audit"])
    assert hooked["privacy-audit"].passed, str(hooked)


# --------------------------------------------------------------------------- broken on purpose


class OverCharging(BaselineClippedLaplace):
    """Charges everyone the largest ε enrolled: fine while all ε's are equal."""

    def plan(
        self,
        params: BaselineParams,
        epsilon: FloatArray,
        metadata: Mapping[str, Any],
        seed: int,
    ) -> Plan:
        plan = super().plan(params, epsilon, metadata, seed)
        rounds = tuple(
            dataclasses.replace(rp, epsilon=np.full_like(rp.epsilon, float(np.max(epsilon))))
            for rp in plan.rounds
        )
        return dataclasses.replace(plan, rounds=rounds)


class AcceptsAnything(BaselineClippedLaplace):
    def check(
        self, params: BaselineParams, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        return np.ones(np.asarray(payloads).shape[0], dtype=np.bool_)

    def report_bounds(  # type: ignore[override]  # no plausibility bounds to fall back on
        self, params: BaselineParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> None:
        return None


class FirstChunkOnly(BaselineClippedLaplace):
    def aggregate(
        self,
        params: BaselineParams,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        return super().aggregate(params, plan, round_index, broadcast, list(chunks)[:1])


class Unpicklable(BaselineClippedLaplace):
    def __reduce__(self) -> Any:
        raise pickle.PicklingError("holds a live connection")


class WrongMinimum(BaselineClippedLaplace):
    def min_participants(self, epsilon: float, params: BaselineParams | None = None) -> int:
        return 5


class GlobalRandom(BaselineClippedLaplace):
    def privatize(
        self,
        params: BaselineParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        out = super().privatize(params, task, data, epsilon, group, rng)
        return out + np.random.default_rng().uniform(-1e-6, 1e-6, out.shape)


SINGLE = PopulationSpec(users=200, samples=8, distribution="two-point", epsilon=1.0)


@pytest.mark.parametrize(
    ("protocol", "check", "reason"),
    [
        (OverCharging(), "ledger", "unequal ε's"),
        (AcceptsAnything(), "report-checks", "holding nan is accepted"),
        (FirstChunkOnly(), "chunking", "one report per chunk"),
        (Unpicklable(), "pickle", "does not pickle"),
        (WrongMinimum(), "describe", "4 participants plan too"),
        (GlobalRandom(), "same-seed", "differ"),
    ],
    ids=lambda x: x if isinstance(x, str) else type(x).__name__,
)
def test_each_check_fails_a_protocol_that_breaks_it(
    protocol: Protocol[Any], check: str, reason: str
) -> None:
    report = check_protocol(protocol, population=SINGLE, only=[check], http=False)
    assert [f.name for f in report.failures] == [check], str(report)
    assert reason in report[check].reason, str(report)


class Crashing(LeakyClippedLaplace):
    def aggregate(
        self,
        params: BaselineParams,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        raise ZeroDivisionError("a bug")


def test_a_run_that_crashes_fails_every_check_that_needs_it_and_the_audit_still_runs() -> None:
    report = check_protocol(Crashing(), population=SINGLE, http=False)
    privacy = {"privacy-audit", "privacy-marginals"}
    needs_run = [c for c in IN_PROCESS if c not in privacy]
    assert [f.name for f in report.failures] == [c for c in CHECKS if c in {*needs_run, *privacy}]
    assert all("ZeroDivisionError: a bug" in report[c].reason for c in needs_run)
    assert "beyond the charged ε" in report["privacy-audit"].reason  # it leaks too
    assert "beyond the charged ε" in report["privacy-marginals"].reason


def test_unknown_checks_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown checks"):
        check_protocol(CATALOGUE["user-mean"], population=SINGLE, only=["speed"])

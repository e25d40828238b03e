"""Every catalogue protocol (protocol/catalogue.py) under extreme but admissible inputs: ε at the
enrollment bounds (``EPSILON_MIN``, ``EPSILON_MAX``), a single participant, every report equal.

The server fails a study with the reason when plan, broadcast, aggregate or finalize raises
``ValueError`` (server/services/rounds.py); anything else is a protocol bug (the server still
isolates it, but the reason is a stack trace's last line). Of these inputs only the plan may refuse,
and only for the population (too few participants for the protocol's groups and stages at these ε's,
``Protocol.plan``'s documented refusal, whose message names the participants it needs): once a plan
is made, every round, check and the finalization must run through to a finite estimate that survives
JSON (no NaN turned into null). A ``ValueError`` elsewhere (a numpy shape error is one) fails the
test, and the module's finalizer checks that every protocol run got examples through to that check
(each has an explicit example that plans: 40 participants at ``EPSILON_MAX``).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.seeds import round_key
from fedldp.client.simulate import fill_from_population
from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base.protocol import Protocol
from fedldp.protocol.core.base.records import JSON, ReportChunk, Result, RoundTask, jsonable
from fedldp.protocol.core.streams import UserStreams
from fedldp.protocol.core.wire import EPSILON_MAX, EPSILON_MIN

SPECS: dict[str, dict[str, Any]] = {  # the population laws by data kind (PopulationSpec fields)
    "scalar": {"distribution": "two-point", "samples": 4, "mean": 0.3},
    "vector": {"distribution": "two-point", "samples": 4, "mean": 0.2, "dimension": 3},
    "categorical": {"distribution": "categorical", "samples": 4, "items": 5},
}
LABELED: dict[str, dict[str, Any]] = {  # the labeled law each learning protocol is made for
    "user-sgd": {"distribution": "sparse-linear", "samples": 4},
    "user-classify": {"distribution": "binned-classification", "samples": 4},
    "user-regress": {"distribution": "binned-regression", "samples": 4},
}
SEMI_FEATURE: dict[str, Any] = {"distribution": "sin-sum"}  # histoftree and its baselines

EPSILONS = st.sampled_from(
    [
        (EPSILON_MIN,),
        (EPSILON_MAX,),
        (EPSILON_MIN, EPSILON_MAX),  # one participant at each bound: the release takes the min
    ]
)


def _spec(protocol: Protocol[Any], users: int) -> PopulationSpec:
    spec = LABELED.get(protocol.name) or SPECS.get(protocol.data_kind) or SEMI_FEATURE
    return PopulationSpec(users=users, **spec)


TRIED: Counter[str] = Counter()
CHECKED: Counter[str] = Counter()
"""Examples run and examples that reached ``_check_result``, by protocol (this process's)."""


@pytest.fixture(scope="module", autouse=True)
def _every_protocol_reaches_the_result_check() -> Iterator[None]:
    yield
    for name in TRIED:  # every protocol run here (xdist may split the module)
        assert CHECKED[name] >= 1, f"no example of {name} reached the result check"


def _run(protocol: Protocol[Any], users: int, profile: tuple[float, ...], seed: int) -> None:
    """Plan, then each round with every cohort member sending the first member's report (those
    the server's checks refuse are left out, as at a deadline), then finalize. A plan refused
    for its population is the clean refusal the server turns into a failed study; after that,
    nothing may raise."""
    TRIED[protocol.name] += 1
    pop = build_population(_spec(protocol, max(users, 2)), seed)  # semi-feature laws need 2
    params = protocol.parse_params(fill_from_population(protocol, {}, pop))
    epsilon = np.resize(np.asarray(profile, dtype=np.float64), users)
    metadata = {key: column[:users] for key, column in pop.metadata.items()}
    try:
        plan = protocol.plan(params, epsilon, metadata, seed)
    except ValueError as refusal:
        reason = str(refusal)
    else:
        reason = ""
    if reason:
        assert "participants" in reason, reason  # a population refusal, nothing else
        return  # the server fails the study with this message
    outputs: list[JSON] = []
    for k, rp in enumerate(plan.rounds):
        task = RoundTask.of(rp, protocol.broadcast(params, plan, k, outputs))
        chunks: list[ReportChunk] = []
        if rp.cohort.size:
            first = rp.cohort[:1]
            sent = RoundTask.of(rp, protocol.client_broadcast(task.broadcast))
            one = protocol.privatize(
                params,
                sent,
                pop.data(first),
                rp.epsilon[:1],
                rp.groups()[:1],
                UserStreams(round_key(pop.population_seed, k), first),
            )
            rows = np.repeat(np.asarray(one, dtype=np.float64), rp.cohort.size, axis=0)
            ok = protocol.check(params, task, rp.epsilon, rows) & protocol.check_members(
                params, plan, task, rp.cohort, rows
            )
            keep = np.flatnonzero(ok)
            chunks.append(
                ReportChunk(rp.cohort[keep], rp.epsilon[keep], rp.groups()[keep], rows[keep])
            )
        outputs.append(jsonable(protocol.aggregate(params, plan, k, task.broadcast, chunks)))
    _check_result(protocol.finalize(params, plan, outputs))
    CHECKED[protocol.name] += 1


def _check_result(result: Result) -> None:
    estimate = np.asarray(result.estimate, dtype=np.float64)
    assert estimate.size
    assert np.all(np.isfinite(estimate)), result.estimate
    bar = result.error_bar
    assert bar is None or not math.isnan(bar.half_width)
    json.dumps(jsonable(result.diagnostics), allow_nan=False)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    users=st.sampled_from([1, 2, 40]),
    profile=EPSILONS,
    seed=st.integers(0, 2**32 - 1),
)
@example(users=40, profile=(EPSILON_MAX,), seed=0)
def test_extreme_inputs_give_a_result_or_a_clean_refusal(
    name: str, users: int, profile: tuple[float, ...], seed: int
) -> None:
    _run(CATALOGUE[name], users, profile, seed)

"""The in-process simulator: drive any catalogue protocol over a population, chunk by chunk.

This is the fast path of DESIGN.md ("The same protocol objects run in two ways"): the same
plan → broadcast → privatize → check → aggregate → finalize steps the server and the swarm run,
with the same seeds, so the HTTP path must reproduce its estimate. One run seed is split by
``derive_seeds`` into the public study seed (plans, cohorts) and the private population seed (data,
and each round's privatization streams ``round_key(population_seed, k)``).

Memory stays flat: for each round the cohort is walked in blocks of ``chunk_size`` participants in
slot order; each block's data is generated, privatized and checked, and its reports are streamed
to ``aggregate`` through a generator. No round ever holds all users' data.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedldp.client.cli.output import result_summary
from fedldp.client.population.build import AnyPopulation
from fedldp.client.population.features import SemiFeaturePopulation
from fedldp.client.population.learning import evaluate_summary
from fedldp.client.seeds import derive_seeds, noise_seed, round_key
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.base import (
    JSON,
    FloatArray,
    Params,
    Plan,
    Predictor,
    Protocol,
    ReportChunk,
    Result,
    RoundTask,
)
from fedldp.protocol.core.ledger import check_plan_budget
from fedldp.protocol.core.streams import UserStreams

__all__ = ["ProgressFn", "SimulationError", "SimulationResult", "fill_from_population", "simulate"]

ProgressFn = Callable[[int, int], None]
"""Called after each chunk with (reports done, reports planned in all rounds)."""


class SimulationError(RuntimeError):
    """The client side produced reports the protocol rejects: a bug, not a user error."""


@dataclass(frozen=True)
class SimulationResult:
    """Everything one simulated run produced."""

    protocol: str
    params: Params
    population: AnyPopulation
    seed: int
    result: Result
    plan: Plan
    charges: FloatArray
    outputs: tuple[JSON, ...]
    elapsed_s: float
    data_kind: str = field(default="scalar")

    @property
    def warnings(self) -> tuple[str, ...]:
        # a protocol may repeat a plan warning in its result: each is shown once
        every = (*self.population.warnings, *self.plan.warnings, *self.result.warnings)
        return tuple(dict.fromkeys(every))

    def as_json(self) -> JSON:
        """The result summary (fedldp.client.cli.output.result_summary) plus the population
        description."""
        summary = result_summary(
            protocol=self.protocol,
            params=self.params.model_dump(mode="json"),
            n=self.population.n,
            seed=self.seed,
            estimate=self.result.estimate,
            truth=self.population.truth,
            error_bar=None if self.result.error_bar is None else self.result.error_bar.as_json(),
            charges=self.charges,
            diagnostics=self.result.diagnostics,
            warnings=self.warnings,
            elapsed_s=self.elapsed_s,
            data_kind=self.data_kind,
        )
        summary["population"] = self.population.describe()
        return evaluate_summary(summary, self.population, self.test_predictions())

    def test_predictions(self) -> FloatArray | None:
        """The finished predictor at a semi-feature population's test features (else None)."""
        if not isinstance(self.population, SemiFeaturePopulation):
            return None
        protocol = get_protocol(self.protocol)
        if not isinstance(protocol, Predictor):
            return None
        features = self.population.test_features
        return protocol.predict(self.params, self.plan, self.outputs, features)


def fill_from_population(
    protocol: Protocol[Any], raw: Mapping[str, Any], population: AnyPopulation
) -> dict[str, Any]:
    """``raw`` with the parameters the population determines filled in where the protocol has
    them and they were not given: ``samples_per_user`` (the smallest per-user sample count: every
    user then holds at least m samples; those with more keep their first m), ``dimension`` (d of
    vector data), ``domain_size`` (k of categorical data) and ``radius`` (of the ℓ2 ball holding
    a synthetic vector law's support, e.g. √d·D for the box [-D, D]^d)."""
    known: dict[str, float | None] = {
        "samples_per_user": int(population.metadata["samples"].min()),
        "dimension": population.dimension,
        "domain_size": population.items,
        "radius": population.l2_radius,
        "label_low": getattr(population, "label_low", None),
        "label_high": getattr(population, "label_high", None),
    }
    out = dict(raw)
    fields = protocol.params_model.model_fields
    for name, value in known.items():
        if name in fields and name not in out and value is not None:
            out[name] = value
    return out


def _round_chunks(
    protocol: Protocol[Any],
    params: Params,
    population: AnyPopulation,
    task: RoundTask,
    plan: Plan,
    round_index: int,
    chunk_size: int,
    on_chunk: Callable[[int], None],
) -> Iterator[ReportChunk]:
    rp = plan.rounds[round_index]
    groups = rp.groups()
    key = round_key(population.population_seed, round_index)
    # clients see what the server sends them; its checks see the whole broadcast
    sent = dataclasses.replace(task, broadcast=protocol.client_broadcast(task.broadcast))
    for start in range(0, rp.cohort.size, chunk_size):
        block = rp.cohort[start : start + chunk_size]
        eps = rp.epsilon[start : start + chunk_size]
        group = groups[start : start + chunk_size]
        data = population.data(block)
        payloads = protocol.privatize(params, sent, data, eps, group, UserStreams(key, block))
        valid = protocol.check(params, task, eps, payloads) & protocol.check_members(
            params, plan, task, block, payloads
        )
        if not np.all(valid):
            bad = int(block[np.flatnonzero(~valid)[0]])
            raise SimulationError(
                f"{protocol.name} round {round_index} ({rp.name}): the client's report for "
                f"participant {bad} fails the server's check"
            )
        on_chunk(int(block.size))
        yield ReportChunk(block, eps, group, np.asarray(payloads, dtype=np.float64))


def simulate(
    protocol: Protocol[Any],
    params: Params,
    population: AnyPopulation,
    seed: int,
    *,
    chunk_size: int = 8192,
    progress: ProgressFn | None = None,
) -> SimulationResult:
    """Run ``protocol`` with ``params`` on ``population`` in process; ValueError on bad input.

    ``population`` must have been built for the same run ``seed`` (``build_population(spec,
    seed)``): it carries the private half of the seed. The result is identical whatever
    ``chunk_size`` is, up to the rounding of sums taken in a different grouping.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    study_seed, population_seed = derive_seeds(seed)
    if population_seed != population.population_seed:
        raise ValueError(f"the population was built for seed {population.seed}, not {seed}")
    if population.data_kind != protocol.data_kind:
        raise ValueError(
            f"protocol {protocol.name} takes {protocol.data_kind} data, but the population "
            f"holds {population.data_kind} data"
        )
    started = time.perf_counter()
    # a central-trust protocol's server draws its noise from a secret seed (fedldp.client.seeds)
    plan_seed = noise_seed(seed) if protocol.trust == "central" else study_seed
    plan = protocol.plan(params, population.epsilon, population.metadata, plan_seed)
    charges = check_plan_budget(plan, population.epsilon)
    total = int(sum(rp.cohort.size for rp in plan.rounds))
    done = 0

    def on_chunk(count: int) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress(done, total)

    outputs: list[JSON] = []
    for k, rp in enumerate(plan.rounds):
        broadcast = protocol.broadcast(params, plan, k, outputs)
        task = RoundTask.of(rp, broadcast)
        chunks = _round_chunks(protocol, params, population, task, plan, k, chunk_size, on_chunk)
        outputs.append(protocol.aggregate(params, plan, k, broadcast, chunks))
    result = protocol.finalize(params, plan, outputs)
    return SimulationResult(
        protocol=protocol.name,
        params=params,
        population=population,
        seed=seed,
        result=result,
        plan=plan,
        charges=charges,
        outputs=tuple(outputs),
        elapsed_s=time.perf_counter() - started,
        data_kind=protocol.data_kind,
    )

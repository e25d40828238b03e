"""The broadcast glossary (protocol/core/broadcast.py): every field a catalogue protocol
broadcasts is described, in its ``broadcast_fields`` and so in the catalogue and in the OpenAPI
schema of a task (docs/clients.md relies on both)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedldp.client.population.build import build_population
from fedldp.client.seeds import round_key
from fedldp.client.simulate import fill_from_population
from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base.records import JSON, ReportChunk, RoundTask, jsonable
from fedldp.protocol.core.broadcast import BROADCAST_GLOSSARY, described, glossary_text
from fedldp.protocol.core.streams import UserStreams
from fedldp.protocol.core.wire import TaskReport
from tests.protocol.test_catalogue import _spec

USERS = 800  # enough for every protocol's plan at ε = 4 (user-mean needs 600 at ε >= 1)


def _broadcasts(name: str) -> list[tuple[JSON, JSON]]:
    """(broadcast, what the participants are sent) of every round of a small honest run."""
    protocol = CATALOGUE[name]
    pop = build_population(_spec(protocol, USERS), 1)
    params: Any = protocol.parse_params(fill_from_population(protocol, {}, pop))
    plan = protocol.plan(params, np.full(USERS, 4.0), pop.metadata, 1)
    outputs: list[JSON] = []
    seen = []
    for k, rp in enumerate(plan.rounds):
        broadcast = protocol.broadcast(params, plan, k, outputs)
        sent = protocol.client_broadcast(broadcast)
        seen.append((broadcast, sent))
        rows = protocol.privatize(
            params,
            RoundTask.of(rp, sent),
            pop.data(rp.cohort),
            rp.epsilon,
            rp.groups(),
            UserStreams(round_key(pop.population_seed, k), rp.cohort),
        )
        chunk = ReportChunk(rp.cohort, rp.epsilon, rp.groups(), np.asarray(rows))
        outputs.append(jsonable(protocol.aggregate(params, plan, k, broadcast, [chunk])))
    return seen


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_broadcast_field_is_described(name: str) -> None:
    fields = CATALOGUE[name].broadcast_fields
    keys: set[str] = set()
    for broadcast, sent in _broadcasts(name):
        keys |= broadcast.keys()
        assert sent.keys() <= broadcast.keys()
    assert keys == set(fields), (
        f"{name}: undescribed {keys - set(fields)}, stale {set(fields) - keys}"
    )
    assert all(text.strip() for text in fields.values())
    assert CATALOGUE[name].describe()["broadcast_fields"] == dict(fields)


def test_the_task_schema_carries_the_glossary() -> None:
    schema = TaskReport.model_json_schema()["properties"]["broadcast"]["description"]
    assert glossary_text() in schema
    for key in BROADCAST_GLOSSARY:
        assert f"`{key}`" in schema


def test_an_undescribed_field_is_refused() -> None:
    assert described("lo", lo="mine") == {"lo": "mine"}
    with pytest.raises(ValueError, match="nope"):
        described("lo", "nope")

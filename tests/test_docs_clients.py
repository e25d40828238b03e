"""docs/clients.md: its plain Python client (taken from the page, so the two cannot drift) runs a
hetero-mean-laplace study against a real server and gets the in-process simulator's estimate
for the same seed, each participant drawing its noise from its own fedldp stream."""

from __future__ import annotations

import ast
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.seeds import derive_seeds, round_key
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.streams import UserStreams
from tests.live import sqlite_server

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "clients.md"
RELATIVE = 1e-9  # docs/architecture.md: HTTP and in-process estimates agree up to the order of sums
SEED = 21
USERS = 40


def plain_client_source() -> str:
    """The Python block between the page's plain-client markers."""
    text = GUIDE.read_text(encoding="utf-8")
    found = re.search(
        r"<!-- plain-client:start -->\s*```python\n(.*?)```\s*<!-- plain-client:end -->",
        text,
        re.DOTALL,
    )
    assert found is not None, "docs/clients.md lost its plain-client block"
    return found.group(1)


def test_the_plain_client_imports_nothing_of_fedldp() -> None:
    source = plain_client_source()
    tree = ast.parse(source)
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert imported <= {"math", "random", "time", "collections", "httpx"}, imported
    assert len(source.splitlines()) <= 60  # a page's worth, not a library


def test_the_plain_laplace_draw_has_the_standard_law() -> None:
    """Mean 0 and variance 2 (k = 5 standard errors; false failure < 1e-6 per check)."""
    import random

    client = _load()
    rng = random.Random(3)
    draws = np.array([client["laplace"](rng) for _ in range(40_000)])
    n = draws.size
    assert abs(draws.mean()) <= 5 * np.sqrt(2.0 / n)
    assert abs(draws.var() - 2.0) <= 5 * np.sqrt(20.0 / n)  # Var of z² is E z⁴ − 4 = 20


def _load() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(plain_client_source(), str(GUIDE), "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with sqlite_server(tmp_path_factory.mktemp("guide")) as process:
        yield process.url


@pytest.mark.e2e
def test_the_plain_client_gets_the_simulators_estimate(server: str) -> None:
    client = _load()
    protocol = get_protocol("hetero-mean-laplace")
    spec = PopulationSpec(
        users=USERS, samples=8, distribution="two-point", epsilon_mix=((0.5, 0.5), (2.0, 0.5))
    )
    population = build_population(spec, SEED)
    params = fill_from_population(protocol, {}, population)
    local = simulate(protocol, protocol.parse_params(params), population, SEED)
    study_seed, population_seed = derive_seeds(SEED)
    means = population.data(np.arange(USERS)).user_means()

    with httpx.Client(base_url=server, timeout=30.0) as http:
        body = {"protocol": protocol.name, "params": params, "seed": study_seed}
        created = http.post("/v1/studies", json=body)
        assert created.status_code == 201, created.text
        study = created.json()["id"]
        enrolled = [client["enroll"](http, study, float(e)) for e in population.epsilon]
        assert [pid for pid, _ in enrolled] == list(range(USERS))  # slot i is user i

        def noise(pid: int) -> Any:
            stream = UserStreams(round_key(population_seed, 0), np.array([pid]))
            return lambda: float(stream.laplace(0.0, 1.0, size=(1,))[0])

        errors: list[BaseException] = []

        def run(pid: int, token: str) -> None:
            try:
                with httpx.Client(base_url=server, timeout=30.0) as own:
                    client["participate"](own, study, pid, token, float(means[pid]), noise(pid))
            except BaseException as exc:  # reported below, on the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=pair) for pair in enrolled]
        for thread in threads:  # they wait (the study is enrolling) until it starts
            thread.start()
        started = http.post(f"/v1/studies/{study}/start")
        assert started.status_code == 200, started.text
        for thread in threads:
            thread.join(timeout=60)
        assert errors == []
        result = client["result"](http, study)

    assert result["phase"] == "finished"
    estimate = float(result["estimate"])
    expected = float(np.asarray(local.result.estimate))
    assert abs(estimate - expected) <= RELATIVE * max(abs(expected), 1e-300), (estimate, expected)

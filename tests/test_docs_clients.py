"""docs/clients.md: every code block of the page runs here, taken from the page, so the two cannot
drift (issue 28 item 4), against a real server that has an admin key (the examples must send it
on create and start):

* the curl walkthroughs run in bash, and print what their comments show;
* the plain Python client (no fedldp import) runs hetero-mean-laplace and hetero-mean-rr, each
  participant drawing its uniforms from its own fedldp stream, and gets the in-process
  simulator's estimate for the same seed; its refusals of a round that moved on leave the
  participant pending;
* the page's example run of 600 participants gets an estimate within Hoeffding's bound of the
  weighted mean of the local means it says the estimate targets."""

from __future__ import annotations

import ast
import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.seeds import derive_seeds, round_key
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.client.swarm.server_process import ServerProcess, sqlite_url
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.streams import UserStreams

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "clients.md"
RELATIVE = 1e-9  # docs/architecture.md: HTTP and in-process estimates agree up to the order of sums
SEED = 21
USERS = 40
ADMIN_KEY = "guide-admin-key"
FALSE_FAILURE = 1e-6  # of the statistical check below
BLOCK = re.compile(r"<!-- doc-block: ([\w-]+) -->\s*```(\w+)\n(.*?)```", re.DOTALL)
RUN_HERE = {
    "curl": "bash",
    "curl-leased": "bash",
    "plain-client": "python",
    "plain-client-run": "python",
}
"""Every code block of the page, by name, and its language: each is run by a test below."""


def blocks() -> dict[str, tuple[str, str]]:
    """The page's named code blocks: name → (language, source)."""
    text = GUIDE.read_text(encoding="utf-8")
    return {name: (lang, code) for name, lang, code in BLOCK.findall(text)}


def source(name: str) -> str:
    found = blocks().get(name)
    assert found is not None, f"docs/clients.md lost its {name} block"
    return found[1]


def test_every_code_block_of_the_page_is_run_here() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    fences = len(re.findall(r"^```", text, re.MULTILINE))
    named = blocks()
    assert fences == 2 * len(named), "a code block without a doc-block name is run by no test"
    assert {name: lang for name, (lang, _) in named.items()} == RUN_HERE


def _imports(code: str) -> set[str]:
    tree = ast.parse(code)
    return {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }


def test_the_plain_client_imports_nothing_of_fedldp() -> None:
    client = source("plain-client")
    assert _imports(client) <= {"math", "secrets", "time", "collections", "typing", "httpx"}
    assert _imports(source("plain-client-run")) <= {"os", "random"}
    assert len(client.splitlines()) <= 100  # a page's worth, not a library
    # the token travels as bearer only (a body's "token" is deprecated), here and in curl
    keys = {
        key.value
        for node in ast.walk(ast.parse(client))
        if isinstance(node, ast.Dict)
        for key in node.keys
        if isinstance(key, ast.Constant)
    }
    assert "token" not in keys
    assert '\\"token\\"' not in source("curl")
    assert "Authorization: Bearer $TOKEN" in source("curl")


def _load() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source("plain-client"), str(GUIDE), "exec"), namespace)
    return namespace


def test_the_plain_laplace_draw_has_the_standard_law() -> None:
    """Mean 0 and variance 2 of laplace(uniform()) (k = 5 standard errors: a normal tail below
    1e-6 per check); the uniforms lie strictly inside (0, 1)."""
    client = _load()
    uniforms = np.array([client["uniform"]() for _ in range(40_000)])
    assert uniforms.min() > 0.0
    assert uniforms.max() < 1.0
    draws = np.array([client["laplace"](u) for u in uniforms])
    n = draws.size
    assert abs(draws.mean()) <= 5 * np.sqrt(2.0 / n)
    assert abs(draws.var() - 2.0) <= 5 * np.sqrt(20.0 / n)  # Var of z² is E z⁴ − 4 = 20


def test_the_plain_laplace_draw_is_the_streams_inversion() -> None:
    """The page's inversion of a uniform is the one fedldp's streams use (up to rounding:
    numpy's log1p and the math module's may differ in the last bit)."""
    client = _load()
    stream = UserStreams(round_key(5, 0), np.arange(1000))
    uniforms = UserStreams(round_key(5, 0), np.arange(1000)).random(size=(1000,))
    expected = stream.laplace(0.0, 1.0, size=(1000,))
    drawn = np.array([client["laplace"](float(u)) for u in uniforms])
    np.testing.assert_allclose(drawn, expected, rtol=1e-14, atol=0)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server with an admin key, on a SQLite file."""
    folder = tmp_path_factory.mktemp("guide")
    with ServerProcess(
        database_url=sqlite_url(folder / "fedldp.db"),
        env={"FEDLDP_ADMIN_KEY": ADMIN_KEY},
        log=folder / "server.log",
    ) as process:
        process.wait_healthy()
        yield process.url


@pytest.fixture
def guide_env(server: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment the page's examples read: the server's address and admin key."""
    monkeypatch.setenv("FEDLDP_SERVER", server)
    monkeypatch.setenv("FEDLDP_ADMIN_KEY", ADMIN_KEY)
    return {**os.environ}


@pytest.mark.e2e
def test_the_server_refuses_admin_requests_without_the_key(server: str) -> None:
    """So the examples below, which pass, do send the key on create and start."""
    body = {"protocol": "hetero-mean-rr", "params": {}, "seed": 1}
    with httpx.Client(base_url=server, timeout=30.0) as http:
        refused = http.post("/v1/studies", json=body)
        assert (refused.status_code, refused.json()["code"]) == (401, "admin_key_required")
        created = http.post("/v1/studies", json=body, headers={"X-Admin-Key": ADMIN_KEY})
        study = created.json()["id"]
        refused = http.post(f"/v1/studies/{study}/start")
        assert (refused.status_code, refused.json()["code"]) == (401, "admin_key_required")


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["curl", "curl-leased"])
def test_the_curl_walkthrough_prints_what_its_comments_show(
    name: str, guide_env: dict[str, str]
) -> None:
    missing = [tool for tool in ("bash", "curl", "jq") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the walkthrough needs {', '.join(missing)}")
    script = source(name)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=guide_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    shown = {line.strip() for line in script.splitlines() if line.lstrip().startswith("#")}
    printed = done.stdout.splitlines()
    assert printed, done.stderr
    for line in printed:  # each printed line is shown, as a comment of its own or at a line's end
        assert any(line in comment for comment in shown), (line, done.stdout)


def _population(protocol: str) -> tuple[PopulationSpec, dict[str, Any]]:
    """Two ε groups on the page's two payloads; RR's mean law and Laplace's data range [lo, hi]
    differ so that the mapping onto [-1, 1] is exercised."""
    mix = ((0.5, 0.5), (2.0, 0.5))
    if protocol == "hetero-mean-rr":
        spec = PopulationSpec(users=USERS, samples=8, distribution="two-point", epsilon_mix=mix)
        return spec, {}
    spec = PopulationSpec(
        users=USERS, samples=8, distribution="uniform", low=0.0, high=10.0, epsilon_mix=mix
    )
    return spec, {"lo": 0.0, "hi": 10.0}


def _create(http: httpx.Client, body: dict[str, Any]) -> str:
    created = http.post("/v1/studies", json=body, headers={"X-Admin-Key": ADMIN_KEY})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def _start(http: httpx.Client, study: str) -> None:
    started = http.post(f"/v1/studies/{study}/start", headers={"X-Admin-Key": ADMIN_KEY})
    assert started.status_code == 200, started.text


@pytest.mark.e2e
@pytest.mark.parametrize("protocol_name", ["hetero-mean-laplace", "hetero-mean-rr"])
def test_the_plain_client_gets_the_simulators_estimate(server: str, protocol_name: str) -> None:
    """One thread drives all the participants (the page's passes); each draws its uniforms from
    its own stream of round 0, as the simulator's randomizer does (one per Laplace report, two
    per interval RR report, the rounding's first), so the estimates agree."""
    client = _load()
    protocol = get_protocol(protocol_name)
    spec, given = _population(protocol_name)
    population = build_population(spec, SEED)
    params = fill_from_population(protocol, given, population)
    local = simulate(protocol, protocol.parse_params(params), population, SEED)
    study_seed, population_seed = derive_seeds(SEED)
    means = population.data(np.arange(USERS)).user_means()

    def uniforms(pid: int) -> Any:
        stream = UserStreams(round_key(population_seed, 0), np.array([pid]))
        return lambda: float(stream.random(size=(1,))[0])

    with httpx.Client(base_url=server, timeout=30.0) as http:
        study = _create(http, {"protocol": protocol.name, "params": params, "seed": study_seed})
        users = {}
        for eps in population.epsilon:
            pid, token = client["enroll"](http, study, float(eps))
            users[pid] = client["User"](token, float(means[pid]), uniforms(pid))
        assert list(users) == list(range(USERS))  # slot i is user i
        _start(http, study)
        client["participate"](http, study, users)
        result = client["result"](http, study)

    assert result["phase"] == "finished"
    estimate = float(result["estimate"])
    expected = float(np.asarray(local.result.estimate))
    assert abs(estimate - expected) <= RELATIVE * max(abs(expected), 1e-300), (estimate, expected)


@pytest.mark.e2e
def test_a_report_the_round_moved_past_leaves_the_participant_pending(server: str) -> None:
    """``wrong_round`` (a round not open), then ``round_closed``/``study_not_running`` (its
    deadline passed with the quorum met): ``report`` answers False, and the next task says what
    is left, as the page tells a client to do."""
    client = _load()
    with httpx.Client(base_url=server, timeout=30.0) as http:
        body = {
            "protocol": "hetero-mean-rr",
            "params": {},
            "seed": 3,
            "round_deadline_s": 1.0,
            "quorum": 0.5,
        }
        study = _create(http, body)
        users = {}
        for _ in range(2):
            pid, token = client["enroll"](http, study, 1.0)
            users[pid] = client["User"](token, 0.5, client["uniform"])
        _start(http, study)
        (first, one), (second, other) = users.items()
        todo = client["task"](http, study, first, one)
        assert todo["kind"] == "report"
        assert client["report"](http, study, first, one, {**todo, "round": 1}) is False
        assert client["report"](http, study, first, one, todo) is True
        time.sleep(1.5)  # past the deadline: the round closes on the quorum, without the other
        late = client["report"](http, study, second, other, todo)
        assert late is False
        deadline = time.monotonic() + 30
        while (answer := client["task"](http, study, second, other, hold=1))["kind"] != "done":
            assert time.monotonic() < deadline, answer
        assert answer["reported_rounds"] == []
        client["participate"](http, study, {second: other})  # returns: it is done


@pytest.mark.e2e
def test_the_example_run_estimates_the_weighted_mean_within_theory(
    guide_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The page's run of 600 participants, as written. hetero-mean-rr's estimate is
    Σ w_i c_i Y_i with Y_i = ±1 independent given the data, E[c_i Y_i] = x_i, weights
    w_i = tanh²(ε_i/2)/S_RR and c_i = 1/tanh(ε_i/2); each term lies in an interval of length
    2 w_i c_i, so by Hoeffding |θ̂ − Σ w_i x_i| ≤ t with probability at least 1 − δ for
    t = sqrt(2 ln(2/δ) Σ w_i² c_i²) = sqrt(2 ln(2/δ) / S_RR) (clipping into [-1, 1] only
    brings θ̂ closer, the target lying there)."""
    namespace = _load()
    exec(compile(source("plain-client-run"), str(GUIDE), "exec"), namespace)
    epsilons = np.asarray(namespace["epsilons"], dtype=np.float64)
    s_rr = float(np.sum(np.tanh(epsilons / 2.0) ** 2))
    t = math.sqrt(2.0 * math.log(2.0 / FALSE_FAILURE) / s_rr)
    answer, target = namespace["answer"], float(namespace["target"])
    assert answer["phase"] == "finished"
    assert abs(float(answer["estimate"]) - target) <= t, (answer["estimate"], target, t)
    printed = capsys.readouterr().out
    assert printed.startswith(f"estimate {answer['estimate']:.3f}, target {target:.3f} ±")


@pytest.mark.e2e
def test_the_plain_client_names_the_refusal_of_a_leased_study(server: str) -> None:
    """A hand-written client enrolling in a swarm's (leased) study is told why it may not."""
    client = _load()
    with httpx.Client(base_url=server, timeout=30.0) as http:
        body = {"protocol": "hetero-mean-rr", "params": {}, "seed": 4, "enrollment": "leased"}
        study = _create(http, body)
        with pytest.raises(RuntimeError, match=r"403 .*enrollment_closed"):
            client["enroll"](http, study, 1.0)

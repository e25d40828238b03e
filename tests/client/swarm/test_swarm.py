"""The swarm (client/swarm/run.py) against the real app in process, over ``httpx.ASGITransport``.

The swarm enrolls, privatizes and reports exactly as the in-process simulator does, so for the
same seed its estimate equals ``simulate``'s up to the grouping of sums (relative 1e-9). A real
server process is driven in tests/e2e/test_e2e.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from fedldp.client.api.client import AuthError
from fedldp.client.behaviour import Behaviour
from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.seeds import population_digest
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.client.swarm.agents import SwarmError
from fedldp.client.swarm.prefetch import Prefetch
from fedldp.client.swarm.run import SwarmResult, run_swarm
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import ROWS_CONTEXT
from fedldp.protocol.core.wire.binary import BATCH_MEDIA_TYPE
from fedldp.server.runtime.context import Context
from fedldp.server.settings import Settings
from fedldp.server.web.app import create_app
from fedldp.server.web.binary import decode_batch

REL = 1e-9
URL = "http://fedldp.test"


@pytest.fixture
def app(tmp_path: Path) -> Iterator[FastAPI]:
    application = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'swarm.db'}"))
    try:
        yield application
    finally:
        ctx: Context = application.state.ctx
        ctx.db.dispose()


def simulated(name: str, spec: PopulationSpec, seed: int) -> Any:
    protocol = get_protocol(name)
    population = build_population(spec, seed)
    params = protocol.parse_params(fill_from_population(protocol, {}, population))
    return simulate(protocol, params, population, seed).result.estimate


async def swarm(
    app: FastAPI, protocol_name: str, spec: PopulationSpec, seed: int, **kw: Any
) -> SwarmResult:
    protocol = get_protocol(protocol_name)
    params = fill_from_population(protocol, {}, build_population(spec, seed))
    return await run_swarm(
        URL,
        population=spec,
        seed=seed,
        create=(protocol_name, params),
        progress=False,
        transport=httpx.ASGITransport(app=app),
        **kw,
    )


@pytest.mark.parametrize(
    ("name", "spec", "batch"),
    [
        (
            "user-mean",
            PopulationSpec(users=3000, samples=32, distribution="two-point", mean=0.3),
            1000,
        ),
        (
            "hetero-mean-laplace",
            PopulationSpec(
                users=300, distribution="uniform", low=-0.5, epsilon_mix="0.5:0.5,2:0.5"
            ),
            None,  # one agent per user on the single-participant endpoints
        ),
        (
            "hetero-frequency",
            PopulationSpec(users=1500, distribution="categorical", items=6, epsilon=1.0),
            500,
        ),
    ],
)
async def test_swarm_reproduces_the_simulator(
    app: FastAPI, name: str, spec: PopulationSpec, batch: int | None
) -> None:
    run = await swarm(app, name, spec, 11, batch=batch)
    expected = np.asarray(simulated(name, spec, 11), dtype=np.float64)
    np.testing.assert_allclose(np.asarray(run.result.estimate), expected, rtol=REL, atol=1e-15)
    assert run.study.phase == "finished"
    assert run.result.epsilon_spent.participants == spec.users
    summary = run.to_dict()
    assert summary["study_id"] == run.study.id
    for key in ("estimate", "truth", "error", "error_bar", "epsilon_spent"):
        assert key in summary
    json.dumps(summary, allow_nan=False)


@pytest.mark.parametrize(
    ("name", "users", "rounds"), [("user-mean", 3000, 2), ("hetero-frequency", 1500, 1)]
)
async def test_a_block_asks_once_per_round_and_stops_after_its_last_report(
    app: FastAPI, name: str, users: int, rounds: int
) -> None:
    """A batch answer says when its reporters' task is their last (``RoundTasks.final``): a
    block asks for its tasks once per round it has members in (held while it waits), and not
    again to learn that they are done."""
    if name == "user-mean":
        spec = PopulationSpec(users=users, samples=32, distribution="two-point")
    else:
        spec = PopulationSpec(users=users, distribution="categorical", items=6, epsilon=1.0)
    batch = 500
    run = await swarm(app, name, spec, 11, batch=batch)
    blocks = -(-users // batch)
    assert run.study.phase == "finished"
    assert run.stats.report_requests == blocks * rounds
    assert run.stats.task_requests == blocks * rounds + run.stats.waits


async def test_leasing_swarms_share_one_study(app: FastAPI) -> None:
    spec = PopulationSpec(users=5000, samples=8, distribution="two-point", mean=-0.2)
    kw: dict[str, Any] = {"batch": 1000, "name": "shared", "lease": True}
    first, second = await asyncio.gather(
        swarm(app, "user-mean", spec, 4, **kw), swarm(app, "user-mean", spec, 4, **kw)
    )
    assert first.study.id == second.study.id
    assert first.result.estimate == second.result.estimate
    expected = simulated("user-mean", spec, 4)
    assert first.result.estimate == pytest.approx(expected, rel=REL)
    assert first.study.n_participants == 5000
    # every user reported exactly once per round it was in, whichever swarm ran it
    assert sum(r.received for r in first.study.rounds) == 5000
    assert first.stats.reports + second.stats.reports == 5000
    # each says how many users it served (a swarm that asks once every block is leased gets none)
    served = [first.to_dict()["users_served"], second.to_dict()["users_served"]]
    assert sum(served) == 5000
    assert served == [first.users_served, second.users_served]


class Recording(httpx.ASGITransport):
    """The app in process, remembering what enrollment answers were asked for, each batch
    request's credentials (tokens or blocks), whether each batch body came binary
    (``application/vnd.fedldp.batch``) and whether report batches carried their rows as one
    float64 array (neither JSON lists nor base64)."""

    def __init__(self, app: FastAPI) -> None:
        super().__init__(app=app)
        self.credentials: list[tuple[str, bool, bool]] = []
        self.block_only: list[bool] = []
        self.binary: list[bool] = []
        self.packed: list[bool] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith(("/participants/batch", "/tasks", "/reports/batch")):
            self.binary.append(request.headers["content-type"] == BATCH_MEDIA_TYPE)
            body, kept = decode_batch(await request.aread(), values=10**7, keep=KEEP)
            if path.endswith("/participants/batch"):
                self.block_only.append(body["block_only"])
            else:
                tokens, blocks = body.get("tokens"), body.get("blocks")
                self.credentials.append(
                    (path.rsplit("/", 1)[-1], tokens is not None, blocks is not None)
                )
            if path.endswith("/reports/batch"):
                rows = kept.get(ROWS_CONTEXT)
                forms = ("payloads", "packed")
                self.packed.append(
                    rows is not None and rows.ndim == 2 and not any(f in body for f in forms)
                )
        return await super().handle_async_request(request)


KEEP = frozenset({ROWS_CONTEXT})


@pytest.mark.parametrize("lease", [False, True])
async def test_batch_agents_send_block_tokens_not_each_token(app: FastAPI, lease: bool) -> None:
    spec = PopulationSpec(users=2500, samples=4, distribution="two-point", mean=0.1)
    protocol = get_protocol("user-mean")
    transport = Recording(app)
    shared: dict[str, Any] = {"name": "blocks", "lease": True} if lease else {}
    run = await run_swarm(
        URL,
        population=spec,
        seed=5,
        create=("user-mean", fill_from_population(protocol, {}, build_population(spec, 5))),
        progress=False,
        transport=transport,
        batch=1000,
        **shared,
    )
    assert run.result.estimate == pytest.approx(simulated("user-mean", spec, 5), rel=REL)
    kinds = {kind for kind, _, _ in transport.credentials}
    assert kinds == {"tasks", "batch"}
    assert all(blocks and not tokens for _, tokens, blocks in transport.credentials)
    assert transport.block_only
    assert all(transport.block_only)  # no user's own token was computed
    assert transport.packed
    assert all(transport.packed)
    assert transport.binary
    assert all(transport.binary)


async def test_a_swarm_with_another_population_cannot_join(app: FastAPI) -> None:
    spec = PopulationSpec(users=400, samples=4, distribution="two-point", mean=0.1)
    kw: dict[str, Any] = {"batch": 400, "name": "mine", "lease": True}
    await swarm(app, "user-mean", spec, 1, **kw)
    with pytest.raises(SwarmError) as caught:
        await swarm(app, "user-mean", spec, 2, **kw)
    assert caught.value.code == "study_mismatch"


async def test_a_swarm_joins_only_a_study_declared_alike(app: FastAPI) -> None:
    """Same name and seed, another population or other params: refused (by the server, which
    keeps the creator's declaration and a keyed digest of its population), never answered."""
    spec = PopulationSpec(users=300, samples=4, distribution="two-point", mean=0.1)
    kw: dict[str, Any] = {"batch": 300, "name": "declared", "lease": True}
    first = await swarm(app, "user-mean", spec, 3, **kw)
    assert first.study.population_digest is not None
    other = spec.model_copy(update={"mean": -0.6})
    with pytest.raises(SwarmError) as caught:
        await swarm(app, "user-mean", other, 3, **kw)
    assert caught.value.code == "study_mismatch"
    assert "population_digest" in str(caught.value)
    with pytest.raises(SwarmError) as caught:
        await run_swarm(
            URL,
            population=spec,
            seed=3,
            create=("user-mean", {"samples_per_user": 4, "bound": 2.0}),
            progress=False,
            transport=httpx.ASGITransport(app=app),
            **kw,
        )
    assert caught.value.code == "study_mismatch"
    assert "params" in str(caught.value)


async def test_a_swarm_with_other_behaviour_cannot_join(app: FastAPI) -> None:
    """Issue 23: a swarm that differed from a study's creator only in its behaviour options
    (which draw other users' roles) joined it, leased nothing and printed the creator's estimate
    under its own options. The options are in the population digest: the same ones join, any
    other (none, another fraction, another attack, another option) is refused."""
    spec = PopulationSpec(users=400, samples=4, distribution="two-point", mean=0.1)
    kw: dict[str, Any] = {"batch": 400, "name": "behaved", "lease": True}
    attack = Behaviour(attack="output", attackers=0.1)
    first = await swarm(app, "hetero-mean-laplace", spec, 1, behaviour=attack, **kw)
    again = await swarm(app, "hetero-mean-laplace", spec, 1, behaviour=attack, **kw)
    assert again.study_id == first.study_id
    assert again.users_served == 0
    assert again.result.estimate == first.result.estimate
    others = [
        None,
        Behaviour(),
        Behaviour(attack="output", attackers=0.2),
        Behaviour(attack="input", attackers=0.1),
        Behaviour(attack="output", attackers=0.1, late_fraction=0.1, late_delay_s=0.01),
    ]
    for other in others:
        with pytest.raises(SwarmError) as caught:
            await swarm(app, "hetero-mean-laplace", spec, 1, behaviour=other, **kw)
        assert caught.value.code == "study_mismatch"
        assert "population_digest" in str(caught.value)  # the field that differs
        assert "--attack" in str(caught.value)  # and what it covers
    honest = {**kw, "name": "honest"}
    plain = await swarm(app, "hetero-mean-laplace", spec, 1, **honest)
    # an honest swarm's digest is its population's alone, as before behaviour counted
    assert plain.study.population_digest == population_digest(1, spec.model_dump(mode="json"))
    with pytest.raises(SwarmError) as caught:
        await swarm(app, "hetero-mean-laplace", spec, 1, behaviour=attack, **honest)
    assert caught.value.code == "study_mismatch"


def test_the_population_digest_hides_the_population() -> None:
    """A keyed digest: the same spec under another seed gives another digest, so the server
    cannot tell which population a digest belongs to without the private seed."""
    spec = {"users": 10, "distribution": "two-point", "mean": 0.1}
    digest = population_digest(1, spec)
    assert digest == population_digest(1, dict(reversed(spec.items())))  # canonical JSON
    assert digest != population_digest(2, spec)
    assert digest != population_digest(1, {**spec, "mean": -0.6})
    plain = hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode())
    assert digest != plain.hexdigest()


async def test_lease_needs_a_name(app: FastAPI) -> None:
    spec = PopulationSpec(users=10, distribution="two-point")
    with pytest.raises(ValueError, match="lease"):
        await swarm(app, "hetero-mean-rr", spec, 1, lease=True)


async def test_leasing_needs_the_admin_key_when_the_server_has_one(tmp_path: Path) -> None:
    application = create_app(
        Settings(database_url=f"sqlite:///{tmp_path / 'admin.db'}", admin_key="k")
    )
    spec = PopulationSpec(users=600, samples=4, distribution="two-point", mean=0.1)
    kw: dict[str, Any] = {"batch": 300, "name": "guarded", "lease": True}
    try:
        run = await swarm(application, "user-mean", spec, 3, admin_key="k", **kw)
        assert run.study.phase == "finished"
        with pytest.raises(AuthError):
            await swarm(application, "user-mean", spec, 3, **{**kw, "name": "other"})
    finally:
        ctx: Context = application.state.ctx
        ctx.db.dispose()


async def test_batch_agents_use_the_data_drawn_during_enrollment(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The swarm draws its blocks' data while the server enrolls them (fedldp.client.swarm.prefetch)
    and its agents privatize from them: every block once, and the same estimate."""
    drawn: list[int] = []
    served: list[int] = []
    draw_ahead, data = Prefetch.draw_ahead, Prefetch.data

    async def spy_ahead(self: Prefetch) -> None:
        await draw_ahead(self)
        drawn.append(len(self._drawn))

    def spy_data(self: Prefetch, slots: Any) -> Any:
        found = self._where(np.asarray(slots, dtype=np.int64))
        served.append(int(found is not None and found[0] in self._drawn))
        return data(self, slots)

    monkeypatch.setattr(Prefetch, "draw_ahead", spy_ahead)
    monkeypatch.setattr(Prefetch, "data", spy_data)
    spec = PopulationSpec(users=3000, samples=32, distribution="two-point", mean=0.3)
    run = await swarm(app, "user-mean", spec, 11, batch=1000)
    np.testing.assert_allclose(
        np.asarray(run.result.estimate), simulated("user-mean", spec, 11), rtol=REL, atol=1e-15
    )
    assert drawn == [3]  # all three blocks, before the study started
    assert len(served) == 6  # two rounds of three blocks
    assert all(served)  # each from the data drawn ahead


class Intruder(httpx.ASGITransport):
    """The app in process, where an anonymous caller posts ``posts`` enrollments (alternately
    single and batch, no credential) into the study right before each of the swarm's first
    enrollment batches: they race the swarm inside its enrollment. Their answers are kept."""

    def __init__(self, app: FastAPI, posts: int) -> None:
        super().__init__(app=app)
        self.posts = posts
        self.answers: list[httpx.Response] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/participants/batch") and len(self.answers) < self.posts:
            study = path.removesuffix("/batch")
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app)) as anon:
                for i in range(self.posts):
                    single = i % 2 == 0
                    url = f"{URL}{study}" if single else f"{URL}{path}"
                    body = {"epsilon": 1.0} if single else {"epsilons": [1.0, 1.0]}
                    self.answers.append(await anon.post(url, json=body))
        return await super().handle_async_request(request)


async def test_anonymous_enrollments_cannot_sink_a_leasing_swarm(app: FastAPI) -> None:
    """Issue 23 item 0, the probe: while a leasing swarm of 20,000 enrolled its blocks, one
    anonymous ``POST …/participants`` took an id of its range and the study failed a round
    short of its quorum (at the deadline). The swarm's study is now ``leased``: the five posts
    racing it are refused with 403 ``enrollment_closed`` and the study finishes with the
    simulator's estimate, every user of the population reporting."""
    spec = PopulationSpec(users=20_000, samples=4, distribution="two-point", mean=0.25)
    transport = Intruder(app, posts=5)
    protocol = get_protocol("user-mean")
    run = await run_swarm(
        URL,
        population=spec,
        seed=9,
        create=("user-mean", fill_from_population(protocol, {}, build_population(spec, 9))),
        progress=False,
        transport=transport,
        batch=2000,
        name="raced",
        lease=True,
    )
    assert len(transport.answers) == 5
    for answer in transport.answers:
        assert answer.status_code == 403, answer.text
        assert answer.json()["code"] == "enrollment_closed"
    assert run.study.enrollment == "leased"
    assert run.study.phase == "finished"
    assert run.study.n_participants == 20_000
    assert sum(r.received for r in run.study.rounds) == 20_000
    assert run.result.estimate == pytest.approx(simulated("user-mean", spec, 9), rel=REL)


async def test_a_leasing_swarm_does_not_join_an_open_study(app: FastAPI) -> None:
    """A study anyone may enroll in cannot hold a leasing population (an anonymous user would
    take one of its places): the swarm refuses it at once, naming the field."""
    spec = PopulationSpec(users=300, samples=4, distribution="two-point", mean=0.1)
    protocol = get_protocol("user-mean")
    params = fill_from_population(protocol, {}, build_population(spec, 3))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=URL) as c:
        created = await c.post(
            "/v1/studies",
            json={"protocol": "user-mean", "params": params, "seed": 1, "name": "open-one"},
        )
        assert created.status_code == 201, created.text
    with pytest.raises(SwarmError) as caught:
        await swarm(app, "user-mean", spec, 3, batch=300, name="open-one", lease=True)
    assert caught.value.code == "study_mismatch"


class Refusing(httpx.ASGITransport):
    """The app in process, except that the first enrollment batch is answered as a server
    answers ids another caller took first (409 ``participant_exists``)."""

    def __init__(self, app: FastAPI) -> None:
        super().__init__(app=app)
        self.batches = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/participants/batch"):
            self.batches += 1
            if self.batches == 1:
                detail = "some of participant ids 0..2999 are enrolled already"
                body = {"code": "participant_exists", "detail": detail}
                return httpx.Response(409, json=body)
        return await super().handle_async_request(request)


@pytest.mark.parametrize("lease", [False, True])
async def test_a_swarm_says_at_once_which_users_were_not_enrolled(
    app: FastAPI, lease: bool
) -> None:
    """A refused enrollment ends the swarm at once with the ids and the server's reason, not
    a round short of its quorum at the deadline (600 s by default)."""
    spec = PopulationSpec(users=3000, samples=4, distribution="two-point", mean=0.1)
    protocol = get_protocol("user-mean")
    shared: dict[str, Any] = {"name": "refused", "lease": True} if lease else {}
    began = asyncio.get_running_loop().time()
    with pytest.raises(SwarmError) as caught:
        await run_swarm(
            URL,
            population=spec,
            seed=2,
            create=("user-mean", fill_from_population(protocol, {}, build_population(spec, 2))),
            progress=False,
            transport=Refusing(app),
            batch=1000,
            **shared,
        )
    assert asyncio.get_running_loop().time() - began < 30
    assert caught.value.code == "enrollment_refused"
    assert "participant_exists" in str(caught.value)
    assert re.search(r"participant ids \d+\.\.\d+", str(caught.value))


async def test_a_swarm_joining_a_study_whose_ids_were_leased_stops_before_enrolling(
    app: FastAPI,
) -> None:
    """A study with no participant yet but some ids leased by another caller: the swarm's first
    chunk lease answers other ids than its population slots, and the swarm stops with
    ``enrollment_mismatch`` (a SwarmError, not an exception group of its enrollment tasks),
    leaving nobody enrolled while the following chunks were being leased."""
    spec = PopulationSpec(users=120_000, samples=1, distribution="two-point", mean=0.1)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=URL) as http:
        protocol = get_protocol("user-mean")
        params = fill_from_population(protocol, {}, build_population(spec, 1))
        body = {"protocol": "user-mean", "params": params, "seed": 1}
        study = (await http.post("/v1/studies", json=body)).json()
        taken = await http.post(f"/v1/studies/{study['id']}/leases", json={"size": 7})
        assert taken.status_code == 201
    with pytest.raises(SwarmError) as caught:
        await run_swarm(
            URL, population=spec, seed=1, study_id=study["id"], progress=False, transport=transport
        )
    assert caught.value.code == "enrollment_mismatch"
    assert "leased ids 7..50006, not population slots 0..49999" in str(caught.value)
    async with httpx.AsyncClient(transport=transport, base_url=URL) as http:
        assert (await http.get(f"/v1/studies/{study['id']}")).json()["n_participants"] == 0


async def test_a_swarm_with_other_round_rules_cannot_join(app: FastAPI) -> None:
    """Another quorum, round deadline or ε range than the creator's: refused, naming the field
    (the swarm would print the creator's result under its own rules)."""
    spec = PopulationSpec(users=300, samples=4, distribution="two-point", mean=0.1)
    kw: dict[str, Any] = {"batch": 300, "name": "rules", "lease": True}
    first = await swarm(app, "user-mean", spec, 3, **kw)
    assert first.study.phase == "finished"
    for other in ({"quorum": 0.8}, {"round_deadline_s": 30.0}, {"epsilon_max": 2.0}):
        with pytest.raises(SwarmError) as caught:
            await swarm(app, "user-mean", spec, 3, **kw, **other)
        assert caught.value.code == "study_mismatch"
        assert next(iter(other)) in str(caught.value)


async def test_a_population_outside_the_protocol_s_data_range_is_refused_before_a_study(
    app: FastAPI,
) -> None:
    """memo-1bitmean clips to [0, m]: a swarm of the ±1 two-point law is refused with
    ``invalid_population`` (naming the range and the law) before it creates a study, and a
    swarm joining an existing study of it by id is refused before it enrolls anyone."""
    spec = PopulationSpec(users=200, distribution="two-point", mean=0.2)
    with pytest.raises(SwarmError) as caught:
        await swarm(app, "memo-1bitmean", spec, 1)
    assert caught.value.code == "invalid_population"
    assert "[0, 1]" in str(caught.value)
    assert "two-point(bound=1, mu=0.2)" in str(caught.value)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=URL) as http:
        assert (await http.get("/v1/studies")).json()["studies"] == []
        body = {"protocol": "memo-1bitmean", "params": {}, "seed": 1}
        study = (await http.post("/v1/studies", json=body)).json()
    with pytest.raises(SwarmError) as caught:
        await run_swarm(
            URL, population=spec, seed=1, study_id=study["id"], progress=False, transport=transport
        )
    assert caught.value.code == "invalid_population"
    async with httpx.AsyncClient(transport=transport, base_url=URL) as http:
        assert (await http.get(f"/v1/studies/{study['id']}")).json()["n_participants"] == 0

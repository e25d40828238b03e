"""Crypto-shredding of central-trust contributions (server/runtime/keys.py): the raw local means
never reach the database files in the clear, and after a study finishes, fails or is cancelled their
bytes are nowhere in the SQLite database, its WAL or the key store, even when the server died
between ending the study and destroying its key."""

from __future__ import annotations

import os
import stat
import struct
import tempfile
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from fedldp.protocol.core.base.records import FloatArray
from fedldp.protocol.core.wire import Enrollment, ResultView, StudyView
from fedldp.server.runtime.context import Context
from fedldp.server.runtime.keys import KeyMissing, KeyStore, default_key_dir
from fedldp.server.services.rounds import sweep
from fedldp.server.settings import Settings
from fedldp.server.store import repository as repo
from fedldp.server.store.db import Database
from fedldp.server.store.tables import ContributionRow
from fedldp.server.web.app import create_app
from tests.server.helpers import (
    app_context,
    create_study,
    enroll,
    expect_error,
    expire_round,
    start,
    submit_batch,
)

N = 60
STUDY = "0123456789abcdef0123456789abcdef"


def test_a_key_is_written_atomically_private_and_destroyed(tmp_path: Path) -> None:
    store = KeyStore(tmp_path / "keys")
    store.create(STUDY)
    assert store.studies() == [STUDY]
    assert os.listdir(store.directory) == [f"{STUDY}.key"]  # no temporary file left behind
    assert stat.S_IMODE(os.stat(store.directory / f"{STUDY}.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.directory).st_mode) == 0o700
    rows = [struct.pack("<2d", 0.25, 3.0), struct.pack("<2d", -0.5, 7.0)]
    sealed = store.encrypt(STUDY, 0, [4, 9], rows)
    assert all(row not in blob for row, blob in zip(rows, sealed, strict=True))
    assert store.decrypt(STUDY, 0, [4, 9], sealed) == rows
    with pytest.raises(ValueError, match="participant 4"):  # a row moved to someone else
        store.decrypt(STUDY, 0, [4, 9], sealed[::-1])
    with pytest.raises(ValueError, match="round 1"):  # or to another round
        store.decrypt(STUDY, 1, [4, 9], sealed)
    assert store.destroy(STUDY) is True
    assert store.destroy(STUDY) is False
    assert store.studies() == []
    with pytest.raises(KeyMissing):
        store.decrypt(STUDY, 0, [4, 9], sealed)
    with pytest.raises(ValueError, match="not a study id"):
        store.create("../escape")


def test_the_default_key_directory_is_beside_the_sqlite_file(tmp_path: Path) -> None:
    assert default_key_dir(f"sqlite:///{tmp_path}/x.db") == tmp_path / "x.db.keys"
    elsewhere = default_key_dir("postgresql+psycopg://u@h/db")
    assert elsewhere == default_key_dir("sqlite://")  # in-memory: the same per-user directory


def test_the_default_key_directory_survives_a_new_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reproduction of key_unavailable after a restart on PostgreSQL: the default was under
    the temporary directory, which a restart may replace (systemd's PrivateTmp, a container,
    TMPDIR). Now it is the user's state directory, whatever TMPDIR says."""
    url = "postgresql+psycopg://u@h/db"
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    home = default_key_dir(url)
    assert home == Path.home() / ".local" / "state" / "fedldp" / "keys"
    for run in ("first", "after-restart"):
        (tmp_path / run).mkdir()
        monkeypatch.setenv("TMPDIR", str(tmp_path / run))
        monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
        assert tempfile.gettempdir() == str(tmp_path / run)
        assert default_key_dir(url) == home
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_key_dir(url) == tmp_path / "state" / "fedldp" / "keys"


def _files(ctx: Context) -> dict[Path, bytes]:
    """Every byte the server keeps on disk for the study: database, WAL, shared memory, keys."""
    database = Path(ctx.settings.database_url.removeprefix("sqlite:///"))
    paths = [Path(f"{database}{suffix}") for suffix in ("", "-wal", "-shm")]
    if ctx.keys.directory.is_dir():
        paths += sorted(ctx.keys.directory.iterdir())
    return {p: p.read_bytes() for p in paths if p.exists()}


def _leaks(ctx: Context, means: FloatArray) -> list[tuple[str, float]]:
    """(file, mean) for every raw mean whose float64 bytes appear in a file."""
    files = _files(ctx)
    return [
        (p.name, float(mu))
        for mu in means
        for p, data in files.items()
        if struct.pack("<d", float(mu)) in data
    ]


async def _running(
    client: httpx.AsyncClient, app: FastAPI
) -> tuple[str, list[Enrollment], FloatArray]:
    study = await create_study(client, "central-wme", {}, noise_seed=3, round_deadline_s=60)
    people = await enroll(client, study.id, [1.0] * N)
    await start(client, study.id)
    assert app_context(app).keys.studies() == [study.id]
    means = np.random.default_rng(11).uniform(-0.9, 0.9, N)  # 8 random bytes each: no collision
    return study.id, people, means


def _sqlite(database_url: str) -> None:
    if not database_url.startswith("sqlite"):
        pytest.skip("scans the SQLite files (PostgreSQL's are the server's, not ours)")


async def test_no_raw_mean_is_on_disk_after_a_study_finishes(
    client: httpx.AsyncClient, app: FastAPI, database_url: str
) -> None:
    _sqlite(database_url)
    ctx = app_context(app)
    study_id, people, means = await _running(client, app)
    rows = [[float(mu), 5.0] for mu in means]
    await submit_batch(client, study_id, 0, "statistic", people[: N // 2], rows[: N // 2])
    assert _leaks(ctx, means) == []  # stored encrypted from the start: the WAL never had them
    await submit_batch(client, study_id, 0, "statistic", people[N // 2 :], rows[N // 2 :])
    result = ResultView.model_validate_json(
        (await client.get(f"/v1/studies/{study_id}/result")).content
    )
    assert result.phase == "finished"
    assert ctx.keys.studies() == []
    assert _leaks(ctx, means) == []
    wal = os.stat(database_url.removeprefix("sqlite:///") + "-wal")
    assert wal.st_size == 0  # checkpointed and truncated after the deletion


async def test_no_raw_mean_is_on_disk_after_a_study_is_cancelled(
    client: httpx.AsyncClient, app: FastAPI, database_url: str
) -> None:
    _sqlite(database_url)
    study_id, people, means = await _running(client, app)
    await submit_batch(client, study_id, 0, "statistic", people, [[float(m), 4.0] for m in means])
    # all reported: the study finished; a second one is cancelled half way
    study_id, people, means = await _running(client, app)
    half = N // 2
    await submit_batch(
        client, study_id, 0, "statistic", people[:half], [[float(m), 4.0] for m in means[:half]]
    )
    response = await client.post(f"/v1/studies/{study_id}/cancel")
    assert StudyView.model_validate_json(response.content).phase == "cancelled"
    assert app_context(app).keys.studies() == []
    assert _leaks(app_context(app), means[:half]) == []


async def test_no_raw_mean_is_on_disk_after_a_study_fails(
    client: httpx.AsyncClient, app: FastAPI, database_url: str
) -> None:
    _sqlite(database_url)
    ctx = app_context(app)
    study_id, people, means = await _running(client, app)
    few = N // 4  # below the quorum
    await submit_batch(
        client, study_id, 0, "statistic", people[:few], [[float(m), 2.0] for m in means[:few]]
    )
    expire_round(ctx, study_id, 0)
    assert sweep(ctx) == 1
    view = StudyView.model_validate_json((await client.get(f"/v1/studies/{study_id}")).content)
    assert view.phase == "failed"
    assert ctx.keys.studies() == []
    assert _leaks(ctx, means[:few]) == []


async def test_a_crash_before_the_key_is_destroyed_is_repaired_after_restart(
    client: httpx.AsyncClient,
    app: FastAPI,
    settings: Settings,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The study ends (the commit that deletes its contributions), then the process dies before
    its key is destroyed; the restarted server's sweeper destroys it."""
    study_id, people, means = await _running(client, app)

    def killed(self: KeyStore, study: str) -> bool:
        raise SystemExit("killed between the commit and the key's destruction")

    monkeypatch.setattr(KeyStore, "destroy", killed)
    with pytest.raises(SystemExit):
        await submit_batch(
            client, study_id, 0, "statistic", people, [[float(m), 6.0] for m in means]
        )
    monkeypatch.undo()
    app_context(app).db.dispose()  # the dead process's connections
    restarted = Context(settings, Database(settings))
    try:
        assert restarted.keys.studies() == [study_id]  # left behind by the crash
        other = KeyStore(restarted.keys.directory)
        other.create(STUDY)  # a key of a study this database does not know is left alone
        sweep(restarted)
        assert restarted.keys.studies() == [STUDY]
        with restarted.transaction() as session:
            row = repo.get_study(session, study_id)
            assert row is not None
            assert row.phase == "finished"
        if database_url.startswith("sqlite"):
            other.destroy(STUDY)
            assert _leaks(restarted, means) == []
    finally:
        restarted.db.dispose()


async def test_the_database_holds_only_ciphertext_of_a_running_study(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    """On every backend (PostgreSQL's pg_wal and data files get these rows' bytes)."""
    study_id, people, means = await _running(client, app)
    few = N // 4
    await submit_batch(
        client, study_id, 0, "statistic", people[:few], [[float(m), 2.0] for m in means[:few]]
    )
    with app_context(app).transaction() as session:
        blobs = [bytes(b) for b in session.scalars(select(ContributionRow.payload)).all()]
    assert len(blobs) == few
    assert {len(b) for b in blobs} == {12 + 16 + 16}  # nonce, two float64s, tag
    assert not [m for m in means[:few] for b in blobs if struct.pack("<d", float(m)) in b]


async def test_an_unwritable_key_directory_refuses_central_studies_with_a_code(
    client: httpx.AsyncClient, app: FastAPI, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_bytes(b"")
    app_context(app).keys = KeyStore(blocker / "keys")
    response = await client.post(
        "/v1/studies", json={"protocol": "central-wme", "params": {}, "seed": 1}
    )
    body = expect_error(response, 503, "key_unavailable")
    assert "not-a-directory" in body.detail
    await create_study(client, "hetero-mean-rr")  # local trust needs no key


async def _view(client: httpx.AsyncClient, study_id: str) -> StudyView:
    return StudyView.model_validate_json((await client.get(f"/v1/studies/{study_id}")).content)


async def test_a_replica_without_the_study_key_answers_503_and_fails_nothing(
    client: httpx.AsyncClient, app: FastAPI, settings: Settings, tmp_path: Path
) -> None:
    """A server whose FEDLDP_KEY_DIR is not the study's (a replica configured apart, a key
    directory lost in a redeployment): every report is refused with 503 key_unavailable, naming
    the setting, and nothing is stored; its sweeper leaves the round open past its deadline
    instead of failing the study for every replica. A server with the key finishes it."""
    study = await create_study(client, "central-wme", {}, noise_seed=3, quorum=0.5)
    people = await enroll(client, study.id, [1.0] * N)
    await start(client, study.id)
    means = np.random.default_rng(11).uniform(-0.9, 0.9, N)
    apart = create_app(
        settings.model_copy(update={"key_dir": tmp_path / "elsewhere"}), sweeper=False
    )
    transport = httpx.ASGITransport(app=apart)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://apart") as other:
            one = people[0]
            single = await other.post(
                f"/v1/studies/{study.id}/reports",
                json={"participant_id": one.participant_id, "round": 0,
                      "payload": {"kind": "statistic", "values": [0.1, 2.0]}},
                headers={"Authorization": f"Bearer {one.token}"},
            )  # fmt: skip
            error = expect_error(single, 503, "key_unavailable")
            assert "FEDLDP_KEY_DIR" in error.detail
            batch = await other.post(
                f"/v1/studies/{study.id}/reports/batch",
                json={"round": 0, "kind": "statistic",
                      "participant_ids": [p.participant_id for p in people],
                      "tokens": [p.token for p in people],
                      "payloads": [[float(m), 2.0] for m in means]},
            )  # fmt: skip
            expect_error(batch, 503, "key_unavailable")
            assert (await _view(client, study.id)).rounds[0].received == 0
        half = N // 2 + 1  # meets the quorum; the server with the key stores them
        rows = [[float(m), 2.0] for m in means[:half]]
        await submit_batch(client, study.id, 0, "statistic", people[:half], rows)
        expire_round(app_context(apart), study.id, 0)
        assert sweep(app_context(apart)) == 0  # it cannot decrypt: the round stays open
        view = await _view(client, study.id)
        assert (view.phase, view.rounds[0].status) == ("running", "open")
        assert sweep(app_context(app)) == 1
        assert (await _view(client, study.id)).phase == "finished"
    finally:
        app_context(apart).db.dispose()


async def test_a_local_trust_study_ends_without_shredding(
    client: httpx.AsyncClient, app: FastAPI, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local-trust study has no contributions and no key: its end takes no truncating WAL
    checkpoint (a central-trust one's does, above)."""
    ctx = app_context(app)
    checkpoints: list[bool] = []
    checkpoint = ctx.db.checkpoint

    def counted(*, passive: bool = False) -> bool:
        checkpoints.append(passive)
        return checkpoint(passive=passive)

    monkeypatch.setattr(ctx.db, "checkpoint", counted)
    study = await create_study(client, "hetero-mean-laplace")
    people = await enroll(client, study.id, [1.0] * 4)
    await start(client, study.id)
    await submit_batch(client, study.id, 0, "scalar", people, [[0.1]] * 4)
    result = ResultView.model_validate_json(
        (await client.get(f"/v1/studies/{study.id}/result")).content
    )
    assert result.phase == "finished"
    assert False not in checkpoints  # no truncating checkpoint (the sweeper's are passive)
    assert ctx.keys.studies() == []

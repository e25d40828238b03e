"""Crypto-shredding of central-trust contributions (server/keys.py): the raw local means never
reach the database files in the clear, and after a study finishes, fails or is cancelled their
bytes are nowhere in the SQLite database, its WAL or the key store, even when the server died
between ending the study and destroying its key."""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from fedldp.protocol.core.base.records import FloatArray
from fedldp.protocol.core.wire import Enrollment, ResultView, StudyView
from fedldp.server import repository as repo
from fedldp.server.context import Context
from fedldp.server.db import Database
from fedldp.server.keys import KeyMissing, KeyStore, default_key_dir
from fedldp.server.rounds import sweep
from fedldp.server.settings import Settings
from fedldp.server.tables import ContributionRow
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
    assert elsewhere.name.startswith("fedldp-keys-")


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
    body = expect_error(response, 500, "key_unavailable")
    assert "not-a-directory" in body.detail
    await create_study(client, "hetero-mean-rr")  # local trust needs no key

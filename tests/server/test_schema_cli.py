"""``python -m fedldp.server db upgrade|current|history`` (server/store/schema_cli.py), in
process."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from fedldp.server.__main__ import main
from fedldp.server.store.migrations.legacy import legacy_metadata
from fedldp.server.store.schema import head

HEAD = head()


def db(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["db", *argv])
    out, err = capsys.readouterr()
    assert isinstance(exit_info.value.code, int)
    return exit_info.value.code, out, err


def test_current_upgrade_and_history(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--database-url", database_url]
    if database_url.startswith("sqlite"):
        Path(database_url.removeprefix("sqlite:///")).touch()  # an empty database
    assert db(capsys, "current", *url) == (
        0,
        f"empty: no fedldp tables (the server creates them on start; head is {HEAD})\n",
        "",
    )
    assert db(capsys, "upgrade", *url) == (0, f"created the schema at {HEAD} (head)\n", "")
    assert db(capsys, "upgrade", *url) == (0, f"{HEAD} (head): nothing to do\n", "")
    assert db(capsys, "current", *url) == (0, f"{HEAD} (head)\n", "")
    code, out, _ = db(capsys, "history", *url)
    assert code == 0
    assert out.splitlines()[0].startswith("0001_initial: Initial schema")
    assert f"{HEAD} (head, current): " in out


def test_current_of_a_create_all_database_then_upgrade(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    legacy_metadata("0001_initial").create_all(engine)
    engine.dispose()
    code, out, _ = db(capsys, "current", "--database-url", url)
    assert code == 0
    assert out.startswith("none: tables made before migrations, equal to revision 0001_initial")
    assert db(capsys, "upgrade", "--database-url", url) == (
        0,
        f"stamped 0001_initial (made before migrations), upgraded from 0001_initial to {HEAD} "
        "(head)\n",
        "",
    )


def test_a_database_newer_than_the_code_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    assert db(capsys, "upgrade", "--database-url", url)[0] == 0
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0099_next'"))
    engine.dispose()
    for command in ("current", "upgrade"):
        code, out, err = db(capsys, command, "--database-url", url)
        assert (code, out) == (1, "")
        assert err.startswith("error: schema_too_new: the database is at schema revision 0099_next")


def test_current_of_a_missing_sqlite_file_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "absent.db"
    code, out, err = db(capsys, "current", "--database-url", f"sqlite:///{path}")
    assert (code, out, err) == (1, "", f"error: no_database: no SQLite database at {path}\n")
    assert not path.exists()

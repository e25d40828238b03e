"""``fedldp db`` (client/cli/db.py) runs ``python -m fedldp.server db`` in its place (the
commands themselves are tested in process: tests/server/test_schema_cli.py)."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest

from fedldp.client.cli.main import main
from fedldp.client.swarm.server_process import sqlite_url
from tests.client.cli.test_remote import FEDLDP


def fedldp_db(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FEDLDP, "db", *argv], capture_output=True, text=True, check=False)


@pytest.mark.e2e
def test_db_runs_the_server_command_with_its_options_and_status(tmp_path: Path) -> None:
    path = tmp_path / "studies.db"
    upgraded = fedldp_db("upgrade", "--database-url", sqlite_url(path))
    assert (upgraded.returncode, upgraded.stderr) == (0, ""), upgraded.stderr
    (head,) = sqlite3.connect(path).execute("SELECT version_num FROM alembic_version").fetchone()
    assert upgraded.stdout == f"created the schema at {head} (head)\n"

    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0099_next'")
    refused = fedldp_db("current", "--database-url", sqlite_url(path))
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr.startswith("error: schema_too_new: ")


def test_db_needs_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["db"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("error: the following arguments are required: ")

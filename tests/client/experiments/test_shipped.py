"""The experiment files that come with fedldp (issue 28 item 5): found in a checkout as in an
installed wheel (tests/test_packaging.py runs the wheel's), and named by their file or by their
name alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedldp.client.cli.main import main
from fedldp.client.experiments.reproduce import experiment_file, experiments_dir, shipped_dir

ROOT = Path(__file__).resolve().parents[3]


def test_the_shipped_experiments_are_the_checkouts_in_an_editable_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FEDLDP_EXPERIMENTS", raising=False)
    assert shipped_dir() == ROOT / "experiments"
    assert experiments_dir() == shipped_dir()


def test_an_experiment_is_named_by_its_file_or_by_its_shipped_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fedldp experiment run NAME`` runs a shipped file from any directory; a file of that
    name where the command runs comes first, and a path is taken as given."""
    monkeypatch.chdir(tmp_path)
    shipped = shipped_dir() / "heterogeneous-e3-frequency.yaml"
    assert experiment_file(Path("heterogeneous-e3-frequency")) == shipped
    assert experiment_file(Path("heterogeneous-e3-frequency.yaml")) == shipped
    local = Path("heterogeneous-e3-frequency.yaml")
    local.write_text(shipped.read_text())
    assert experiment_file(local) == local
    assert experiment_file(Path("sub/no-such.yaml")) == Path("sub/no-such.yaml")
    with pytest.raises(ValueError, match="nor a shipped experiment of that name"):
        experiment_file(Path("no-such"))
    assert main(["experiment", "run", "no-such"]) == 2
    assert "fedldp reproduce --list names them" in capsys.readouterr().err

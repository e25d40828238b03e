"""The installed package is one namespace (issue 10): a wheel built from this tree, installed into
a fresh virtual environment, imports as ``fedldp.*``, runs its entry point, and puts no bare
``client``, ``server`` or ``protocol`` into site-packages. The schema migrations ship in it
(issue 16): ``fedldp db`` upgrades a database from the installed wheel. So do the experiment
files and every other folder of package data (issue 28 item 5): ``fedldp run``, ``fedldp
reproduce`` and ``fedldp experiment run NAME`` work from the installed wheel alone, in a
directory outside any checkout, and the build prints no warning."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from fedldp.client.experiments.loading import load_experiment
from fedldp.client.experiments.reproduce import find_experiments

ROOT = Path(__file__).resolve().parents[1]
PIP = [sys.executable, "-m", "pip"]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
SMALL_EXPERIMENT = "heterogeneous-e3-frequency"  # 20 trials, under a second


def _source_of(package: str) -> Path:
    """The folder of this tree that ``package`` is built from (pyproject's package-dir)."""
    mapped = SETUPTOOLS["package-dir"]
    parent = max((p for p in mapped if package == p or package.startswith(p + ".")), key=len)
    rest = package[len(parent) :].lstrip(".").split(".")
    return ROOT.joinpath(mapped[parent], *filter(None, rest))


def _build_inputs() -> list[Path]:
    """The files a build reads, relative to the tree: the metadata and every package folder's
    files that git tracks or would track (no caches, no build leftovers, no local links)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    roots = {Path(folder) for folder in SETUPTOOLS["package-dir"].values()}
    readme = Path(PYPROJECT["project"]["readme"])
    return [
        path
        for path in map(Path, filter(None, listed.split("\0")))
        if (path in {Path("pyproject.toml"), readme} or any(r in path.parents for r in roots))
        and (ROOT / path).is_file()
    ]


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel built from a copy of this tree's sources, and all the backend printed.

    The backend is called directly, without pip (whose output holds back the backend's, and
    adds its own about this machine's indexes), on a copy: setuptools builds in place, and
    files left in a previous build's ``build/lib`` would ship in the wheel. Python is left
    free to write bytecode, as in a default environment (else setuptools says it skips it)."""
    tree = tmp_path_factory.mktemp("tree")
    for path in _build_inputs():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, tree / path)
    out = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    script = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    done = subprocess.run(
        [sys.executable, "-c", script, str(out)],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    (found,) = out.glob("fedldp-*.whl")
    return found, done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel(build: tuple[Path, str]) -> Path:
    return build[0]


def test_the_build_prints_no_warning(build: tuple[Path, str]) -> None:
    """Issue 23, then issue 28: every install printed setuptools' deprecation of the TOML-table
    license (twice) and a warning that the dashboard's folder was absent from the packages
    configuration. No line of the build's output may warn of anything."""
    wheel, output = build
    assert "running bdist_wheel" in output  # the backend's own log was caught
    warnings = [line for line in output.splitlines() if re.search(r"warn|deprecat", line, re.I)]
    assert warnings == [], output
    archive = zipfile.ZipFile(wheel)
    (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    assert "License-Expression: MIT" in archive.read(metadata).decode().splitlines()


def test_wheel_holds_only_the_fedldp_namespace(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"fedldp"}
    sources = {
        f"fedldp/{path.relative_to(ROOT).as_posix()}"
        for part in ("protocol", "client", "server")
        for path in (ROOT / part).rglob("*.py")
    }
    sources |= {
        f"fedldp/testing/{path.name}" for path in (ROOT / "fedldp" / "testing").glob("*.py")
    }
    assert sources - set(names) == set(), "modules missing from the wheel (pyproject packages)"
    # the conformance kit's pytest plugin, under its module's name
    (points,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(points).decode()
    assert "[pytest11]\nfedldp.testing.plugin = fedldp.testing.plugin" in text, text
    assert "fedldp/py.typed" in names
    assert "fedldp/server/store/migrations/script.py.mako" in names
    assert {"fedldp/server/web/static/index.html", "fedldp/server/web/static/app.js"} <= set(names)
    templates = {
        f"fedldp/templates/{path.name}" for path in (ROOT / "fedldp" / "templates").glob("*.tmpl")
    }
    assert templates, "fedldp new-protocol has no templates"
    assert templates - set(names) == set(), "templates missing from the wheel (package-data)"


def test_every_file_of_the_package_data_is_in_the_wheel(wheel: Path) -> None:
    """Each package-data glob of pyproject.toml, matched in this tree, ships whole: a file added
    to a data folder (an experiment, a template, a dashboard file) is in the wheel unlisted."""
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = SETUPTOOLS["packages"]
    expected: set[str] = set()
    for owner, globs in SETUPTOOLS["package-data"].items():
        for package in packages if owner == "*" else [owner]:
            folder = _source_of(package)
            for pattern in globs:
                expected |= {
                    f"{package.replace('.', '/')}/{path.relative_to(folder).as_posix()}"
                    for path in folder.glob(pattern)
                    if path.is_file() and "__pycache__" not in path.parts
                }
    experiments = {f"fedldp/experiment_files/{p.name}" for p in (ROOT / "experiments").glob("*")}
    assert len(experiments) >= 46  # the papers' 42 files and the robustness 4, at least
    assert experiments <= expected  # every file of experiments/
    assert expected - names == set(), "package data missing from the wheel"


def test_the_image_copies_every_file_the_wheel_is_built_from() -> None:
    """deploy/Dockerfile installs fedldp from the files its COPY lines take: all that a wheel
    build reads (a data folder added to pyproject.toml but not to the image would break its
    build, or ship an image without the files)."""
    copied: list[str] = []
    for line in (ROOT / "deploy" / "Dockerfile").read_text(encoding="utf-8").splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            copied += [w.rstrip("/") for w in words[1:-1]]
    missing = [
        path.as_posix()
        for path in _build_inputs()
        if not any(
            fnmatch.fnmatch(path.as_posix(), source) or Path(source) in path.parents
            for source in copied
        )
    ]
    assert missing == [], f"deploy/Dockerfile copies none of {missing[:10]}"


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding the wheel; its ``bin`` folder."""
    env_dir = tmp_path_factory.mktemp("venv")
    # No pip of its own (ensurepip takes seconds): this environment's pip installs into it.
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    # The dependencies come from this environment's site-packages (a plain path entry: its .pth
    # files, the editable install's finder among them, are not run), fedldp from the wheel.
    purelib = Path(sysconfig.get_paths()["purelib"])
    fresh = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (fresh / "dependencies.pth").write_text(f"{purelib}\n")
    subprocess.run(
        [*PIP, "--python", python, "install", "--quiet", "--no-deps", "--no-index", wheel],
        check=True,
        capture_output=True,
    )
    return env_dir / "bin"


@pytest.fixture
def elsewhere(tmp_path: Path) -> dict[str, str]:
    """The environment of a command run from ``tmp_path``, outside any checkout: no
    experiment folder named by the environment, nothing of this tree on the path."""
    assert ROOT not in tmp_path.parents
    return {k: v for k, v in os.environ.items() if k not in {"FEDLDP_EXPERIMENTS", "PYTHONPATH"}}


def _fedldp(bin_dir: Path, env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [bin_dir / "fedldp", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def test_wheel_installs_into_a_fresh_venv(
    installed: Path, tmp_path: Path, elsewhere: dict[str, str]
) -> None:
    python = installed / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    script = (
        "import importlib.util, fedldp, fedldp.client.swarm.run, fedldp.server.web.app\n"
        f"assert fedldp.__file__.startswith({site!r}), fedldp.__file__\n"
        "assert callable(fedldp.simulate) and callable(fedldp.run_swarm)\n"
        "assert 'user-mean' in fedldp.CATALOGUE\n"
        "for bare in ('client', 'server', 'protocol'):\n"
        "    assert importlib.util.find_spec(bare) is None, bare\n"
    )
    subprocess.run([python, "-c", script], check=True, cwd=tmp_path, env=elsewhere)
    assert "simulate" in _fedldp(installed, elsewhere, tmp_path, "--help")
    # fedldp new-protocol writes its skeleton from the wheel's templates (package data)
    plugin = tmp_path / "plugin"
    _fedldp(installed, elsewhere, tmp_path, "new-protocol", "wheel-mean", "--dir", str(plugin))
    assert "class WheelMean(Protocol[WheelMeanParams])" in (
        plugin / "fedldp_wheel_mean" / "protocol.py"
    ).read_text(encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'wheel.db'}"
    _fedldp(installed, elsewhere, tmp_path, "db", "upgrade", "--database-url", url)
    current = _fedldp(installed, elsewhere, tmp_path, "db", "current", "--database-url", url)
    revisions = sorted(
        p.stem for p in (ROOT / "server/store/migrations/versions").glob("[0-9]*.py")
    )
    assert current == f"{revisions[-1]} (head)\n"


@pytest.mark.e2e
def test_the_installed_wheel_runs_a_deployment(
    installed: Path, tmp_path: Path, elsewhere: dict[str, str]
) -> None:
    """``fedldp run``: a server from the wheel, a swarm against it, the simulator beside it."""
    out = _fedldp(
        installed, elsewhere, tmp_path, "run", "--users", "2000", "--samples", "16", "--json"
    )
    summary = json.loads(out)
    assert summary["users_served"] == 2000
    assert summary["simulation"]["agrees"] is True, summary["simulation"]


def test_the_installed_wheel_reproduces_from_its_own_experiment_files(
    installed: Path, tmp_path: Path, elsewhere: dict[str, str]
) -> None:
    """``fedldp reproduce --list`` names the checkout's experiments; one of them runs, by name,
    through ``fedldp experiment run`` and through ``fedldp reproduce`` (figure and claims)."""
    listed = _fedldp(installed, elsewhere, tmp_path, "reproduce", "--list")
    names = [line.split()[0] for line in listed.splitlines()]
    assert names == list(find_experiments(ROOT / "experiments")), listed
    trials = len(load_experiment(ROOT / "experiments" / f"{SMALL_EXPERIMENT}.yaml").trials())
    run = tmp_path / "run"
    _fedldp(
        installed, elsewhere, tmp_path, "experiment", "run", SMALL_EXPERIMENT, "--out", str(run)
    )
    assert (run / "trials.csv").read_text().count("\n") == 1 + trials  # a header, the trials
    out = tmp_path / "reproduce"
    report = _fedldp(
        installed, elsewhere, tmp_path, "reproduce", SMALL_EXPERIMENT, "--out", str(out)
    )
    assert (out / SMALL_EXPERIMENT / "plot-1.png").is_file(), report
    assert "| claim |" in (out / "REPORT.md").read_text()

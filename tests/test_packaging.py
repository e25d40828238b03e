"""The installed package is one namespace (issue 10): a wheel built from this tree, installed into
a fresh virtual environment, imports as ``fedldp.*``, runs its entry point, and puts no bare
``client``, ``server`` or ``protocol`` into site-packages. The schema migrations ship in it
(issue 16): ``fedldp db`` upgrades a database from the installed wheel."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PIP = [sys.executable, "-m", "pip"]
PIP_WHEEL = [*PIP, "wheel", "--quiet", "--no-deps", "--no-build-isolation"]


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel built from this tree, and what the build printed."""
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [*PIP_WHEEL, "--wheel-dir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    (found,) = out.glob("fedldp-*.whl")
    return found, done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel(build: tuple[Path, str]) -> Path:
    return build[0]


def test_the_build_warns_of_nothing_in_the_configuration(build: tuple[Path, str]) -> None:
    """Issue 23: every install printed setuptools' deprecation of the TOML-table license (twice)
    and a warning that the dashboard's folder was absent from the packages configuration."""
    wheel, output = build
    assert "BuildBackendWarning" not in output, output
    assert "project.license" not in output, output
    assert "is absent from the `packages` configuration" not in output, output
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
    static = {
        f"fedldp/server/web/static/{path.name}"
        for path in (ROOT / "server" / "web" / "static").iterdir()
    }
    assert {"fedldp/server/web/static/index.html", "fedldp/server/web/static/app.js"} <= static
    assert static - set(names) == set(), "dashboard files missing from the wheel (package-data)"
    templates = {
        f"fedldp/templates/{path.name}" for path in (ROOT / "fedldp" / "templates").glob("*.tmpl")
    }
    assert templates, "fedldp new-protocol has no templates"
    assert templates - set(names) == set(), "templates missing from the wheel (package-data)"


def test_wheel_installs_into_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
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
    script = (
        "import importlib.util, fedldp, fedldp.client.swarm.run, fedldp.server.web.app\n"
        f"assert fedldp.__file__.startswith({str(fresh)!r}), fedldp.__file__\n"
        "assert callable(fedldp.simulate) and callable(fedldp.run_swarm)\n"
        "assert 'user-mean' in fedldp.CATALOGUE\n"
        "for bare in ('client', 'server', 'protocol'):\n"
        "    assert importlib.util.find_spec(bare) is None, bare\n"
    )
    subprocess.run([python, "-c", script], check=True, cwd=tmp_path)
    help_text = subprocess.run(
        [env_dir / "bin" / "fedldp", "--help"], check=True, capture_output=True, text=True
    ).stdout
    assert "simulate" in help_text
    # fedldp new-protocol writes its skeleton from the wheel's templates (package data)
    made = subprocess.run(
        [env_dir / "bin" / "fedldp", "new-protocol", "wheel-mean", "--dir", tmp_path / "plugin"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    assert "class WheelMean(Protocol[WheelMeanParams])" in (
        tmp_path / "plugin" / "fedldp_wheel_mean" / "protocol.py"
    ).read_text(encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'wheel.db'}"
    fedldp_db: list[str | Path] = [env_dir / "bin" / "fedldp", "db"]
    upgraded = subprocess.run(
        [*fedldp_db, "upgrade", "--database-url", url], capture_output=True, text=True, cwd=tmp_path
    )
    assert upgraded.returncode == 0, upgraded.stderr
    current = subprocess.run(
        [*fedldp_db, "current", "--database-url", url], capture_output=True, text=True, cwd=tmp_path
    )
    assert current.returncode == 0, current.stderr
    revisions = sorted(
        p.stem for p in (ROOT / "server/store/migrations/versions").glob("[0-9]*.py")
    )
    assert current.stdout == f"{revisions[-1]} (head)\n"

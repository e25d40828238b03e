"""Plugin distributions for tests, without pip: each is a ``<name>-<version>.dist-info`` folder
(METADATA and entry_points.txt, as pip writes them) read by ``importlib.metadata``, and the
catalogue's and the laws' one question to the installation (``plugin_entry_points``,
``law_entry_points``) is answered from them (the ``plugins`` fixture of tests/conftest.py).
``pip_installed`` installs a real distribution into the project's environment for a block
(tests/protocol/test_plugins.py's slow test, the example plugin's tests)."""

from __future__ import annotations

import fcntl
import importlib.metadata
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from fedldp.client.population import laws
from fedldp.protocol import catalogue

PLUGIN = "tests.protocol.plugin_mean"
"""The module of the test plugin protocols (``PluginMean``, ``PROTOCOL``, ``Impostor``, …)."""
LAW_PLUGIN = "tests.client.population.plugin_law"
"""The module of the test plugin laws (``Triangle``, …)."""


class Plugins:
    """The fake installation: ``install`` a distribution, ``uninstall`` it; the catalogue
    forgets what it loaded after each (as a restarted process would)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.installed: dict[str, Path] = {}
        self.asked = 0
        """How many times the catalogue asked for the entry points."""

    def entry_points(
        self, group: str = catalogue.ENTRY_POINT_GROUP
    ) -> Iterable[importlib.metadata.EntryPoint]:
        self.asked += 1
        points: list[importlib.metadata.EntryPoint] = []
        for path in self.installed.values():
            found = importlib.metadata.PathDistribution(path).entry_points
            points.extend(found.select(group=group))
        return points

    def law_entry_points(self) -> Iterable[importlib.metadata.EntryPoint]:
        return self.entry_points(laws.LAW_ENTRY_POINT_GROUP)

    def install(
        self,
        dist: str,
        version: str,
        entries: Mapping[str, str],
        group: str = catalogue.ENTRY_POINT_GROUP,
    ) -> None:
        """Distribution ``dist`` ``version`` declaring ``entries`` (name → ``module:attr``) in
        entry-point ``group`` (the protocols' by default)."""
        self.uninstall(dist)
        path = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        path.mkdir(parents=True)
        (path / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = "".join(f"{name} = {value}\n" for name, value in entries.items())
        (path / "entry_points.txt").write_text(f"[{group}]\n{lines}")
        self.installed[dist] = path
        catalogue.CATALOGUE.reload()
        laws.LAWS.reload()

    def uninstall(self, dist: str) -> None:
        path = self.installed.pop(dist, None)
        if path is not None:
            for child in path.iterdir():
                child.unlink()
            path.rmdir()
            catalogue.CATALOGUE.reload()
            laws.LAWS.reload()


def plugins_fixture(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Plugins:
    fake = Plugins(tmp_path / "site-packages")
    monkeypatch.setattr(catalogue, "plugin_entry_points", fake.entry_points)
    monkeypatch.setattr(laws, "law_entry_points", fake.law_entry_points)
    catalogue.CATALOGUE.reload()
    laws.LAWS.reload()
    return fake


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]


_held = 0
"""How many ``pip_installed`` blocks this process is inside (it holds the lock while > 0)."""


@contextmanager
def _pip_lock() -> Iterator[None]:
    """The environment's pip lock, re-entrant within a process: a block nested in another of
    the same process (a module's installed example while a test installs a skeleton) shares
    the outer block's lock instead of waiting for itself (``flock`` on a second open of the
    file would block forever)."""
    global _held
    if _held:
        _held += 1
        try:
            yield
        finally:
            _held -= 1
        return
    with (Path(sys.prefix) / ".fedldp-tests-pip.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        _held = 1
        try:
            yield
        finally:
            _held = 0


@contextmanager
def pip_installed(package: Path, distribution: str) -> Iterator[None]:
    """The distribution at ``package`` installed into the project's environment (editable, no
    dependencies, no build isolation: seconds, offline) for the block, uninstalled after it.
    Only new processes see it (this one read its site-packages at start). One such block at a
    time across the test workers (a lock file beside the environment): two pips at once in one
    environment, or one uninstalling what another's block still uses, would race. Blocks of
    one process may nest (the lock is re-entrant there; each uninstalls its own)."""
    with _pip_lock():
        subprocess.run(
            [*PIP, "install", "--no-deps", "--no-build-isolation", "-e", str(package)],
            check=True,
            capture_output=True,
        )
        try:
            yield
        finally:
            subprocess.run(
                [*PIP, "uninstall", "--yes", distribution], check=True, capture_output=True
            )


LAW_DISTRIBUTION = "fedldp-test-law"
LAW_ENTRY_POINTS = '[project.entry-points."fedldp.laws"]\ntriangle = "fedldp_test_law:Triangle"\n'
"""The test law distribution's entry points (docs/extending.md shows them)."""


def law_distribution(root: Path, version: str = "0.2.1") -> Path:
    """A distribution ``fedldp-test-law`` ``version`` under ``root`` declaring the test law
    (tests/client/population/plugin_law.py) as ``triangle``, ready for ``pip_installed``."""
    package = root / LAW_DISTRIBUTION
    module = package / "fedldp_test_law"
    module.mkdir(parents=True)
    law = Path(__file__).parent / "client" / "population" / "plugin_law.py"
    (module / "__init__.py").write_text(law.read_text(encoding="utf-8"), encoding="utf-8")
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{LAW_DISTRIBUTION}"\nversion = "{version}"\n'
        + LAW_ENTRY_POINTS
        + '[tool.setuptools]\npackages = ["fedldp_test_law"]\n'
    )
    return package

"""Suite-wide collection order, for the parallel run (issue 10 item 3).

The README's test command runs the suite on pytest-xdist with ``--dist loadfile`` (pyproject
addopts): every module runs whole on one worker, so its module fixtures (a live server, a built
wheel) and its cached experiments (``functools.cache``) are made once, not once per worker that
happens to get one of its tests. The scheduler hands out modules in collection order; this hook
puts the modules holding heavy tests (marked ``slow``, ``e2e`` or ``fuzz``; the most such tests
first) before the light ones, so the many light modules fill both workers at the end instead of
one worker finishing a long module alone (longest-first list scheduling). The sort is stable:
each module's tests keep their order, and a run without xdist sees the same tests.

Hypothesis runs without its per-example deadline (200 ms by default): the suite tests properties,
not speed (the benchmarks in ``benchmarks/`` do that), and on two shared cores a loaded worker
sometimes took longer than 200 ms for one example and failed a correct test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from fedldp.client.population import laws
from fedldp.protocol import catalogue
from fedldp.protocol.catalogue import CATALOGUE
from fedldp.threads import one_blas_thread
from tests.plugins import Plugins, plugins_fixture

# as every process fedldp starts does (the e2e tests' servers and swarms among them): the same BLAS
# thread count in the tests' own process, so in-process sums are summed as theirs are
one_blas_thread()

# Each process of the run reads the installed plugins once, while it collects (xdist starts no test
# before every worker has collected): the slow test that pip-installs one into this environment
# for a moment (tests/protocol/test_plugins.py) cannot then leak it into another worker's
# catalogue, nor can a test that fakes plugins (the ``plugins`` fixture) re-read it afterwards.
_INSTALLED = tuple(catalogue.plugin_entry_points())
catalogue.plugin_entry_points = lambda: _INSTALLED
CATALOGUE.reload()
_INSTALLED_LAWS = tuple(laws.law_entry_points())  # the same for the population laws
laws.law_entry_points = lambda: _INSTALLED_LAWS
laws.LAWS.reload()

settings.register_profile("fedldp", deadline=None)
settings.load_profile("fedldp")

# the conformance kit's fixtures (also an installed fedldp's pytest11 entry point, of the same name)
pytest_plugins = ["fedldp.testing.plugin"]

HEAVY_MARKERS = ("slow", "e2e", "fuzz")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    heavy: Counter[Path] = Counter(
        item.path
        for item in items
        if any(item.get_closest_marker(name) is not None for name in HEAVY_MARKERS)
    )
    items.sort(key=lambda item: -heavy[item.path])


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Plugins]:
    """Plugin distributions installed for one test (tests/plugins.py); the catalogue is back to
    what this installation declares afterwards."""
    yield plugins_fixture(monkeypatch, tmp_path)
    monkeypatch.undo()
    CATALOGUE.reload()
    laws.LAWS.reload()

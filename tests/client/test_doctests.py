"""The examples in the docstrings of the notebook-facing API run as doctests (issue 28 item 3):
each module listed has at least one example, and every example gives the output it shows."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = (
    "fedldp",
    "fedldp.experiments",
    "fedldp.client.simulate",
    "fedldp.client.frames",
    "fedldp.client.api.views",
    "fedldp.client.experiments.frame",
    "fedldp.client.swarm.local",
    "fedldp.client.swarm.run",
)
LOADED = {name: importlib.import_module(name) for name in MODULES}
"""Imported at collection, before any example runs (CPython 3.11.7 can fail to compile a module
that pytest rewrites after an earlier compile was interrupted: "AST constructor recursion depth
mismatch")."""


SERVED = {"fedldp.client.swarm.local", "fedldp.client.swarm.run"}
"""Modules whose examples start a server program (marked e2e, as the tests that do)."""


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.e2e) if n in SERVED else n for n in MODULES],
)
def test_docstring_examples_run(name: str) -> None:
    module = LOADED[name]
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    outcome = doctest.testmod(module, optionflags=flags, verbose=False, report=True)
    assert outcome.attempted > 0, f"{name} has no example"
    assert outcome.failed == 0, f"{outcome.failed} of {name}'s examples fail (see above)"

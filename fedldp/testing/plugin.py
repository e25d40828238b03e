"""The kit as a pytest plugin (``fedldp.testing``'s docstring: "In a test suite").

Loaded by the ``pytest11`` entry point ``fedldp.testing.plugin`` of an installed fedldp (or by
``pytest_plugins = ["fedldp.testing.plugin"]``); ``-p no:fedldp.testing.plugin`` turns it off.
Its fixtures import the kit only when a test asks for them, so loading it costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from fedldp.testing.report import KitReport
    from fedldp.testing.served import KitServer

__all__ = ["fedldp_check_protocol", "fedldp_kit_server"]


@pytest.fixture(scope="session")
def fedldp_kit_server() -> Iterator[KitServer]:
    """One fedldp server (a subprocess on a temporary SQLite file) for the whole session."""
    from fedldp.testing.served import KitServer

    with KitServer() as server:
        yield server


@pytest.fixture
def fedldp_check_protocol(fedldp_kit_server: KitServer) -> Callable[..., KitReport]:
    """``fedldp.testing.check_protocol`` with ``server`` the session's server and
    ``strict=True``: a test fails naming every failed check."""
    from fedldp.testing.kit import check_protocol as kit

    def check(*args: Any, **kwargs: Any) -> KitReport:
        kwargs.setdefault("server", fedldp_kit_server)
        kwargs.setdefault("strict", True)
        return kit(*args, **kwargs)

    return check

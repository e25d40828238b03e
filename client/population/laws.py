"""Population laws from installed distributions: group ``fedldp.laws``.

A plugin distribution declares a data law the built-in ones do not draw (its ``pyproject.toml``)::

    [project.entry-points."fedldp.laws"]
    triangle = "my_package.laws:Triangle"

naming a subclass of ``fedldp.client.population.api.Distribution``. ``--distribution triangle``
(or ``distribution: triangle`` in a population or experiment file) then draws every user's
samples from ``Triangle(**law_params)``, the options given with ``--law-param KEY=VALUE`` (or
``law_params:`` in a file); the constructor validates them (``ValueError`` or ``TypeError`` for
a bad or unknown one, reported as one line). ``LAWS`` loads the plugins on first access, once
per process, through the protocol catalogue's machinery (``fedldp.protocol.core.plugins``): a
plugin law that fails to import, is not a ``Distribution`` subclass, or takes a built-in law's
name (the built-in wins) or another plugin's (neither is served) is listed by ``LAWS.broken``
with the reason, naming both packages of a clash, and ``fedldp laws`` shows it.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from fedldp.client.population.distributions import Distribution
from fedldp.protocol.core.plugins import Registry

__all__ = [
    "BUILT_IN_LAWS",
    "LAWS",
    "LAW_ENTRY_POINT_GROUP",
    "Laws",
    "get_law",
    "law_entry_points",
    "make_law",
]

LAW_ENTRY_POINT_GROUP = "fedldp.laws"
"""The entry-point group a plugin distribution declares its population laws in."""

BUILT_IN_LAWS: tuple[str, ...] = (
    "uniform",
    "gaussian",
    "two-point",
    "lomax",
    "exponential",
    "bernoulli",
    "categorical",
    "sparse-linear",
    "sparse-logistic",
    "binned-classification",
    "binned-regression",
    "sin-sum",
    "diabetes",
    "gss-income",
    "cps-wage",
)
"""The laws ``--distribution`` names without a plugin (``fedldp.client.population.spec``)."""


def law_entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    """The entry points of group ``fedldp.laws`` of every installed distribution: the one place
    the laws ask the installation (tests replace it)."""
    return importlib.metadata.entry_points(group=LAW_ENTRY_POINT_GROUP)


class Laws(Registry[type[Distribution]]):
    """The plugin laws by name (``Distribution`` subclasses), loaded on first access; the
    built-in names are reserved. ``origin(name)`` and ``broken`` as the protocol catalogue's."""

    kind = "law"

    def _entry_points(self) -> Iterable[importlib.metadata.EntryPoint]:
        return law_entry_points()  # looked up at each load: tests replace it

    def _accept(self, entry: importlib.metadata.EntryPoint, obj: object) -> type[Distribution]:
        if not (isinstance(obj, type) and issubclass(obj, Distribution)):
            raise ValueError(
                f"{entry.value}: {getattr(obj, '__name__', type(obj).__name__)} is not a "
                "subclass of fedldp.client.population.api.Distribution"
            )
        if inspect.isabstract(obj):
            missing = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
            raise ValueError(f"{entry.value}: {obj.__name__} does not implement {missing}")
        return obj


LAWS = Laws({}, reserved=BUILT_IN_LAWS)
"""The plugin laws this process can draw, by name (loaded on first access)."""


def get_law(name: str) -> type[Distribution]:
    """The plugin law called ``name``; ValueError naming the known laws (and, for a broken
    plugin of that name, why it is not served) otherwise."""
    try:
        return LAWS[name]
    except KeyError:
        known = ", ".join([*BUILT_IN_LAWS, *sorted(LAWS)])
        why = LAWS.why_broken(name)
        raise ValueError(f"unknown law {name!r}{why}; known laws: {known}") from None


def make_law(name: str, params: Mapping[str, Any]) -> Distribution:
    """Plugin law ``name`` with its options ``params``; ValueError with the law's own reason
    (an unknown option, a value out of its range) otherwise."""
    law = get_law(name)
    try:
        made = law(**dict(params))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"law {name!r} ({law.__name__}) refuses its parameters: {exc}") from None
    if made.dimension is not None and (not isinstance(made.dimension, int) or made.dimension < 1):
        raise ValueError(f"law {name!r}: dimension must be None or an int >= 1")
    return made

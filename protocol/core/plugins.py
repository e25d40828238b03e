"""What installed distributions declare as entry points, loaded beside fedldp's built-in ones: the
machinery the protocol catalogue (``fedldp.protocol.catalogue``, group ``fedldp.protocols``) and
the population laws (``fedldp.client.population.laws``, group ``fedldp.laws``) share.

A ``Registry`` asks the installation for its group's entry points on first access, once per
process (thread-safe; ``reload`` forgets), never because of a request. Each entry point's name
is what it registers; a subclass says what its object must be (``_accept``). An entry point that
fails to import, whose object is not acceptable, whose name clashes with a built-in one (the
built-in wins) or with another distribution's (neither is kept: which one ran would depend on
the installation) is not served: ``broken`` lists it with the reason, naming both packages of a
clash, and it never keeps the others from loading. ``origin(name)`` says where each comes from:
``built-in`` with fedldp's version, or the distribution's name and version.
"""

from __future__ import annotations

import importlib.metadata
import threading
from abc import abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "BUILT_IN_ORIGIN",
    "FEDLDP_VERSION",
    "IN_PROCESS_ORIGIN",
    "BrokenPlugin",
    "Origin",
    "Registry",
    "origin_of",
]

try:
    FEDLDP_VERSION = importlib.metadata.version("fedldp")
except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a source tree, not installed
    FEDLDP_VERSION = "0+unknown"
"""The installed fedldp's version: the version of everything built in."""


@dataclass(frozen=True)
class Origin:
    """Where a protocol's (or a law's) code comes from: ``package`` is ``built-in`` (this
    repository), a plugin's distribution name, or ``in-process`` (put into a registry by the
    running program, as tests do); ``version`` is fedldp's version for the first and the last,
    the distribution's for a plugin. A study records its protocol's at create; a swarm running
    the study needs the same."""

    package: str
    version: str


BUILT_IN_ORIGIN = Origin("built-in", FEDLDP_VERSION)
IN_PROCESS_ORIGIN = Origin("in-process", FEDLDP_VERSION)


@dataclass(frozen=True)
class BrokenPlugin:
    """A declared plugin entry that is not served: its entry point's ``name``, its distribution
    (``package``, ``version``) and why (``error``)."""

    name: str
    package: str
    version: str
    error: str


def origin_of(entry: importlib.metadata.EntryPoint, longest: int = 200) -> Origin:
    """The distribution that declares ``entry`` (an entry point outside any well-formed
    distribution gets a description of its value, at most ``longest`` characters)."""
    dist = entry.dist
    if dist is None or not dist.name:
        return Origin(f"unknown distribution of {entry.value}"[:longest], "0+unknown")
    return Origin(dist.name, dist.version or "0+unknown")


T = TypeVar("T")


class Registry(Mapping[str, T], Generic[T]):
    """The entries of one entry-point group by name: ``built_in`` ones and the installed
    plugins', loaded on first access (once, thread-safe). ``reserved`` names are built-in too
    without an object here (a plugin taking one is refused as a clash). Subclasses set ``kind``
    (the word of the messages: "protocol", "law") and implement ``_entry_points`` and
    ``_accept``."""

    kind: str

    def __init__(self, built_in: Mapping[str, T], reserved: Iterable[str] = ()) -> None:
        self._built_in = dict(built_in)
        self._reserved = frozenset(reserved) | frozenset(built_in)
        self._lock = threading.Lock()
        self._entries: dict[str, T] | None = None
        self._origins: dict[str, Origin] = {}
        self._broken: list[BrokenPlugin] = []
        self._generation = 0

    @abstractmethod
    def _entry_points(self) -> Iterable[importlib.metadata.EntryPoint]:
        """The installation's entry points of this registry's group (tests replace them)."""

    @abstractmethod
    def _accept(self, entry: importlib.metadata.EntryPoint, obj: object) -> T:
        """What entry point ``entry`` registers, from the object it names; ValueError with the
        reason when that object cannot be served."""

    def _refuse(self, origin: Origin) -> str | None:
        """Why a plugin of ``origin`` cannot be served whatever it declares (None: it can)."""
        return None

    def _load(self, entry: importlib.metadata.EntryPoint) -> T:
        try:
            obj: object = entry.load()
        except Exception as exc:  # a plugin's bug, whatever it is, must not stop the others
            raise ValueError(f"{entry.value} failed to load: {type(exc).__name__}: {exc}") from exc
        return self._accept(entry, obj)

    def _loaded(self) -> dict[str, T]:
        entries = self._entries
        if entries is None:
            with self._lock:
                if self._entries is None:
                    self._entries = self._discover()
                entries = self._entries
        return entries

    def _discover(self) -> dict[str, T]:
        entries = dict(self._built_in)
        origins = dict.fromkeys(entries, BUILT_IN_ORIGIN)
        broken: list[BrokenPlugin] = []
        plugins: dict[str, list[tuple[Origin, T | str]]] = {}
        for entry in sorted(self._entry_points(), key=lambda e: (e.name, e.value)):
            origin = origin_of(entry)
            try:
                loaded: T | str = self._load(entry)
            except ValueError as exc:
                loaded = str(exc)
            loaded = self._refuse(origin) or loaded
            plugins.setdefault(entry.name, []).append((origin, loaded))
        for name, candidates in plugins.items():
            for origin, loaded in candidates:
                others = [o.package for o, _ in candidates if o != origin]
                if isinstance(loaded, str):
                    error = loaded
                elif name in self._reserved:
                    error = (
                        f"{self.kind} {name!r} of {origin.package} clashes with fedldp's "
                        f"built-in {name!r}: the built-in one is served"
                    )
                elif len(candidates) > 1:
                    error = (
                        f"{self.kind} {name!r} is declared by {origin.package} and by "
                        f"{', '.join(others) or 'it again'}: neither is served (uninstall one)"
                    )
                else:
                    entries[name], origins[name] = loaded, origin
                    continue
                broken.append(BrokenPlugin(name, origin.package, origin.version, error))
        self._origins, self._broken = origins, broken
        self._generation += 1
        return entries

    def reload(self) -> None:
        """Forget what was loaded (entries set in-process included): the next access asks
        ``_entry_points`` again (tests that install or fake a plugin)."""
        with self._lock:
            self._entries = None

    @property
    def generation(self) -> int:
        """A number that changes whenever what the registry holds may have changed (a load,
        an entry set or deleted): the key of anything computed from it and cached."""
        self._loaded()
        return self._generation

    @property
    def broken(self) -> tuple[BrokenPlugin, ...]:
        """The declared plugin entries that are not served, with the reason."""
        self._loaded()
        return tuple(self._broken)

    def origin(self, name: str) -> Origin:
        """Where ``name`` comes from (KeyError for one the registry does not hold)."""
        if name not in self._loaded():
            raise KeyError(name)
        return self._origins.get(name, IN_PROCESS_ORIGIN)

    def why_broken(self, name: str) -> str:
        """``"; PACKAGE VERSION: ERROR"`` for each broken plugin entry called ``name`` (empty
        when there is none): what a lookup's error appends."""
        return "".join(
            f"; {b.package} {b.version}: {b.error}" for b in self.broken if b.name == name
        )

    def __getitem__(self, name: str) -> T:
        return self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())

"""The protocol catalogue: every protocol the server, the simulator, the swarm, experiments and
Dask workers can run, by name: the built-in families' and the installed plugins'.

A plugin is an installed distribution that declares an entry point in the group
``fedldp.protocols`` (its ``pyproject.toml``)::

    [project.entry-points."fedldp.protocols"]
    my-mean = "my_package.protocols:MyMean"

naming a ``Protocol`` subclass (instantiated without arguments) or instance whose ``name`` is the
entry point's name, written against ``fedldp.protocol.api``. ``CATALOGUE`` loads the plugins on
first access, once per process (``importlib.metadata.entry_points``: nothing is ever loaded from
a request), beside the built-in protocols. A plugin that fails to import, whose object is not a
protocol, or whose name clashes with a built-in protocol (the built-in wins) or with another
plugin's (neither is kept: which one ran would depend on the installation) is not served; it is
listed by ``CATALOGUE.broken`` with the reason, naming both packages of a clash, and never keeps
the others from loading. Each protocol has an ``Origin``: ``built-in`` with fedldp's version, or
its distribution's name and version; a study records it and a swarm whose protocol comes from
another version is refused (docs/plugins.md, "Bring your own protocol").
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, MutableMapping
from typing import Any

from fedldp.protocol.central import protocols as central
from fedldp.protocol.classic import frequency_audit as classic_frequency_audit
from fedldp.protocol.classic import frequency_oracles as classic_frequency
from fedldp.protocol.classic import means as classic_means
from fedldp.protocol.classic import means_audit as classic_means_audit
from fedldp.protocol.core.base.protocol import Params, Protocol
from fedldp.protocol.core.plugins import (
    BUILT_IN_ORIGIN,
    FEDLDP_VERSION,
    IN_PROCESS_ORIGIN,
    BrokenPlugin,
    Origin,
    Registry,
)
from fedldp.protocol.heterogeneous import audit as hetero_audit
from fedldp.protocol.heterogeneous import frequency as hetero_frequency
from fedldp.protocol.heterogeneous import means as hetero_means
from fedldp.protocol.longitudinal import audit as longitudinal_audit
from fedldp.protocol.longitudinal import rappor, telemetry
from fedldp.protocol.longitudinal import repeated as longitudinal_repeated
from fedldp.protocol.mechanisms.audit import AuditCase, ClientAudit
from fedldp.protocol.semi_feature import audit as semi_feature_audit
from fedldp.protocol.semi_feature import hist_ldp, histoftree, tree_baselines
from fedldp.protocol.user_level import audit as user_level_audit
from fedldp.protocol.user_level import baselines as user_level_baselines
from fedldp.protocol.user_level import binned, multi_d, sgd
from fedldp.protocol.user_level import means as user_level

__all__ = [
    "AUDITS",
    "AUDIT_EXEMPT",
    "BUILT_IN",
    "BUILT_IN_ORIGIN",
    "CATALOGUE",
    "CLIENT_AUDITS",
    "ENTRY_POINT_GROUP",
    "FEDLDP_VERSION",
    "IN_PROCESS_ORIGIN",
    "MAX_NAME",
    "MAX_PACKAGE",
    "BrokenPlugin",
    "Catalogue",
    "Origin",
    "get_audit",
    "get_protocol",
    "origin_mismatch",
    "plugin_entry_points",
]

ENTRY_POINT_GROUP = "fedldp.protocols"
"""The entry-point group a plugin distribution declares its protocols in."""

BUILT_IN: dict[str, Protocol[Any]] = {
    p.name: p
    for p in (
        *user_level.PROTOCOLS,
        *user_level_baselines.PROTOCOLS,
        *multi_d.PROTOCOLS,
        *sgd.PROTOCOLS,
        *binned.PROTOCOLS,
        *histoftree.PROTOCOLS,
        *hist_ldp.PROTOCOLS,
        *tree_baselines.PROTOCOLS,
        *central.PROTOCOLS,
        *hetero_means.PROTOCOLS,
        *hetero_frequency.PROTOCOLS,
        *classic_means.PROTOCOLS,
        *rappor.PROTOCOLS,
        *telemetry.PROTOCOLS,
        *classic_frequency.PROTOCOLS,
    )
}
"""The protocols of this repository's families, by name."""


def plugin_entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    """The entry points of group ``fedldp.protocols`` of every installed distribution: the one
    place the catalogue asks the installation (tests replace it)."""
    return importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)


MAX_NAME = 64
"""The longest protocol name, and origin version, a study can record (the server's columns)."""
MAX_PACKAGE = 200
"""The longest distribution name a study can record as its protocol's origin."""


def _what_is_wrong(entry_name: str, protocol: Protocol[Any]) -> str | None:
    """Why a plugin's protocol cannot be served (None when it can)."""
    kind = type(protocol).__name__
    for attribute in ("name", "summary", "source", "heterogeneity", "data_kind", "params_model"):
        if not hasattr(protocol, attribute):
            return f"{kind} does not set {attribute!r}"
    if not (isinstance(protocol.params_model, type) and issubclass(protocol.params_model, Params)):
        return f"{kind}.params_model is not a Params subclass"
    if protocol.name != entry_name:
        return f"the entry point {entry_name!r} names a protocol called {protocol.name!r}"
    if len(entry_name) > MAX_NAME:
        return f"its name is longer than {MAX_NAME} characters"
    return None


class Catalogue(Registry[Protocol[Any]], MutableMapping[str, Protocol[Any]]):
    """The protocols by name: the built-in ones, and the plugins', loaded on first access
    (once, thread-safe) through ``plugin_entry_points`` (``fedldp.protocol.core.plugins``).
    ``origin(name)`` says where each comes from and ``broken`` lists the plugins that are not
    served. Setting an entry registers a protocol of the running program (``in-process``
    origin; tests do, with monkeypatch)."""

    kind = "protocol"

    def _entry_points(self) -> Iterable[importlib.metadata.EntryPoint]:
        return plugin_entry_points()  # looked up at each load: tests replace it

    def _accept(self, entry: importlib.metadata.EntryPoint, obj: object) -> Protocol[Any]:
        """The protocol an entry point names (a Protocol subclass is instantiated)."""
        if isinstance(obj, type) and issubclass(obj, Protocol):
            try:
                obj = obj()
            except Exception as exc:  # the plugin's constructor is its code
                raise ValueError(
                    f"{entry.value} failed to load: {type(exc).__name__}: {exc}"
                ) from exc
        if not isinstance(obj, Protocol):
            raise ValueError(
                f"{entry.value}: {type(obj).__name__} object is not a fedldp.protocol.api.Protocol"
            )
        wrong = _what_is_wrong(entry.name, obj)
        if wrong is not None:
            raise ValueError(f"{entry.value}: {wrong}")
        return obj

    def _refuse(self, origin: Origin) -> str | None:
        if len(origin.package) > MAX_PACKAGE or len(origin.version) > MAX_NAME:
            return "its distribution's name or version is too long for a study to record"
        return None

    def __setitem__(self, name: str, protocol: Protocol[Any]) -> None:
        self._loaded()[name] = protocol
        self._origins.pop(name, None)  # an in-process protocol now
        self._generation += 1

    def __delitem__(self, name: str) -> None:
        del self._loaded()[name]
        self._origins.pop(name, None)
        self._generation += 1


CATALOGUE = Catalogue(BUILT_IN)
"""Every protocol this process can run, by name (plugins load on first access)."""


def get_protocol(name: str) -> Protocol[Any]:
    """The protocol called ``name``; ValueError naming the known ones (and, for a broken
    plugin of that name, why it is not served) otherwise."""
    try:
        return CATALOGUE[name]
    except KeyError:
        known = ", ".join(sorted(CATALOGUE))
        why = CATALOGUE.why_broken(name)
        raise ValueError(f"unknown protocol {name!r}{why}; known protocols: {known}") from None


def origin_mismatch(name: str, package: str | None, version: str | None, here: str) -> str | None:
    """Why the code of protocol ``name`` installed in this process (``here``: "this server",
    "this client") may not run a study created with its code of ``package`` ``version``, naming
    both; None when it may: the same origin, a study that recorded none (made before origins
    were), or a protocol not installed here (its lookup says so)."""
    if version is None or name not in CATALOGUE:
        return None
    mine = CATALOGUE.origin(name)
    if (package, version) == (mine.package, mine.version):
        return None
    return (
        f"it runs {name} of {package} {version}, and {here} has {name} of {mine.package} "
        f"{mine.version}: install the study's version (or use one that has it)"
    )


AUDITS: dict[str, AuditCase] = {
    c.name: c
    for c in (*user_level_audit.AUDITS, *hetero_audit.AUDITS, *longitudinal_repeated.AUDITS)
}
"""Every randomizer with an empirical privacy audit (``fedldp.protocol.mechanisms.audit``), by
name: a family adds its cases (a module's ``AUDITS`` tuple) here. The longitudinal family's
audit the transcript of T repeated collections (``AuditCase.repeated``)."""


def get_audit(name: str) -> AuditCase:
    """The audit case called ``name``; ValueError naming the known ones otherwise."""
    try:
        return AUDITS[name]
    except KeyError:
        known = ", ".join(sorted(AUDITS))
        raise ValueError(f"unknown audit case {name!r}; known audit cases: {known}") from None


CLIENT_AUDITS: dict[str, tuple[ClientAudit, ...]] = {}
"""The end-to-end privacy audits of every local protocol, by protocol name: its own client step
in every round kind, on its worst-case neighbours (``ClientAudit``; the cases live with their
families' ``audit`` modules)."""
for _case in (
    *user_level_audit.CLIENT_AUDITS,
    *hetero_audit.CLIENT_AUDITS,
    *semi_feature_audit.CLIENT_AUDITS,
    *classic_means_audit.CLIENT_AUDITS,
    *longitudinal_audit.CLIENT_AUDITS,
    *classic_frequency_audit.CLIENT_AUDITS,
):
    CLIENT_AUDITS[_case.protocol] = (*CLIENT_AUDITS.get(_case.protocol, ()), _case)

AUDIT_EXEMPT: dict[str, str] = {
    p.name: (
        "central trust: each participant sends its clear local mean to a trusted server, which "
        "adds the noise to the release (central DP of the estimate); the report makes no LDP "
        "claim to audit"
    )
    for p in central.PROTOCOLS
}
"""Catalogue protocols without an end-to-end audit, with the reason: exactly the central-trust
ones (tests/protocol/test_client_audit.py checks it, so a new local protocol cannot go
unaudited)."""

"""Which protocols this server offers, and whether it may run a study's.

The server runs only protocols installed beside it (``fedldp.protocol.catalogue``: the built-in
families and the plugins' entry points; nothing is ever loaded from a request).
``FEDLDP_PROTOCOLS`` narrows what it offers: creating a study with another protocol is refused
(``unknown_protocol``) and the catalogue lists only those. A study records the origin of its
protocol's code when it is created (``Origin``: built-in with fedldp's version, or a plugin's
distribution and version); a server whose installed code has another origin refuses to plan,
take reports for or aggregate that study (``protocol_version_mismatch``) rather than run it with
different code.
"""

from __future__ import annotations

from fedldp.protocol.catalogue import CATALOGUE, origin_mismatch
from fedldp.server.errors import ProtocolVersionMismatch, UnknownProtocol
from fedldp.server.settings import Settings
from fedldp.server.store.tables import StudyRow

__all__ = ["check_version", "offered_protocols", "version_mismatch"]


def offered_protocols(settings: Settings) -> tuple[str, ...]:
    """The names of the protocols this server offers, sorted: ``settings.protocols`` when set,
    else every installed one. UnknownProtocol if the setting names one that is not installed
    (or is a broken plugin): the server does not start."""
    installed = set(CATALOGUE)
    if settings.protocols is None:
        return tuple(sorted(installed))
    missing = [name for name in settings.protocols if name not in installed]
    if missing:
        broken = {b.name: b for b in CATALOGUE.broken}
        why = "".join(
            f"; {b.name} ({b.package} {b.version}): {b.error}"
            for b in (broken[n] for n in missing if n in broken)
        )
        raise UnknownProtocol(
            f"FEDLDP_PROTOCOLS names {', '.join(missing)}, not installed beside this server"
            f"{why}; installed: {', '.join(sorted(installed))}"
        )
    return tuple(sorted(set(settings.protocols)))


def version_mismatch(study: StudyRow) -> str | None:
    """Why this server may not run ``study``'s protocol code (None when it may:
    ``fedldp.protocol.catalogue.origin_mismatch``)."""
    reason = origin_mismatch(
        study.protocol, study.protocol_origin, study.protocol_version, "this server"
    )
    return None if reason is None else f"study {study.id}: {reason}"


def check_version(study: StudyRow) -> None:
    """ProtocolVersionMismatch when this server may not run ``study``'s protocol code."""
    reason = version_mismatch(study)
    if reason is not None:
        raise ProtocolVersionMismatch(reason)

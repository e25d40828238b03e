"""The dashboard (issue 12): a page at ``/`` and its static files at ``/static``, from the
``static`` folder inside this package (shipped in the wheel as package data). Plain HTML, CSS and
JavaScript written for fedldp: no build step and no external or third-party assets, so it works
offline. Its data come from the public API: the study list, each study's event stream (live
progress, round outputs, the result) and the ε ledger aggregate; the admin actions it offers
(start, cancel) send the admin key the user types, which the server checks as for any client.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["STATIC", "add_dashboard"]

STATIC = Path(__file__).resolve().parent / "static"


def add_dashboard(app: FastAPI) -> None:
    """Serve the page at ``/`` and its assets at ``/static/…`` (not in the OpenAPI document)."""

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

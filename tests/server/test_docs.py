"""The API docs (server/web/app.py): ``/docs`` and ``/redoc`` render offline, every script, style
and icon they load is served by the app itself from the installed package, none from another host.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from fedldp.server.settings import Settings
from fedldp.server.web.app import DOCS_ASSETS, create_app

_LOADED = re.compile(r"""(?:src|href|url)\s*[=:(]\s*['"]([^'"]+)['"]""")
_ANY_URL = re.compile(r"(?:https?:)?//[A-Za-z0-9.-]+\.[A-Za-z]{2,}")


@pytest.fixture
async def http(tmp_path: Path) -> httpx.AsyncClient:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/docs.db"), sweeper=False)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://docs.test")


@pytest.mark.parametrize(
    ("page", "assets"),
    [
        ("/docs", {"swagger-ui-bundle.js", "swagger-ui.css", "favicon.png"}),
        ("/redoc", {"redoc.standalone.js", "favicon.png"}),
    ],
)
async def test_docs_pages_load_only_local_assets(
    http: httpx.AsyncClient, page: str, assets: set[str]
) -> None:
    async with http:
        html = (await http.get(page)).raise_for_status().text
        assert _ANY_URL.findall(html) == [], f"{page} names another host"
        loaded = set(_LOADED.findall(html))
        assert loaded >= {f"{DOCS_ASSETS}/{name}" for name in assets} | {"/openapi.json"}
        for url in loaded:
            response = await http.get(url)
            assert response.status_code == 200, url
            assert len(response.content) > 1000, url  # the real file, not an error page
        schema = (await http.get("/openapi.json")).json()
        assert schema["info"]["title"] == "fedldp aggregation server"


async def test_an_unknown_asset_is_a_404(http: httpx.AsyncClient) -> None:
    async with http:
        response = await http.get(f"{DOCS_ASSETS}/nothing.js")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"

"""The dashboard's files as the server serves them (server/web/dashboard.py; the browser tests are
tests/e2e/test_dashboard*.py): the page at ``/`` links the study and campaign views, every file is
served from the server itself (no other host, so it works offline), and every API path the script
asks for is a route the server has."""

from __future__ import annotations

import re

import httpx
import pytest
from fastapi import FastAPI

from fedldp.server.web.dashboard import STATIC

SVG_NAMESPACE = "http://www.w3.org/2000/svg"
ACTIONS = ("start", "cancel")
"""What ``${action}`` stands for in the script (its admin buttons)."""


async def test_the_page_links_the_studies_and_the_campaigns(client: httpx.AsyncClient) -> None:
    page = await client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["cache-control"] == "no-cache"
    assert 'href="#/campaigns"' in page.text
    assert 'href="#/"' in page.text
    assert '<script src="/static/app.js"></script>' in page.text
    script = await client.get("/static/app.js")
    assert script.status_code == 200
    assert "javascript" in script.headers["content-type"]
    for view in ("function studyPage(", "function campaignListPage(", "function campaignPage("):
        assert view in script.text
    assert (await client.get("/static/style.css")).status_code == 200
    schema = (await client.get("/openapi.json")).json()
    assert "/" not in schema["paths"]


@pytest.mark.parametrize("name", sorted(p.name for p in STATIC.iterdir()))
async def test_nothing_is_loaded_from_another_host(client: httpx.AsyncClient, name: str) -> None:
    text = (await client.get(f"/static/{name}")).text
    assert text
    elsewhere = re.findall(r"(?:https?:)?//[\w.-]+\.\w+[^\s\"'`)]*", text)
    assert [u for u in elsewhere if u != SVG_NAMESPACE] == [], name
    assert not re.search(r"@import|<link[^>]+href=\"(?!/static/|data:)", text), name


def _served(app: FastAPI, path: str) -> bool:
    """Whether ``path`` is one of the API's routes (as its OpenAPI document lists them)."""
    templates = app.openapi()["paths"]
    return any(re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", t), path) for t in templates)


def test_every_path_the_script_asks_for_is_a_route(app: FastAPI) -> None:
    script = (STATIC / "app.js").read_text(encoding="utf-8")
    asked = set(re.findall(r"(?:api|EventSource)\([`\"](/v1/[^`\"?]*)", script))
    assert {"/v1/studies", "/v1/campaigns", "/v1/campaigns/${id}"} <= asked
    paths = set()
    for path in asked:
        for action in ACTIONS if "${action}" in path else ("",):
            paths.add(re.sub(r"\$\{id\}", "0" * 32, path.replace("${action}", action)))
    assert [p for p in sorted(paths) if not _served(app, p)] == []

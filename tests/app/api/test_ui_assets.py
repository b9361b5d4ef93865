"""/ui is served by the broker itself: the page and its two files, with their content types,
and nothing else; the page references only the broker's own URLs."""

from __future__ import annotations

import re

import pytest

from tests.support.app import ServeFactory

pytestmark = pytest.mark.anyio


async def test_page_and_assets_come_from_the_broker(serve: ServeFactory) -> None:
    """The page, its script and its style answer 200 with their types; / and /ui redirect to
    /ui/ (no token needed), and / is no operation of the spec; another name is a 404
    problem; the page loads nothing from another host."""
    async with serve(auth_tokens={"admin-token": ["admin"]}) as served:
        client = served.client
        root = await client.get("/")
        assert root.status_code == 307 and root.headers["location"] == "/ui/"
        assert "/" not in (await client.get("/openapi.json")).json()["paths"]
        redirect = await client.get("/ui")
        assert redirect.status_code == 308 and redirect.headers["location"] == "/ui/"
        page = await client.get("/ui/")  # static and public: the data needs the token
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        references = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert sorted(references) == ["/ui/dashboard.css", "/ui/dashboard.js"]
        for path, media_type in (("/ui/dashboard.js", "text/javascript"),
                                 ("/ui/dashboard.css", "text/css")):
            asset = await client.get(path)
            assert asset.status_code == 200 and asset.headers["content-type"].startswith(
                media_type)
        script = (await client.get("/ui/dashboard.js")).text
        assert "http://" not in script and "https://" not in script
        missing = await client.get("/ui/../app/settings.py")
        assert missing.status_code == 404
        assert (await client.get("/ui/secrets.txt")).status_code == 404
        data = await client.get("/admin/ha")
        assert data.status_code == 401


async def test_every_element_the_script_writes_is_in_the_page(serve: ServeFactory) -> None:
    """Each id the script sets text on (classic and DLedger labels alike) or fills as a table
    exists in the page: a renamed id would leave a panel silently blank."""
    async with serve() as served:
        page = (await served.client.get("/ui/")).text
        script = (await served.client.get("/ui/dashboard.js")).text
    ids = set(re.findall(r'\bid="([^"]+)"', page))
    written = set(re.findall(r'(?:setText|fillTable|getElementById)\("([\w-]+)"', script))
    written |= set(re.findall(r'querySelector\("#([\w-]+)', script))
    assert {"epoch-label", "connections-label", "chart-title", "slaves"} <= written
    assert written <= ids, sorted(written - ids)

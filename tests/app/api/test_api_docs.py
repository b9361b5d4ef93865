"""/docs and /redoc work offline: their pages reference only assets the broker serves itself."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from app.api.api_docs import ASSETS_DIR
from tests.support.app import ServeFactory

pytestmark = pytest.mark.anyio

ADMIN_TOKEN = "docs-admin-token"
_CONTENT_TYPES = {".js": ("text/javascript", "application/javascript"), ".css": ("text/css",),
                  ".png": ("image/png",)}
_QUOTED_URL = re.compile(r"""(?:url:\s*|spec-url=)['"](?P<url>[^'"]+)['"]""")


class _References(HTMLParser):
    """Every URL a page makes the browser load: src and href attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


def _references(html: str) -> tuple[list[str], list[str]]:
    """(asset URLs, spec URLs) of a page."""
    parser = _References()
    parser.feed(html)
    return parser.urls, [match.group("url") for match in _QUOTED_URL.finditer(html)]


@pytest.mark.parametrize(("page", "expected_assets"), [
    ("/docs", {"swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"}),
    ("/redoc", {"redoc.standalone.js", "favicon-32x32.png"}),
])
async def test_page_loads_only_local_assets(serve: ServeFactory, page: str,
                                            expected_assets: set[str]) -> None:
    """The page names no other host, and each asset it loads answers 200 with its type and
    the vendored bytes, without a token on a broker that has tokens."""
    async with serve(auth_tokens={ADMIN_TOKEN: ["admin"]}) as served:
        answer = await served.client.get(page)
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/html")
        assert "http://" not in answer.text and "https://" not in answer.text
        assets, specs = _references(answer.text)
        assert {url.rsplit("/", 1)[-1] for url in assets} == expected_assets
        assert specs == ["/openapi.json"]
        for url in assets:
            assert url.startswith("/") and not url.startswith("//"), url
            asset = await served.client.get(url)
            assert asset.status_code == 200, url
            suffix = Path(url).suffix
            assert asset.headers["content-type"].startswith(_CONTENT_TYPES[suffix]), url
            assert asset.content == (ASSETS_DIR / url.removeprefix("/static/")).read_bytes()
        spec = await served.client.get(specs[0])
        assert spec.status_code == 200 and spec.json()["info"]["title"] == "twinlog"


async def test_swagger_ui_validator_badge_is_off(serve: ServeFactory) -> None:
    """Swagger UI is told not to call validator.swagger.io (its default) from the browser."""
    async with serve() as served:
        answer = await served.client.get("/docs")
        assert '"validatorUrl": null' in answer.text


async def test_unknown_asset_is_404(serve: ServeFactory) -> None:
    """A path under /static that is not a vendored file answers 404, not a directory listing."""
    async with serve() as served:
        assert (await served.client.get("/static/")).status_code == 404
        assert (await served.client.get("/static/../settings.py")).status_code == 404

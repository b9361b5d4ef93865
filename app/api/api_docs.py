"""/docs (Swagger UI) and /redoc (ReDoc), with their assets served by the broker itself.

FastAPI's own pages load Swagger UI and ReDoc from a CDN and a favicon from fastapi's site, so on
a machine without internet access they stay blank. The assets are vendored in `app/api/static/`
(shipped in the wheel as package data; versions and licenses in `app/api/static/README.md`) and
served under /static; the pages reference nothing else, and Swagger UI's online validator badge
(which would call validator.swagger.io) is turned off.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_DIR = Path(__file__).resolve().parent / "static"
ASSETS_URL = "/static"
SWAGGER_UI_PATH = "/docs"
REDOC_PATH = "/redoc"
SWAGGER_JS_URL = f"{ASSETS_URL}/swagger-ui/swagger-ui-bundle.js"
SWAGGER_CSS_URL = f"{ASSETS_URL}/swagger-ui/swagger-ui.css"
REDOC_JS_URL = f"{ASSETS_URL}/redoc/redoc.standalone.js"
FAVICON_URL = f"{ASSETS_URL}/swagger-ui/favicon-32x32.png"


def install(app: FastAPI) -> None:
    """Add /docs, /redoc and /static to an app built with docs_url=None and redoc_url=None."""
    assert app.docs_url is None and app.redoc_url is None, "FastAPI's CDN pages are on"
    assert app.openapi_url is not None
    openapi_url = app.openapi_url
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="static")

    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=f"{app.title} - Swagger UI",
            swagger_js_url=SWAGGER_JS_URL, swagger_css_url=SWAGGER_CSS_URL,
            swagger_favicon_url=FAVICON_URL, oauth2_redirect_url=None,
            swagger_ui_parameters={"validatorUrl": None})

    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=openapi_url, title=f"{app.title} - ReDoc",
                              redoc_js_url=REDOC_JS_URL, redoc_favicon_url=FAVICON_URL,
                              with_google_fonts=False)

    app.add_api_route(SWAGGER_UI_PATH, swagger_ui, include_in_schema=False)
    app.add_api_route(REDOC_PATH, redoc, include_in_schema=False)

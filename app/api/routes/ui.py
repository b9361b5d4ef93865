"""`/ui`: the dashboard page (and `/`, which redirects to it), served by the broker itself
from the installed package (no CDN, no build step). The page is static and public; the data it
polls (/admin/ha, /metrics) needs a monitor or admin token, which the page asks for."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import RedirectResponse
from starlette.responses import Response

from app.api.errors import ApiError

router = APIRouter(include_in_schema=False)

_ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}


@cache
def _asset(name: str) -> bytes:
    return files("app.api.ui").joinpath(name).read_bytes()


@router.get("/")
async def root_page() -> Response:
    """A browser pointed at the broker lands on the dashboard (307: the root may serve
    something else one day)."""
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui")
async def dashboard_page() -> Response:
    return RedirectResponse("/ui/", status_code=308)


@router.get("/ui/")
async def dashboard_index() -> Response:
    return _serve("index.html")


@router.get("/ui/{name}")
async def dashboard_asset(name: str) -> Response:
    return _serve(name)


def _serve(name: str) -> Response:
    media_type = _ASSETS.get(name)
    if media_type is None:
        raise ApiError("NOT_FOUND", f"no dashboard file {name!r}")
    return Response(_asset(name), media_type=media_type,
                    headers={"Cache-Control": "no-cache"})

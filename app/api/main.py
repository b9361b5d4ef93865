"""`create_app(settings)`: the FastAPI app of one broker.

Building the app touches no disk and starts no thread (the OpenAPI document can be generated
anywhere); the lifespan builds and starts the Broker, and stops it at shutdown. Every
background activity (periodic snapshots and the put-rate sampler included) is the Broker's:
the app starts none of its own.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.routing import Match

from app.api import api_docs, openapi
from app.api.asgi_route import TwinlogAPI
from app.api.auth import Authenticator
from app.api.body_guard import BodyGuard
from app.api.direct_lane import DirectLane
from app.api.errors import (
    ApiError,
    code_for_http_status,
    from_metadata_error,
    from_put_status,
    render,
)
from app.api.gateway import Gateway
from app.api.routes import (
    admin,
    consume,
    dledger,
    groups,
    health,
    messages,
    produce,
    receive,
    receive_lean,
    timers,
    topics,
    ui,
)
from app.broker.broker import Broker
from app.broker.metadata_log import MetadataWriteFailed
from app.server.gc_tuning import tuned_gc
from app.server.memory_trim import release_free_memory
from app.settings import Settings, load_settings
from store.metadata import MetadataError

log = logging.getLogger(__name__)

VERSION = "0.1.0"
# FastAPI >= 0.16x traces every request with OpenTelemetry unless told not to; twinlog has its
# own Prometheus metrics, and the check alone costs about a sixth of a small produce.
_NO_TELEMETRY = {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings if settings is not None else load_settings()
    options: dict[str, Any] = {}
    if "telemetry" in inspect.signature(FastAPI).parameters:
        options["telemetry"] = _NO_TELEMETRY
    app = TwinlogAPI(title="twinlog", version=VERSION, lifespan=_lifespan, docs_url=None,
                     redoc_url=None, **options)
    app.state.gateway = Gateway(settings, Authenticator(settings.auth_tokens))
    produce.install(app)
    routers = (consume.router, messages.router, timers.router, topics.router, groups.router,
               receive.router,
               admin.router, dledger.router, health.router, ui.router)
    for router in routers:
        app.include_router(router)
    for lean in (consume.LEAN, *messages.LEAN_ROUTES, *groups.LEAN_ROUTES, *admin.LEAN_ROUTES,
                 *receive_lean.LEAN_ROUTES):
        app.add_lean_route(lean)
    app.set_direct_lane(DirectLane(app.state.gateway, (consume.DIRECT,)))
    app.body_guard = BodyGuard(app, routers)
    _install_error_handlers(app)
    openapi.install(app)
    api_docs.install(app)
    _install_cors(app, settings.cors_allow_origins)
    return app


def _install_cors(app: FastAPI, origins: list[str]) -> None:
    """Browser dashboards on other origins (cors_allow_origins); none set, no middleware, so
    the produce path pays nothing for it."""
    if not origins:
        return
    app.add_middleware(CORSMiddleware, allow_origins=origins,
                       allow_methods=["GET", "POST", "PUT"], allow_headers=_CORS_HEADERS,
                       expose_headers=["idempotent-replayed", "allow", "retry-after"],
                       max_age=_CORS_MAX_AGE_S)


_CORS_HEADERS = ["authorization", "content-type", "idempotency-key", "x-twinlog-keys",
                 "x-twinlog-tags", "x-twinlog-properties"]
_CORS_MAX_AGE_S = 600


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    gateway: Gateway = app.state.gateway
    broker = Broker(gateway.settings)
    broker.start()  # and its background work: snapshots, rates (app/broker/broker.py)
    gateway.broker = broker
    if gateway.auth.is_open:
        log.warning("auth is OPEN: no auth_tokens are set, every request is allowed "
                    "(development only)")
    try:
        with tuned_gc(gateway.settings.gc_tuning):
            release_free_memory()  # what starting freed goes back to the system
            yield
    finally:
        broker.stop()


def _problem_response(request: Request, error: ApiError) -> Response:
    problem = render(error, request.url.path)
    return Response(problem.body, status_code=problem.http_status,
                    headers={name.decode(): value.decode() for name, value in problem.headers})


def _install_error_handlers(app: FastAPI) -> None:
    """Every error becomes problem+json through the one table in app/api/errors.py."""

    async def api_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, ApiError)
        return _problem_response(request, error)

    async def metadata_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, MetadataError)
        return _problem_response(request, from_metadata_error(error))

    async def metadata_write_failed(request: Request, error: Exception) -> Response:
        assert isinstance(error, MetadataWriteFailed)
        return _problem_response(request, from_put_status(error.outcome.status,
                                                          error.outcome.detail))

    async def request_validation(request: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        problems = [{"loc": list(problem.get("loc", ())), "msg": str(problem.get("msg", "")),
                     "type": str(problem.get("type", ""))} for problem in error.errors()]
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        about_body = any(problem["loc"][:1] == ["body"] for problem in problems)
        if about_body and media_type not in ("", "application/json"):
            return _problem_response(request, ApiError(
                "UNSUPPORTED_MEDIA_TYPE", f"Content-Type {media_type!r}: send application/json"))
        return _problem_response(request, validation_error_from_list(problems))

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, StarletteHTTPException)
        code = code_for_http_status(error.status_code)
        response = _problem_response(request, ApiError(code, str(error.detail)))
        if error.status_code == 405:
            # RFC 9110: a 405 names the methods the path has (all its routes, not the first).
            response.headers["allow"] = _allowed_methods(request)
        return response

    async def unexpected(request: Request, error: Exception) -> Response:
        log.error("unhandled error on %s %s", request.method, request.url.path,
                  exc_info=error)
        return _problem_response(request, ApiError("INTERNAL_ERROR", "the broker failed; see "
                                                   "its log"))

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(MetadataError, metadata_error)
    app.add_exception_handler(MetadataWriteFailed, metadata_write_failed)
    app.add_exception_handler(RequestValidationError, request_validation)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _allowed_methods(request: Request) -> str:
    """The methods some route (included routers too) fully matches for this path."""
    routes = request.app.router.routes
    allowed = [method for method in _METHODS
               if any(route.matches({**request.scope, "method": method})[0] is Match.FULL
                      for route in routes)]
    return ", ".join(allowed)


def validation_error_from_list(problems: list[dict[str, Any]]) -> ApiError:
    """FastAPI's validation errors as ours (400; MALFORMED_JSON for a body that is not JSON)."""
    if any(problem["type"] == "json_invalid" for problem in problems):
        return ApiError("MALFORMED_JSON", "the body is not valid JSON")
    listed = problems[:20]
    first = listed[0] if listed else {"loc": [], "msg": "invalid request"}
    where = ".".join(str(part) for part in first["loc"]) or "request"
    return ApiError("VALIDATION_FAILED", f"{where}: {first['msg']}", errors=listed)


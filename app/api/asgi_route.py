"""Path operations served by plain ASGI callables, documented like any other.

FastAPI builds an ASGIOperation's OpenAPI entry from `endpoint`'s signature, `responses` and
`openapi_extra`, exactly as for a normal route; requests, though, go straight to `asgi_app`,
skipping FastAPI's per-request machinery (middleware stack, router walk, dependency solving,
body parsing, response serialization). For produce that machinery costs more CPU than the
store's append (bench/http_produce.py: a bare FastAPI endpoint with a body model is 5x slower
than a bare ASGI callable on the same server), so the produce operations use this, and their
ASGI callables validate exactly what the documented signature declares (the same pydantic
models). The endpoint itself is never called.

`TwinlogAPI` matches its ASGIOperations (POST only) before anything else, with each route's own
path regex, so their requests skip the middleware stack and the router too; the callables
answer every error themselves (problem+json, 500 included), so no middleware is needed.

It then matches its lean routes (app/api/lean_lane.py: reads and offset commits), also with
their FastAPI routes' own regexes; a request a lean handler leaves (`Fallback`) goes on to
FastAPI's lane. The lean lane is off while any middleware is installed (CORS): its answers
would lack what the middleware adds.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api import lean_lane
from app.api.body_guard import replay
from app.api.direct_lane import DirectLane

BodyGuardCall = Callable[[Scope, Receive, Send, ASGIApp], Awaitable[None]]


class ASGIOperation(APIRoute):
    def __init__(self, path: str, endpoint: Callable[..., Any], *, asgi_app: ASGIApp,
                 **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        self.app = asgi_app


def documentation_only() -> NoReturn:
    """The body of an ASGIOperation's endpoint: reaching it is a bug."""
    raise AssertionError("an ASGIOperation's endpoint only documents it; asgi_app serves it")


class TwinlogAPI(FastAPI):
    """FastAPI with a fast lane for POST ASGIOperations (added with `add_fast_operation`)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._fast_operations: tuple[ASGIOperation, ...] = ()
        self._lean_routes: dict[str, tuple[tuple[re.Pattern[str], lean_lane.LeanHandler],
                                           ...]] = {}
        # Set by create_app (app/api/body_guard.py): the other routes' auth-before-body check.
        self.body_guard: BodyGuardCall | None = None
        self._direct_lane: DirectLane | None = None

    def set_direct_lane(self, lane: DirectLane) -> None:
        """Routes the HTTP protocol may answer without this app (app/api/direct_lane.py)."""
        self._direct_lane = lane

    @property
    def direct_lane(self) -> DirectLane | None:
        """The direct lane, unless something this app adds to every answer or a root path
        makes the ASGI lane answer differently (as the lean lane is off then)."""
        if self.user_middleware or self.root_path:
            return None
        return self._direct_lane

    def add_fast_operation(self, operation: ASGIOperation) -> None:
        assert operation.methods == {"POST"}, operation.methods
        self.router.routes.insert(len(self._fast_operations), operation)
        self._fast_operations = (*self._fast_operations, operation)

    def add_lean_route(self, lean: lean_lane.LeanRoute) -> None:
        """Serve `lean.method` requests to `lean.path` with its handler first; FastAPI's
        route of that path serves what the handler leaves (its regex is the one matched)."""
        path_regex, _, _ = compile_path(lean.path)
        self._lean_routes[lean.method] = (*self._lean_routes.get(lean.method, ()),
                                          (path_regex, lean.handler))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # With a root_path the route path differs from scope["path"]: take the normal lane.
        if scope["type"] == "http" and not self.root_path and not scope.get("root_path"):
            method = scope["method"]
            if method == "POST":
                path = scope["path"]
                for operation in self._fast_operations:
                    match = operation.path_regex.match(path)
                    if match is not None:
                        scope["app"] = self
                        scope["route"] = operation
                        scope["path_params"] = match.groupdict()
                        await operation.app(scope, receive, send)
                        return
            lean_routes = self._lean_routes.get(method)
            if lean_routes is not None and not self.user_middleware:
                path = scope["path"]
                for path_regex, handler in lean_routes:
                    match = path_regex.match(path)
                    if match is not None:
                        fallback = await lean_lane.serve(handler, scope, match.groupdict(),
                                                         receive, send, self.state.gateway)
                        if fallback is None:
                            return
                        if fallback.body is not None:
                            receive = replay(fallback.body, receive)
                        break
        if scope["type"] == "http" and self.body_guard is not None:
            await self.body_guard(scope, receive, send, super().__call__)
            return
        await super().__call__(scope, receive, send)

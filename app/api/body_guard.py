"""Auth, then size, then reading, for every route FastAPI serves (produce has its own lane).

FastAPI reads and parses a request's whole body before it solves the route's dependencies, the
token check among them: without this guard an unauthenticated 150 MB `POST /v1/topics` was read
into memory and answered 400. For a request that carries a body (a Content-Length above 0, or
Transfer-Encoding), the guard finds the route, checks the token against the scope the route's
`requires` dependency names (401/403), checks the declared length against
max_metadata_body_size_bytes (413), then reads the body itself, counting a chunked one as it
arrives (413 once past the limit), and hands the app the bytes it read. A path no route serves,
or a method a route does not allow, passes through unread: the app answers 404/405 without
reading it, and the protocol drops the rest (app/server/http_protocol.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import APIRouter, FastAPI, params
from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.asgi_answer import send_problem
from app.api.asgi_body import Disconnected, read_body
from app.api.deps import ScopeCheck
from app.api.errors import ApiError
from app.api.gateway import Gateway
from app.settings import Scope as TokenScope

SETTING = "max_metadata_body_size_bytes"


def carries_body(headers: list[tuple[bytes, bytes]]) -> tuple[bool, bytes | None]:
    """(whether the request has a body, its declared Content-Length)."""
    for name, value in headers:
        if name == b"content-length":
            return value != b"0", value
        if name == b"transfer-encoding":
            return True, None
    return False, None


def too_large(size: int, size_max: int) -> ApiError:
    return ApiError("REQUEST_TOO_LARGE", f"request body of {size} bytes or more is over the "
                    f"limit of {size_max} bytes ({SETTING})", setting=SETTING)


def _scope_of(dependencies: Iterable[params.Depends]) -> TokenScope | None:
    for dependency in dependencies:
        if isinstance(dependency.dependency, ScopeCheck):
            return dependency.dependency.token_scope
    return None


class BodyGuard:
    def __init__(self, app: FastAPI, routers: Iterable[APIRouter]) -> None:
        """Guard the routes of `routers` (as included in `app`, without a prefix)."""
        self._app = app
        # Each route with the token scope its router's or its own `requires` names.
        self._routes: list[tuple[APIRoute, TokenScope | None]] = [
            (route, _scope_of([*router.dependencies, *route.dependencies]))
            for router in routers for route in router.routes if isinstance(route, APIRoute)]

    def _match(self, scope: Scope) -> tuple[APIRoute, TokenScope | None] | None:
        for route, token_scope in self._routes:
            if route.matches(scope)[0] is Match.FULL:
                return route, token_scope
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
        """Serve a request that carries a body with `app`, checked in order."""
        has_body, content_length = carries_body(scope["headers"])
        matched = self._match(scope) if has_body else None
        if matched is None:
            await app(scope, receive, send)
            return
        gateway: Gateway = self._app.state.gateway
        token_scope = matched[1]
        try:
            if token_scope is not None:
                gateway.auth.check(_authorization(scope), token_scope)
            body = await read_body(receive, content_length,
                                   gateway.settings.max_metadata_body_size_bytes, too_large)
        except ApiError as error:
            await send_problem(send, scope, error)
            return
        except Disconnected:
            return
        await app(scope, replay(body, receive), send)


def _authorization(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return bytes(value).decode("latin-1")
    return None


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the body read already, then whatever the client sends next
    (a disconnect)."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay

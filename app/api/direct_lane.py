"""The direct lane: answers the HTTP protocol writes itself, without an ASGI request.

The lean lane (app/api/lean_lane.py) spares a read FastAPI's machinery; the request still
costs uvicorn's: a scope, a request/response cycle, a task, the ASGI wrappers, two `send`
messages turned back into bytes. For the hottest reads that is a quarter of the CPU of an
answer. A `DirectRoute` answers from the parts the HTTP parser already holds (path
parameters, the raw query string, the header fields) and gives back the answer itself, which
the protocol writes (app/server/direct_answers.py): at once when it is ready, or from a task
when the handler has more to do after a turn of the event loop.

The direct lane serves only what it answers with success, and only before its first side
effect may it decline: a handler raises `Fallback` (or any error, a problem included) before
it returns, and the request takes the ASGI lane as if the direct lane did not exist, which
answers it (errors too) as it always did. So what the direct lane writes is the lean lane's
success answer, and every other answer is the lean or FastAPI lane's own. What a handler's
pending part raises (an error it did not expect) is answered with the problem the lean lane
makes for it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NamedTuple

from starlette.routing import compile_path
from starlette.types import Scope

from app.api.errors import Problem
from app.api.gateway import Gateway
from app.api.lean_lane import Headers, problem_of


class Answer(NamedTuple):
    """A whole answer: its status, its header fields (without content-length), its body."""

    http_status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


# (path parameters, raw query string, header fields, gateway) -> the answer now, or one to
# await; raises (Fallback or anything) to leave the request to the ASGI lane.
DirectHandler = Callable[[dict[str, str], bytes, Headers, Gateway], "Answer | Awaitable[Answer]"]


@dataclass(frozen=True, slots=True)
class DirectRoute:
    method: str
    path: str  # the FastAPI route's path: the regex is that route's own
    handler: DirectHandler


class DirectLane:
    """The direct routes of one app, with its gateway."""

    def __init__(self, gateway: Gateway, routes: tuple[DirectRoute, ...]) -> None:
        self.gateway = gateway
        self._routes: dict[bytes, tuple[tuple[re.Pattern[str], DirectHandler], ...]] = {}
        for route in routes:
            path_regex, _, _ = compile_path(route.path)
            method = route.method.encode("ascii")
            self._routes[method] = (*self._routes.get(method, ()), (path_regex, route.handler))

    def serves(self, method: bytes) -> bool:
        """Whether any direct route takes this method (a produce's POST: none, so it goes to
        the ASGI lane before anything else of its head is looked at)."""
        return method in self._routes

    def route(self, method: bytes, path: str) -> tuple[DirectHandler, dict[str, str]] | None:
        """The handler of a request and its path parameters; None when no route serves it."""
        routes = self._routes.get(method)
        if routes is not None:
            for path_regex, handler in routes:
                match = path_regex.match(path)
                if match is not None:
                    return handler, match.groupdict()
        return None

    def answer(self, handler: DirectHandler, path_params: dict[str, str], query_string: bytes,
               headers: Headers) -> Answer | Awaitable[Answer] | None:
        """The handler's answer (or the awaitable that makes it); None when the ASGI lane is
        to serve the request."""
        try:
            return handler(path_params, query_string, headers, self.gateway)
        except Exception:  # noqa: BLE001 - Fallback, or an error the ASGI lane answers itself
            return None

    @staticmethod
    def problem(scope: Scope, error: Exception) -> Problem:
        """The answer to an error a pending answer raised: the lean lane's for it."""
        return problem_of(scope, error)

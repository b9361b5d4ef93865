"""The lean lane: reads (and offset commits) served without FastAPI's per-request machinery.

Produce skips FastAPI with ASGIOperations (app/api/asgi_route.py). The reads a consumer or a
dashboard polls (consume, a message by id or key, lag, offsets, /admin/diff) and the offset
commit do the same here, differently: their FastAPI routes stay as they are (they document
the operation and still serve what the lean lane leaves them), and a `LeanRoute` answers first
what it can check with a few string tests: the token, the broker, path and query parameters
in their plain form (digits within the bounds, a name matching its pattern, a listed choice).
Anything else (a parameter out of its plain form or bounds, a body that is not the plain JSON
object) raises `Fallback` before a byte is sent, and FastAPI's lane answers it exactly as it
always did: validation problems included, since FastAPI checks the token and the broker
before it validates parameters, and the lean lane checks them in that order too.

Errors a lean handler raises become the answers FastAPI's exception handlers make
(app/api/main.py): the same problem+json through app/api/errors.py. Success answers are
built with orjson, in the response model's field order.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.datastructures import URL
from starlette.types import Receive, Scope, Send

from app.api.asgi_answer import send_answer
from app.api.asgi_body import Disconnected, read_body
from app.api.body_guard import carries_body
from app.api.body_guard import too_large as body_too_large
from app.api.errors import (
    ApiError,
    Problem,
    from_metadata_error,
    from_put_status,
    render,
)
from app.api.gateway import Gateway
from app.broker.broker import Broker
from app.broker.metadata_log import MetadataWriteFailed
from app.settings import Scope as TokenScope
from store.metadata import MetadataError

log = logging.getLogger(__name__)

JSON_HEADERS = [(b"content-type", b"application/json")]
# Python's `$` also matches before a final newline, pydantic's patterns do not: a value with
# anything but these characters takes FastAPI's lane, whatever the pattern says.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_%|-]+")


class Fallback(Exception):
    """Raised by a lean handler before it sends anything: FastAPI's lane serves the request
    (with `body`, when the lean handler read it already)."""

    def __init__(self, body: bytes | None = None) -> None:
        super().__init__()
        self.body = body


LeanHandler = Callable[[Scope, dict[str, str], Receive, Send, Gateway], Awaitable[None]]
Headers = Iterable[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class LeanRoute:
    method: str
    path: str  # the FastAPI route's path: the regex is that route's own
    handler: LeanHandler


async def serve(handler: LeanHandler, scope: Scope, path_params: dict[str, str],
                receive: Receive, send: Send, gateway: Gateway) -> Fallback | None:
    """Serve a request with `handler`; the Fallback when FastAPI's lane must serve it."""
    try:
        await handler(scope, path_params, receive, send, gateway)
    except Fallback as fallback:
        return fallback
    except Disconnected:
        pass
    except Exception as error:  # noqa: BLE001 - every error is answered as FastAPI would
        problem = problem_of(scope, error)
        await send_answer(send, problem.http_status, problem.body, problem.headers)
    return None


def problem_of(scope: Scope, error: Exception) -> Problem:
    """The problem FastAPI's handlers answer for `error` (a 500 logged, for one they do not
    know): its `instance` is the path as Starlette's URL gives it (without the tabs and line
    breaks URL parsing drops)."""
    if isinstance(error, ApiError):
        known = error
    elif isinstance(error, MetadataError):
        known = from_metadata_error(error)
    elif isinstance(error, MetadataWriteFailed):
        known = from_put_status(error.outcome.status, error.outcome.detail)
    else:
        log.error("unhandled error on %s %s", scope["method"], scope["path"], exc_info=error)
        known = ApiError("INTERNAL_ERROR", "the broker failed; see its log")
    return render(known, URL(scope=scope).path)


async def send_json(send: Send, body: bytes, http_status: int = 200) -> None:
    """An answer of JSON `body` (built with orjson by the handler)."""
    await send_answer(send, http_status, body, JSON_HEADERS)


# -- the request's parts, in their plain form or Fallback ----------------------------------------


def admit(scope: Scope, gateway: Gateway, token_scope: TokenScope) -> Broker:
    """The checks FastAPI's dependencies make first on a read: the token's scope (401/403),
    then a running broker (503)."""
    return admit_headers(scope["headers"], gateway, token_scope)


def admit_headers(headers: Headers, gateway: Gateway, token_scope: TokenScope) -> Broker:
    """`admit` on a request's header fields (names in lower case)."""
    gateway.auth.check(authorization_of(headers), token_scope)
    return gateway.running_broker()


def authorization(scope: Scope) -> str | None:
    """The first Authorization header, as Starlette's `headers.get` gives it."""
    return authorization_of(scope["headers"])


def authorization_of(headers: Headers) -> str | None:
    for name, value in headers:
        if name == b"authorization":
            return bytes(value).decode("latin-1")
    return None


def query_of(scope: Scope) -> dict[str, str]:
    """The query parameters as Starlette parses them (the last of a repeated one wins)."""
    return parsed_query(scope.get("query_string", b""))


def parsed_query(query_string: bytes) -> dict[str, str]:
    """`query_of` on a raw query string."""
    if not query_string:
        return {}
    text = query_string.decode("latin-1")
    if "%" in text or "+" in text:
        return dict(parse_qsl(text, keep_blank_values=True))
    # Nothing to unquote: parse_qsl's pairs, split as it splits them (empty parts skipped).
    query = {}
    for part in text.split("&"):
        if part:
            name, _, value = part.partition("=")
            query[name] = value
    return query


def whole_number(text: str, low: int, high: int) -> int:
    """`text` as an int in [low, high] when it is plain decimal digits (no sign, no leading
    zero, no spaces); Fallback otherwise."""
    if not (0 < len(text) <= 19 and text.isascii() and text.isdigit()) \
            or (text[0] == "0" and len(text) > 1):
        raise Fallback
    value = int(text)
    if not low <= value <= high:
        raise Fallback
    return value


def whole_param(query: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = query.get(name)
    return default if text is None else whole_number(text, low, high)


def choice_param(query: dict[str, str], name: str, default: str,
                 choices: tuple[str, ...]) -> str:
    text = query.get(name, default)
    if text not in choices:
        raise Fallback
    return text


async def admitted_body(scope: Scope, receive: Receive, gateway: Gateway,
                        token_scope: TokenScope) -> bytes:
    """The checks the body guard makes on a request with a body, in its order: the token's
    scope (401/403), the body's size (413), then the body read; Fallback without a body."""
    gateway.auth.check(authorization(scope), token_scope)
    has_body, content_length = carries_body(scope["headers"])
    if not has_body:
        raise Fallback
    return await read_body(receive, content_length,
                           gateway.settings.max_metadata_body_size_bytes, body_too_large)


def plain_json(headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[bool, Any]:
    """(True, the body's JSON document) when its content type is JSON or absent and it
    parses; (False, None) for anything FastAPI must judge."""
    for name, value in headers:
        if name == b"content-type" and \
                value.split(b";", 1)[0].strip().lower() != b"application/json":
            return False, None
    try:
        return True, orjson.loads(body)
    except orjson.JSONDecodeError:
        return False, None


def name_matching(text: str, pattern: re.Pattern[str]) -> str:
    """`text` when it matches `pattern` (a route's name pattern) and holds only the
    characters names may hold; Fallback otherwise."""
    if _PLAIN_NAME.fullmatch(text) is None or pattern.search(text) is None:
        raise Fallback
    return text

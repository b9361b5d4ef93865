"""What the protocol needs to write the direct lane's answers itself (app/api/direct_lane.py).

uvicorn answers a request through a request/response cycle: a scope, a task running the ASGI
app, `send` messages it turns into a head and a body. The guarded protocol
(app/server/http_protocol.py) skips all of it for a request a direct route serves: it calls
the route's handler from the parser's callback and writes the answer it returns, in one
write, as uvicorn would have written it (`answer_bytes`: the same status line, its default
headers first, then the answer's, content-length, `connection: close` when the connection
ends). An answer that needs a turn of the event loop is awaited by a task of the server's,
as an ASGI request's is, and the protocol holds a `DirectCycle` meanwhile: what uvicorn's own
code reads of a cycle (pipelined requests wait behind it, a shutdown makes it the last one,
a lost connection marks it disconnected).

Which requests the protocol may answer so is decided by `takes_direct_lane`: HTTP/1.1, a GET
without a body, nothing in flight before it on the connection, nothing the ASGI lane would
treat specially (an upgrade, a percent-encoded path).
"""

from __future__ import annotations

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from app.api.direct_lane import Answer

# Header fields of a request with a body or an expectation: the ASGI lane serves those.
_BODY_HEADERS = frozenset({b"content-length", b"transfer-encoding", b"expect"})


class _NoEvent:
    """Stands for a cycle's message event: no app task waits on a direct answer's."""

    __slots__ = ()

    def set(self) -> None:
        pass

    def clear(self) -> None:
        pass


class DirectCycle:
    """uvicorn's RequestResponseCycle as far as the protocol uses one."""

    __slots__ = ("keep_alive", "response_started", "response_complete", "disconnected",
                 "more_body", "body", "message_event")

    def __init__(self, keep_alive: bool, complete: bool = False) -> None:
        self.keep_alive = keep_alive
        self.response_started = self.response_complete = complete
        self.disconnected = False
        self.more_body = False
        self.body = bytearray()
        self.message_event = _NoEvent()


# The cycle of every direct answer written at once: complete, so nothing changes it.
ANSWERED = DirectCycle(keep_alive=True, complete=True)


def bodiless(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request's header fields announce no body and no expectation."""
    return all(name not in _BODY_HEADERS for name, _ in headers)


def plain_target(parser: httptools.HttpRequestParser, url: bytes,
                 headers: list[tuple[bytes, bytes]]) -> tuple[str, bytes] | None:
    """The path and query of a request the direct lane may take (HTTP/1.1, no upgrade, no
    body or expectation, a plain origin-form path: not percent-encoded, ASCII); None for any
    other, which the ASGI lane answers as it always did."""
    if parser.get_http_version() != "1.1" or parser.should_upgrade() \
            or not url.startswith(b"/") or b"%" in url or not bodiless(headers):
        return None
    try:
        parsed = httptools.parse_url(url)
        return parsed.path.decode("ascii"), parsed.query or b""
    except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
        return None


def answer_bytes(answer: Answer, default_headers: list[tuple[bytes, bytes]],
                 keep_alive: bool) -> list[bytes]:
    """The answer's head and body as uvicorn writes them for an app's `send` of a start
    (the server's default headers, then the answer's, then content-length) and a body."""
    head = [STATUS_LINE[answer.http_status]]
    for name, value in default_headers:
        head += (name.lower(), b": ", value, b"\r\n")
    for name, value in answer.headers:
        head += (name.lower(), b": ", value, b"\r\n")
    head.append(b"content-length: %d\r\n" % len(answer.body))
    if not keep_alive:
        head.append(b"connection: close\r\n")
    head.append(b"\r\n")
    return [b"".join(head), answer.body] if answer.body else [b"".join(head)]

"""uvicorn's httptools protocol with the limits a gateway needs against slow and huge clients.

uvicorn bounds none of these with httptools: a request head of any size is buffered by the
parser, a client that stops sending half-way through its headers or body holds its connection
(and a descriptor) for ever, and connections are not counted at accept. This subclass adds, per
connection (docs/gateway-limits.md lists the settings):

- a cap on open connections: past `connections_max` a new connection gets a 503 problem with
  Retry-After and is closed at once, before its request is read;
- head limits: request line and headers over `header_bytes_max` bytes, or more than
  `headers_max` fields, get 431 and a close; the parser buffers at most one read past it;
- deadlines: the head must be whole within `header_timeout_s` of the connection opening or the
  previous response, the body within `body_timeout_s` of its head; past either, 408 (if no
  answer was started) and a close;
- one write per answer: its head goes out with its body (app/server/joined_writes.py);
- a bounded linger: when the app answers before reading the whole body (401, 413), the rest
  is read and dropped for at most LINGER_S and LINGER_BYTES, then the connection closes. Not
  closing at once lets the client read the answer (a close with unread data sends a reset,
  which can destroy the answer in the client's receive buffer).

Deadlines are timestamps checked by `expire_overdue`, which the server calls every few ticks:
a request costs a few attribute writes, not a timer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.api.direct_lane import Answer, DirectHandler, DirectLane
from app.api.errors import ApiError, render
from app.api.metrics import RefusalCounts
from app.server.direct_answers import ANSWERED, DirectCycle, answer_bytes, plain_target
from app.server.joined_writes import join_writes
from app.server.read_workers.pool import ReadWorkers
from app.settings import Settings

log = logging.getLogger(__name__)

# The first bytes of a consume read (app/api/routes/consume.py's path): a connection that
# begins with them is offered to a read worker, which hands back what it does not serve.
_READ_PREFIX = b"GET /v1/topics/"
LINGER_S = 2.0
LINGER_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    connections_max: int
    header_bytes_max: int
    headers_max: int
    header_timeout_s: float
    body_timeout_s: float

    @classmethod
    def from_settings(cls, settings: Settings, connections_max: int) -> ConnectionLimits:
        return cls(connections_max=connections_max,
                   header_bytes_max=settings.http_header_bytes_max,
                   headers_max=settings.http_headers_max,
                   header_timeout_s=settings.http_header_timeout_s,
                   body_timeout_s=settings.http_body_timeout_s)


def _raw_response(error: ApiError) -> bytes:
    """A whole HTTP/1.1 problem answer that closes the connection, written without the app."""
    problem = render(error)
    lines = [b"HTTP/1.1 %d %s" % (problem.http_status, _REASONS[problem.http_status])]
    for name, value in problem.headers:
        lines.append(name + b": " + value)
    lines += [b"content-length: %d" % len(problem.body), b"connection: close", b"", b""]
    return b"\r\n".join(lines) + problem.body


_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large",
            503: b"Service Unavailable"}


class _HeadRefused(Exception):
    """Raised in a parser callback to stop parsing; the refusal to send is already chosen."""


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    # Set on the subclass `protocol_class` makes for one server.
    limits: ClassVar[ConnectionLimits]
    counts: ClassVar[RefusalCounts]
    responses: ClassVar[dict[str, bytes]]
    direct_lane: ClassVar[DirectLane | None] = None
    # Set while read workers run (app/server/read_workers/): a connection whose first bytes
    # are a consume read is handed to one.
    read_workers: ClassVar[ReadWorkers | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_in_progress = False
        self._head_started_in_feed = False
        self._message_ended_in_feed = False
        self._head_bytes = 0
        self._body_pending = False
        self._linger_bytes_left: int | None = None
        self._refusal: bytes | None = None
        self.deadline_s: float | None = None
        self._deadline_kind = ""
        # A request a direct route answers: its handler, path parameters, query string and
        # keep-alive, from its head until its message completes.
        self._direct: tuple[DirectHandler, dict[str, str], bytes, bool] | None = None
        # A connection a read worker handed back: the bytes it sent that nobody answered yet
        # (set before connection_made). Such a connection is not handed out again.
        self.carried = b""
        self._first_data = True

    # -- connection -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.connections_max:
            self.counts.connections_refused += 1
            self._close_with(self.responses["connections"])
            return
        self._set_deadline("head", self.limits.header_timeout_s)
        if self.carried and not self.transport.is_closing():
            carried, self.carried = self.carried, b""
            self._first_data = False
            self.data_received(carried)

    def data_received(self, data: bytes) -> None:
        if self._first_data:
            self._first_data = False
            if self.read_workers is not None and data.startswith(_READ_PREFIX) \
                    and self._hand_to_read_worker(self.read_workers, data):
                return
        self._head_started_in_feed = self._message_ended_in_feed = False
        super().data_received(data)
        if not self._head_in_progress or self.transport.is_closing():
            return
        # A chunk that ended a message and began the next counts nothing for the new head: an
        # undercount of at most one read, never a refusal of a pipelined body.
        if not (self._head_started_in_feed and self._message_ended_in_feed):
            self._head_bytes += len(data)
        if self._head_bytes > self.limits.header_bytes_max:
            self.counts.heads_too_large += 1
            self._close_with(self.responses["head_bytes"])

    def _hand_to_read_worker(self, workers: ReadWorkers, data: bytes) -> bool:
        """Hand the connection, whose first bytes are `data`, to a read worker; True when one
        took it (this process's copy of the connection is closed)."""
        if self.transport.is_closing():
            return False
        if not workers.offer(self.transport.get_extra_info("socket"), data):
            return False
        self.deadline_s = None
        self.transport.close()
        return True

    def send_400_response(self, msg: str) -> None:
        if self._refusal is None:
            super().send_400_response(msg)
        else:
            self._close_with(self._refusal)

    def _close_with(self, response: bytes) -> None:
        self.deadline_s = None
        if self.cycle is not None and not self.cycle.response_complete:
            # The app may still send: its answer must not follow ours on the wire.
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        if not self.transport.is_closing():
            self.transport.write(response)
            self.transport.close()

    # -- parser callbacks -----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_in_progress = self._head_started_in_feed = True
        self._head_bytes = 0

    def on_headers_complete(self) -> None:
        # Counted here, not per header: the byte limit already bounds what the fields hold,
        # and a per-header callback would cost every request.
        if len(self.headers) > self.limits.headers_max:
            self.counts.heads_too_large += 1
            self._refusal = self.responses["header_count"]
            raise _HeadRefused
        self._head_in_progress = False
        self._body_pending = True
        self._set_deadline("body", self.limits.body_timeout_s)
        if self.direct_lane is not None and self._takes_direct_lane(self.direct_lane):
            return  # answered when the message completes
        self._start_asgi()

    def _start_asgi(self) -> None:
        super().on_headers_complete()
        join_writes(self.cycle)

    def on_body(self, body: bytes) -> None:
        if self._linger_bytes_left is not None:
            self._linger_bytes_left -= len(body)
            if self._linger_bytes_left < 0:
                self.counts.lingers_cut += 1
                self._close_with(b"")
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._body_pending = False
        self._message_ended_in_feed = True
        direct, self._direct = self._direct, None
        if direct is not None:
            self._answer_direct(*direct)
        super().on_message_complete()
        if self._linger_bytes_left is not None:
            self._linger_bytes_left = None  # the client sent it all: keep the connection
        if self.cycle.response_complete:
            self._set_deadline("head", self.limits.header_timeout_s)
        else:
            self.deadline_s = None  # the app works on it; no client deadline applies

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if self._body_pending:
            # Answered before the body was read (a refusal): drop the rest, boundedly.
            self._linger_bytes_left = LINGER_BYTES
            self._set_deadline("linger", LINGER_S)
        elif pipelined:
            self.deadline_s = None  # the next request's head is whole; its app runs
        else:
            self._set_deadline("head", self.limits.header_timeout_s)

    # -- the direct lane (app/server/direct_answers.py) ------------------------------------------

    def _takes_direct_lane(self, lane: DirectLane) -> bool:
        """Whether a direct route may answer this request (then noted for on_message_complete):
        HTTP/1.1, no body, nothing in flight or queued before it, written output not held
        back, a plain origin-form path that a direct route serves."""
        parser = self.parser
        method = parser.get_method()
        if not lane.serves(method):
            return False
        cycle = self.cycle
        if (cycle is not None and not cycle.response_complete) or self.pipeline \
                or self.flow.write_paused or self.access_log \
                or self.limit_concurrency is not None:
            return False
        target = plain_target(parser, self.url, self.headers)
        if target is None:
            return False  # the ASGI lane answers it as it always did
        path, query_string = target
        route = lane.route(method, path)
        if route is None:
            return False
        self._direct = (*route, query_string, parser.should_keep_alive())
        return True

    def _answer_direct(self, handler: DirectHandler, path_params: dict[str, str],
                       query_string: bytes, keep_alive: bool) -> None:
        lane = self.direct_lane
        assert lane is not None
        answer = lane.answer(handler, path_params, query_string, self.headers)
        if answer is None:
            self._start_asgi()
        elif isinstance(answer, Answer):
            cycle = ANSWERED if keep_alive else DirectCycle(keep_alive)
            self.cycle = cycle  # type: ignore[assignment]
            self._write_direct(answer, cycle)
        else:
            cycle = DirectCycle(keep_alive)
            self.cycle = cycle  # type: ignore[assignment]
            # (a pipelined request's head may replace the protocol's url and scope meanwhile)
            scope = self._problem_scope(query_string)
            task = self.loop.create_task(self._answer_later(cycle, answer, scope))
            task.add_done_callback(self.tasks.discard)
            self.tasks.add(task)

    async def _answer_later(self, cycle: DirectCycle, pending: Awaitable[Answer],
                            scope: dict[str, Any]) -> None:
        try:
            answer = await pending
        except Exception as error:  # noqa: BLE001 - answered as the lean lane answers it
            problem = DirectLane.problem(scope, error)
            answer = Answer(problem.http_status, problem.headers, problem.body)
        if self.flow.write_paused and not cycle.disconnected:
            await self.flow.drain()
        if not cycle.disconnected:
            self._write_direct(answer, cycle)

    def _write_direct(self, answer: Answer, cycle: DirectCycle) -> None:
        self.transport.writelines(answer_bytes(answer, self.server_state.default_headers,
                                               cycle.keep_alive))
        cycle.response_started = cycle.response_complete = True
        if not cycle.keep_alive:
            self.transport.close()
        self.on_response_complete()

    def _problem_scope(self, query_string: bytes) -> dict[str, Any]:
        """The scope uvicorn would have made, as far as a problem's `instance` reads it."""
        path = httptools.parse_url(self.url).path.decode("ascii")
        return {"type": "http", "scheme": self.scheme, "server": self.server,
                "headers": self.headers, "method": "GET", "path": path,
                "raw_path": path.encode(), "query_string": query_string}

    # -- deadlines ------------------------------------------------------------------------------

    def _set_deadline(self, kind: str, timeout_s: float) -> None:
        self._deadline_kind = kind
        self.deadline_s = self.loop.time() + timeout_s

    def expire(self) -> None:
        """The deadline passed: answer 408 if nothing was answered yet, and close."""
        kind = self._deadline_kind
        if kind == "linger":
            self.counts.lingers_cut += 1
            self._close_with(b"")
            return
        if kind == "head":
            self.counts.head_timeouts += 1
        else:
            self.counts.body_timeouts += 1
        answered = self.cycle is not None and self.cycle.response_started \
            and not self.cycle.response_complete
        self._close_with(b"" if answered else self.responses[kind])


def expire_overdue(connections: Iterable[object], now_s: float) -> None:
    """Close every guarded connection whose deadline has passed."""
    for connection in list(connections):
        if isinstance(connection, GuardedHttpToolsProtocol):
            deadline_s = connection.deadline_s
            if deadline_s is not None and now_s >= deadline_s:
                connection.expire()


def protocol_class(limits: ConnectionLimits, counts: RefusalCounts,
                   direct_lane: DirectLane | None = None) -> type[GuardedHttpToolsProtocol]:
    """A protocol class for one server (uvicorn builds the protocol from a class); with
    `direct_lane`, the requests its routes serve are answered without the ASGI app."""
    responses = {
        "connections": _raw_response(ApiError(
            "TOO_MANY_CONNECTIONS", f"the broker holds {limits.connections_max} connections "
            "(http_connections_max, or the descriptor budget); retry later",
            setting="http_connections_max")),
        "head_bytes": _raw_response(ApiError(
            "REQUEST_HEADERS_TOO_LARGE", f"the request line and headers are over "
            f"{limits.header_bytes_max} bytes", setting="http_header_bytes_max")),
        "header_count": _raw_response(ApiError(
            "REQUEST_HEADERS_TOO_LARGE", f"more than {limits.headers_max} header fields",
            setting="http_headers_max")),
        "head": _raw_response(ApiError(
            "REQUEST_TIMEOUT", f"the request head did not arrive within "
            f"{limits.header_timeout_s:g} s", setting="http_header_timeout_s")),
        "body": _raw_response(ApiError(
            "REQUEST_TIMEOUT", f"the request body did not arrive within "
            f"{limits.body_timeout_s:g} s of its head", setting="http_body_timeout_s")),
    }
    return type("TwinlogHttpProtocol", (GuardedHttpToolsProtocol,),
                {"limits": limits, "counts": counts, "responses": responses,
                 "direct_lane": direct_lane})

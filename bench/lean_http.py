"""A lean HTTP/1.1 client for the benchmarks: one keep-alive connection, nothing else.

The benches compare twinlog with brokers whose clients are thin (redis-py with its C parser
writes a command as bytes and reads a reply with hiredis). httpx does much more per request
(a URL object, header models, an event-driven h11 state machine, the stdlib JSON module), and
in a consumption bench its CPU is the largest single cost of the twinlog side. This client is
the other end of the scale, so a bench can show both: a request is written as one bytes
object, the answer is parsed by httptools (llhttp, the C parser uvicorn uses) and JSON by
orjson.

Bounded: each request has a deadline (`timeout_s`; the connection is closed when it passes,
since an answer may still be on its way), an answer's body has a maximum size, and one request
is in flight at a time on a connection (a second one while the first waits is refused).
Answers framed by Content-Length and chunked ones are both read (llhttp handles the framing).
An answer that closes the connection (`Connection: close`) is read whole, and the next
request opens a new connection. Bench code, not part of the product.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import httptools
import orjson

TIMEOUT_S = 30.0
RESPONSE_BYTES_MAX = 64 * 1024 * 1024


class LeanHttpError(Exception):
    """The answer could not be had: a timeout, a closed connection, a malformed or too large
    answer, or (from `raise_for_status`) an answer that is not 2xx."""


@dataclass(frozen=True, slots=True)
class LeanResponse:
    status_code: int
    content: bytes

    def json(self) -> Any:
        return orjson.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode()

    def raise_for_status(self) -> None:
        if not 200 <= self.status_code < 300:
            raise LeanHttpError(f"HTTP {self.status_code}: {self.content[:300]!r}")


class _AnswerProtocol(asyncio.Protocol):
    """Feeds what the socket reads to llhttp and completes the waiting request's future."""

    def __init__(self, response_bytes_max: int) -> None:
        self._response_bytes_max = response_bytes_max
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._chunks: list[bytes] = []
        self._size_bytes = 0
        self._waiter: asyncio.Future[LeanResponse] | None = None
        self.keep_alive = True
        self.closed = False

    # asyncio's side
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            self._fail(LeanHttpError(f"bytes with no request waiting: {data[:100]!r}"))
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            # A callback's own refusal (too large) comes back as the parser error's context.
            cause = error.__context__
            self._fail(cause if isinstance(cause, LeanHttpError)
                       else LeanHttpError(f"malformed answer: {error}"))

    def connection_lost(self, error: Exception | None) -> None:
        self.closed = True
        self._fail(LeanHttpError(f"connection closed before the answer ended ({error})"))

    # llhttp's callbacks
    def on_message_begin(self) -> None:
        self._chunks = []
        self._size_bytes = 0

    def on_body(self, body: bytes) -> None:
        self._size_bytes += len(body)
        if self._size_bytes > self._response_bytes_max:
            raise LeanHttpError(f"answer over {self._response_bytes_max} bytes")
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        self.keep_alive = self._parser.should_keep_alive()
        if waiter is not None and not waiter.done():
            waiter.set_result(LeanResponse(self._parser.get_status_code(),
                                           b"".join(self._chunks)))

    # the client's side
    def send(self, request: bytes, waiter: asyncio.Future[LeanResponse]) -> None:
        if self._waiter is not None:
            raise LeanHttpError("a request is already waiting on this connection")
        assert self._transport is not None
        self._waiter = waiter
        self._transport.write(request)

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    def _fail(self, error: LeanHttpError) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        self.close()


class LeanHttp:
    """One keep-alive connection to `base_url` (http://host:port); use with `async with`."""

    def __init__(self, base_url: str, timeout_s: float = TIMEOUT_S,
                 response_bytes_max: int = RESPONSE_BYTES_MAX) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"expected http://host:port, got {base_url!r}")
        self._host, self._port = parts.hostname, parts.port
        self._host_header = f"{self._host}:{self._port}"
        self._timeout_s = timeout_s
        self._response_bytes_max = response_bytes_max
        self._protocol: _AnswerProtocol | None = None

    async def __aenter__(self) -> LeanHttp:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._protocol is not None:
            self._protocol.close()
            self._protocol = None

    async def get(self, path: str, params: dict[str, Any] | None = None) -> LeanResponse:
        return await self.request("GET", path, params=params)

    async def post(self, path: str, json: Any = None) -> LeanResponse:
        return await self.request("POST", path, json=json)

    async def put(self, path: str, json: Any = None) -> LeanResponse:
        return await self.request("PUT", path, json=json)

    async def request(self, method: str, path: str, json: Any = None,
                      params: dict[str, Any] | None = None) -> LeanResponse:
        if params:
            path = f"{path}?{urlencode(params)}"
        head = f"{method} {path} HTTP/1.1\r\nHost: {self._host_header}\r\n"
        if json is None:
            request = (head + "\r\n").encode()
        else:
            body = orjson.dumps(json)
            request = (f"{head}Content-Type: application/json\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        protocol = await self._connection()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[LeanResponse] = loop.create_future()
        protocol.send(request, waiter)
        # A deadline by call_later, not wait_for: on Python 3.11 wait_for wraps the wait in a
        # task of its own, a cost per request this client exists to avoid.
        deadline = loop.call_later(self._timeout_s, _expire, waiter, protocol, self._timeout_s)
        try:
            response = await waiter
        except BaseException:
            # Failed, timed out or cancelled: the connection may still get (part of) the
            # answer, so it is of no more use.
            protocol.close()
            raise
        finally:
            deadline.cancel()
        if not protocol.keep_alive:
            protocol.close()
        return response

    async def _connection(self) -> _AnswerProtocol:
        if self._protocol is None or self._protocol.closed:
            loop = asyncio.get_running_loop()
            try:
                _, protocol = await asyncio.wait_for(loop.create_connection(
                    lambda: _AnswerProtocol(self._response_bytes_max), self._host,
                    self._port), self._timeout_s)
            except (OSError, TimeoutError) as error:
                raise LeanHttpError(f"cannot connect to {self._host_header}: {error}") \
                    from error
            self._protocol = protocol
        return self._protocol


def _expire(waiter: asyncio.Future[LeanResponse], protocol: _AnswerProtocol,
            timeout_s: float) -> None:
    if not waiter.done():
        waiter.set_exception(LeanHttpError(f"no answer within {timeout_s} s"))
        protocol.close()

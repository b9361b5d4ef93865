"""The guarded protocol writes an answer's head and body in one transport write
(app/server/joined_writes.py): the same bytes on the wire, one write where uvicorn made two.

A uvloop server of the broker's protocol class on 127.0.0.1, a real client socket; the
server's transports record each write call before passing it on."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
import uvloop
from uvicorn.server import ServerState

from app.api.metrics import RefusalCounts
from app.server.http_protocol import ConnectionLimits, protocol_class

LIMITS = ConnectionLimits(connections_max=16, header_bytes_max=8192, headers_max=64,
                          header_timeout_s=10.0, body_timeout_s=10.0)


class RecordingTransport:
    """A transport that notes each write call (the bytes it carries) and passes it on."""

    def __init__(self, transport: asyncio.Transport, writes: list[bytes]) -> None:
        self._transport = transport
        self._writes = writes

    def write(self, data: bytes) -> None:
        self._writes.append(bytes(data))
        self._transport.write(data)

    def writelines(self, lines: list[bytes]) -> None:
        self._writes.append(b"".join(lines))
        self._transport.writelines(lines)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """200 with a Content-Length body in one message, or chunked in two (path /chunked)."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/chunked":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"one", "more_body": True})
        await send({"type": "http.response.body", "body": b"two"})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", b"5")]})
    await send({"type": "http.response.body", "body": b"hello"})


def exchange(request: bytes, answer_end: bytes) -> tuple[bytes, list[bytes]]:
    """`request` sent to a fresh server; what the client read until `answer_end`, and the
    server's write calls."""
    writes: list[bytes] = []
    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    config.load()
    base = protocol_class(LIMITS, RefusalCounts())

    class Recorded(base):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(RecordingTransport(transport, writes))

    async def run() -> bytes:
        loop = asyncio.get_running_loop()
        state = ServerState()
        server = await loop.create_server(
            lambda: Recorded(config=config, server_state=state, app_state={}),
            "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        received = await asyncio.wait_for(reader.readuntil(answer_end), 10)
        writer.close()
        server.close()
        return received

    return uvloop.run(run()), writes


def test_a_whole_answer_leaves_in_one_write() -> None:
    received, writes = exchange(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n", b"hello")
    assert received == (b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5"
                        b"\r\n\r\nhello")
    assert writes == [received]


def test_a_head_answer_is_written_at_its_end_before_the_next_answer() -> None:
    received, writes = exchange(b"HEAD / HTTP/1.1\r\nHost: t\r\n\r\n"
                                b"GET / HTTP/1.1\r\nHost: t\r\n\r\n", b"hello")
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\n"
    assert received == head + head + b"hello"
    assert writes == [head, head + b"hello"]


def test_a_chunked_answer_joins_its_head_to_the_first_chunk_only() -> None:
    received, writes = exchange(b"GET /chunked HTTP/1.1\r\nHost: t\r\n\r\n", b"0\r\n\r\n")
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n"
    assert received == head + b"3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n"
    assert writes == [head + b"3\r\none\r\n", b"3\r\ntwo\r\n0\r\n\r\n"]


def test_an_answer_that_closes_the_connection_leaves_in_one_write() -> None:
    received, writes = exchange(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                                b"hello")
    assert received.startswith(b"HTTP/1.1 200 OK\r\n") and b"connection: close" in received
    assert writes == [received]

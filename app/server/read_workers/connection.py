"""One connection a read worker serves: request heads in, answers out, and the connection
handed back to main at the first request the worker does not answer.

A read has no body, so a request is its head: the worker cuts the bytes at each head's end,
parses the head (httptools, as uvicorn does) and answers it with the same bytes main's
direct lane writes (app/server/direct_answers.py). At a request it does not answer it stops
reading, waits for its answers to be written, and hands the descriptor back with that head
and everything after it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any, cast

import httptools

from app.api.direct_lane import Answer
from app.api.lean_lane import JSON_HEADERS
from app.server.direct_answers import answer_bytes, plain_target

_HEAD_END = b"\r\n\r\n"


class _Head:
    """httptools' callbacks for one request head: what the direct lane looks at, read when
    the head is complete (the parser forgets its state at the message's end)."""

    __slots__ = ("parser", "url", "headers", "target", "keep_alive", "complete")

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.target: tuple[str, bytes] | None = None
        self.keep_alive = False
        self.complete = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        if parser.get_method() == b"GET":
            self.target = plain_target(parser, self.url, self.headers)
        self.keep_alive = parser.should_keep_alive()

    def on_message_complete(self) -> None:
        self.complete = True


class WorkerConnection(asyncio.Protocol):
    """`host` is the worker (app/server/read_workers/worker.py): reads, limits, hand-back."""

    def __init__(self, host: Any, carried: bytes) -> None:
        self._host = host
        self._buffer = bytearray(carried)
        self.transport: asyncio.Transport | None = None
        self.idle_since_s = time.monotonic()
        self.handing_back = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)
        self._host.connections.add(self)
        if self._buffer:
            self._serve()

    def connection_lost(self, exc: Exception | None) -> None:
        self._host.connections.discard(self)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._serve()

    def _serve(self) -> None:
        transport = self.transport
        assert transport is not None
        while not self.handing_back and not transport.is_closing():
            end = self._buffer.find(_HEAD_END)
            if end < 0:
                if len(self._buffer) > self._host.head_bytes_max:
                    self.hand_back()
                return
            answer = self._answer(bytes(self._buffer[:end + len(_HEAD_END)]))
            if answer is None:
                self.hand_back()
                return
            data, keep_alive = answer
            del self._buffer[:end + len(_HEAD_END)]
            transport.write(data)
            self._host.reads_served += 1
            self.idle_since_s = time.monotonic()
            if not keep_alive:
                transport.close()

    def _answer(self, head: bytes) -> tuple[bytes, bool] | None:
        """The whole HTTP answer to a request head and whether the connection stays; None
        when main is to answer it."""
        parsed = _Head()
        try:
            parsed.parser.feed_data(head)
        except httptools.HttpParserError:
            return None
        if not parsed.complete or parsed.target is None:
            return None
        document = self._host.reads.answer(*parsed.target, parsed.headers)
        if document is None:
            return None
        keep_alive = parsed.keep_alive
        parts = answer_bytes(Answer(200, JSON_HEADERS, document), self._host.default_headers,
                             keep_alive)
        return b"".join(parts), keep_alive

    def hand_back(self) -> None:
        """Give the connection back to main with what it sent that was not answered, once
        what was answered is written (bounded: past HAND_BACK_WAIT_S it is closed)."""
        transport = self.transport
        assert transport is not None
        self.handing_back = True
        transport.pause_reading()
        self._hand_back_when_written(transport, time.monotonic() + HAND_BACK_WAIT_S)

    def _hand_back_when_written(self, transport: asyncio.Transport, deadline_s: float) -> None:
        if transport.is_closing():
            return
        if transport.get_write_buffer_size():
            if time.monotonic() > deadline_s:
                self._host.hand_backs_failed += 1
                transport.abort()
                return
            loop = asyncio.get_running_loop()
            loop.call_later(0.001, self._hand_back_when_written, transport, deadline_s)
            return
        fd = os.dup(transport.get_extra_info("socket").fileno())
        try:
            sent = self._host.hand_back(fd, bytes(self._buffer))
        finally:
            os.close(fd)
        if not sent:
            self._host.hand_backs_failed += 1
        # (closes this process's descriptor only: main's copy keeps the connection)
        transport.close()

    def expire(self, now_s: float, idle_s: float, head_s: float,
               on_overdue: Callable[[WorkerConnection], None]) -> None:
        """Close an idle connection past the keep-alive timeout; hand back one whose head
        is overdue (main answers the 408)."""
        if self.handing_back or self.transport is None or self.transport.is_closing():
            return
        if not self._buffer and now_s - self.idle_since_s > idle_s:
            self.transport.close()
        elif self._buffer and now_s - self.idle_since_s > head_s:
            on_overdue(self)


HAND_BACK_WAIT_S = 5.0

"""An answer's head and its body in one socket write.

uvicorn writes a response's status line and headers when the app sends `http.response.start`,
and its body at `http.response.body`: two `transport.write` calls, and with uvloop (which
writes at once when nothing is queued) two send syscalls and two TCP segments per answer, the
client woken twice. On the short answers a consumer or a producer gets, that second write was
the largest single cost of a request (bench/http_consume.py's profile: uvicorn's send, most of
it the socket writes).

`JoinedWritesCycle` holds the head and writes it with the first body write (`writelines`: one
writev), or alone when the answer ends without one (a HEAD request) or the connection closes.
The guarded protocol (app/server/http_protocol.py) gives every request this cycle. What
leaves on the wire is the same bytes in the same order.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle


class _HeadCapture:
    """Stands for the transport while uvicorn writes a head: keeps what is written."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.data.append(data)


class _HeadFirst:
    """Stands for the transport while uvicorn sends a body: the held head goes out with the
    first write, or before a close; `flush` sends it if neither came."""

    __slots__ = ("transport", "head")

    def __init__(self, transport: asyncio.Transport, head: list[bytes]) -> None:
        self.transport = transport
        self.head: list[bytes] | None = head

    def write(self, data: bytes) -> None:
        head, self.head = self.head, None
        if head is None:
            self.transport.write(data)
        else:
            self.transport.writelines([*head, data])

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def flush(self) -> None:
        head, self.head = self.head, None
        if head is not None and not self.transport.is_closing():
            self.transport.writelines(head)


class JoinedWritesCycle(RequestResponseCycle):
    """uvicorn's request/response cycle, its answer's head held until the body is written."""

    _held_head: list[bytes] | None = None

    async def send(self, message: ASGISendEvent) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            await self._send_start(message)
            return
        head, self._held_head = self._held_head, None
        if head is None:
            await super().send(message)
            return
        transport = self.transport
        head_first = _HeadFirst(transport, head)
        self.transport = head_first  # type: ignore[assignment]
        try:
            await super().send(message)
        finally:
            self.transport = transport
            head_first.flush()

    async def _send_start(self, message: ASGISendEvent) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()  # before the capture: nothing else may see it
        transport = self.transport
        capture = _HeadCapture()
        self.transport = capture  # type: ignore[assignment]
        try:
            await super().send(message)  # writes nothing but the head, awaits nothing
        finally:
            self.transport = transport
        if capture.data:
            self._held_head = capture.data


def join_writes(cycle: Any) -> None:
    """Give a cycle uvicorn just made (and whose task has not run yet) the joined writes."""
    if type(cycle) is RequestResponseCycle:
        cycle.__class__ = JoinedWritesCycle

"""The classic RocketMQ HA wire format (shared/reference/rocketmq-ha.md section 1).

slave -> master: 8-byte big-endian max offset (report, ack and heartbeat at once).
master -> slave: 12-byte header (int64 offset, int32 size) + `size` raw commit-log bytes;
a header with size 0 is a heartbeat.

Before the stream, the handshake of ha/auth.py names the slave and, with a secret, proves it
both ways; then every report and frame may carry a trailing tag of `tag_size` bytes, checked
here in order by the `check` callable the parser is given. Parsers take bytes from any source
and never trust a size field.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
REPORT_SIZE = REPORT.size
HEADER_SIZE = HEADER.size
READ_BUFFER_SIZE_BYTES = 4 * 1024 * 1024

# check(tag, frame bytes) raises ProtocolError when the tag does not authenticate the bytes.
TagCheck = Callable[[memoryview, memoryview], None]


class ProtocolError(ValueError):
    """The peer sent something the protocol does not allow: close the connection."""


def encode_report(offset: int) -> bytes:
    assert offset >= 0
    return REPORT.pack(offset)


def encode_header(offset: int, size_bytes: int) -> bytes:
    assert offset >= 0 and 0 <= size_bytes <= READ_BUFFER_SIZE_BYTES
    return HEADER.pack(offset, size_bytes)


class ReportParser:
    """Master side: the slave's 8-byte reports (each followed by its tag on an authenticated
    link). Only the last complete one matters (RocketMQ reads them the same way), but every
    tag is checked in order; less than one report is ever kept between feeds."""

    def __init__(self, tag_size: int = 0, check: TagCheck | None = None) -> None:
        assert (tag_size == 0) == (check is None)
        self._unit = REPORT_SIZE + tag_size
        self._check = check
        self._pending = b""

    def feed(self, data: bytes) -> int | None:
        """The last complete report in `_pending + data`, or None when there is none yet."""
        buffer = self._pending + data
        complete = len(buffer) - len(buffer) % self._unit
        self._pending = buffer[complete:]
        if complete == 0:
            return None
        if self._check is not None:
            view = memoryview(buffer)
            for start in range(0, complete, self._unit):
                self._check(view[start + REPORT_SIZE:start + self._unit],
                            view[start:start + REPORT_SIZE])
        (offset,) = REPORT.unpack_from(buffer, complete - self._unit)
        if offset < 0:
            raise ProtocolError(f"negative offset {offset} in a report")
        return int(offset)


class FrameParser:
    """Slave side: transfer frames, parsed in place in one fixed buffer (no copies).

    Receive into `free_view()`, then `received(size)` returns the complete frames as
    (offset, body view) pairs; the views stay valid until the next `free_view()`, which moves
    an incomplete frame to the front. A header whose size is negative or over the read buffer
    is a ProtocolError, so a frame always fits and the buffer never grows.
    """

    def __init__(self, buffer_size_bytes: int = READ_BUFFER_SIZE_BYTES, tag_size: int = 0,
                 check: TagCheck | None = None) -> None:
        assert (tag_size == 0) == (check is None)
        self._size_max = buffer_size_bytes
        self._tag_size = tag_size
        self._check = check
        self._buffer = bytearray(buffer_size_bytes + HEADER_SIZE + tag_size)
        self._view = memoryview(self._buffer)
        self._start = 0  # first byte not yet handed out as part of a frame
        self._end = 0  # one past the last byte received

    @property
    def buffered_bytes(self) -> int:
        return self._end - self._start

    def free_view(self) -> memoryview:
        if self._start:
            pending = self._end - self._start
            self._buffer[:pending] = self._view[self._start : self._end]
            self._start, self._end = 0, pending
        return self._view[self._end :]

    def received(self, size_bytes: int) -> list[tuple[int, memoryview]]:
        assert 0 <= size_bytes <= len(self._buffer) - self._end
        self._end += size_bytes
        frames: list[tuple[int, memoryview]] = []
        position, end = self._start, self._end
        while end - position >= HEADER_SIZE:
            offset, size = HEADER.unpack_from(self._buffer, position)
            if size < 0 or size > self._size_max:
                raise ProtocolError(f"frame size {size} is outside [0, {self._size_max}]")
            if offset < 0:
                raise ProtocolError(f"negative frame offset {offset}")
            body_end = position + HEADER_SIZE + size
            frame_end = body_end + self._tag_size
            if frame_end > end:
                break
            if self._check is not None:
                self._check(self._view[body_end:frame_end], self._view[position:body_end])
            frames.append((offset, self._view[position + HEADER_SIZE : body_end]))
            position = frame_end
        self._start = position
        return frames

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[int, bytes]]:
        """Copying convenience for callers that hold bytes already (tests, tools)."""
        frames: list[tuple[int, bytes]] = []
        source = memoryview(data)
        while source:
            free = self.free_view()
            if not free:
                raise ProtocolError("read buffer full without a complete frame")
            size = min(len(free), len(source))
            free[:size] = source[:size]
            source = source[size:]
            frames += [(offset, bytes(body)) for offset, body in self.received(size)]
        return frames

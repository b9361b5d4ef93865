"""The classic RocketMQ HA wire format (shared/reference/rocketmq-ha.md section 1).

slave -> master: 8-byte big-endian max offset (report, ack and heartbeat at once).
master -> slave: 12-byte header (int64 offset, int32 size) + `size` raw commit-log bytes;
a header with size 0 is a heartbeat.

Optional handshake when a secret is configured: the master opens with `HANDSHAKE_MAGIC` and a
16-byte nonce; the slave answers HMAC-SHA256(secret, nonce). Without a secret the stream is
exactly the classic one. Parsers take bytes from any source and never trust a size field.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
REPORT_SIZE = REPORT.size
HEADER_SIZE = HEADER.size
READ_BUFFER_SIZE_BYTES = 4 * 1024 * 1024
HANDSHAKE_MAGIC = b"TWHA"
NONCE_SIZE = 16
PROOF_SIZE = hashlib.sha256().digest_size
CHALLENGE_SIZE = len(HANDSHAKE_MAGIC) + NONCE_SIZE


class ProtocolError(ValueError):
    """The peer sent something the protocol does not allow: close the connection."""


def encode_report(offset: int) -> bytes:
    assert offset >= 0
    return REPORT.pack(offset)


def encode_header(offset: int, size_bytes: int) -> bytes:
    assert offset >= 0 and 0 <= size_bytes <= READ_BUFFER_SIZE_BYTES
    return HEADER.pack(offset, size_bytes)


def proof(secret: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, nonce, hashlib.sha256).digest()


def proof_matches(secret: bytes, nonce: bytes, answer: bytes) -> bool:
    return hmac.compare_digest(proof(secret, nonce), answer)


class ReportParser:
    """Master side: the slave's 8-byte reports. Only the last complete one matters (RocketMQ
    reads them the same way); at most 7 bytes are ever kept between feeds."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> int | None:
        """The last complete report in `_pending + data`, or None when there is none yet."""
        buffer = self._pending + data
        complete = len(buffer) - len(buffer) % REPORT_SIZE
        self._pending = buffer[complete:]
        if complete == 0:
            return None
        (offset,) = REPORT.unpack_from(buffer, complete - REPORT_SIZE)
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

    def __init__(self, buffer_size_bytes: int = READ_BUFFER_SIZE_BYTES) -> None:
        self._size_max = buffer_size_bytes
        self._buffer = bytearray(buffer_size_bytes + HEADER_SIZE)
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
            frame_end = position + HEADER_SIZE + size
            if frame_end > end:
                break
            frames.append((offset, self._view[position + HEADER_SIZE : frame_end]))
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

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
    """Slave side: transfer frames out of a bounded buffer.

    `feed` returns the complete frames as (offset, body view) pairs; a header whose size is
    negative or over the read buffer is a ProtocolError. The views stay valid only until the
    next `feed`.
    """

    def __init__(self, buffer_size_bytes: int = READ_BUFFER_SIZE_BYTES) -> None:
        self._size_max = buffer_size_bytes
        self._buffer = bytearray()

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[int, bytes]]:
        buffer = self._buffer
        buffer += data
        frames: list[tuple[int, bytes]] = []
        position = 0
        while len(buffer) - position >= HEADER_SIZE:
            offset, size = HEADER.unpack_from(buffer, position)
            if size < 0 or size > self._size_max:
                raise ProtocolError(f"frame size {size} is outside [0, {self._size_max}]")
            if offset < 0:
                raise ProtocolError(f"negative frame offset {offset}")
            end = position + HEADER_SIZE + size
            if end > len(buffer):
                break
            frames.append((offset, bytes(buffer[position + HEADER_SIZE : end])))
            position = end
        if position:
            del buffer[:position]
        if len(buffer) > self._size_max + HEADER_SIZE:
            raise ProtocolError("read buffer overflow")
        return frames

"""Receipt handles: an opaque, URL-safe, versioned string naming one delivery of one message.

A handle names the group, the topic, the queue, the queue offset, the delivery attempt and the
delivery id: the queue's delivery counter at the time of that delivery. The counter moves on
every delivery and every change of invisibility, and it travels in the log with them, so a
promoted slave or a new leader holds the same counter and accepts the same handles. A handle
acks only the delivery it was given for: a handle whose delivery id is not the one in flight is
stale, even when its offset is in flight again (RocketMQ #9583, #11174).

Layout (version 1): version u8, queue id u32, queue offset u64, attempt u16, delivery id u64,
group and topic as u16 length + UTF-8, then an 8-byte keyed BLAKE2b tag over all of it; the
whole in base64url without padding. The tag tells garbage and edited handles from real ones;
its key is shared by every replica (it is not a secret per process: a restart or a failover
must not invalidate handles, RocketMQ #10278).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
from dataclasses import dataclass

HANDLE_VERSION = 1
TAG_BYTES = 8
NAME_BYTES_MAX = 1_024
HANDLE_CHARS_MAX = 4_096
DEFAULT_HANDLE_KEY = b"twinlog-receipt-handle-v1"
_FIXED = struct.Struct(">BIQHQ")
_LENGTH = struct.Struct(">H")


class HandleError(ValueError):
    """Not a receipt handle of this broker: garbage, a bad tag, an unknown version."""


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    attempt: int
    delivery_id: int


class HandleCodec:
    def __init__(self, key: bytes = DEFAULT_HANDLE_KEY) -> None:
        if not key:
            raise ValueError("the handle key must not be empty")
        self._key = hashlib.blake2b(key, digest_size=32).digest()

    def _tag(self, body: bytes) -> bytes:
        return hashlib.blake2b(body, key=self._key, digest_size=TAG_BYTES).digest()

    def encode(self, handle: ReceiptHandle) -> str:
        names = b"".join(_LENGTH.pack(len(raw)) + raw
                         for raw in (handle.group.encode(), handle.topic.encode()))
        try:
            body = _FIXED.pack(HANDLE_VERSION, handle.queue_id, handle.queue_offset,
                               handle.attempt, handle.delivery_id) + names
        except struct.error as error:
            raise ValueError(f"a handle field is out of range: {error}") from error
        return base64.urlsafe_b64encode(body + self._tag(body)).rstrip(b"=").decode("ascii")

    def decode(self, text: str) -> ReceiptHandle:
        if not isinstance(text, str) or not 0 < len(text) <= HANDLE_CHARS_MAX:
            raise HandleError("a receipt handle is a non-empty string of bounded length")
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError) as error:
            raise HandleError("a receipt handle is base64url") from error
        if len(raw) < _FIXED.size + 2 * _LENGTH.size + TAG_BYTES:
            raise HandleError("a receipt handle too short")
        body, tag = raw[:-TAG_BYTES], raw[-TAG_BYTES:]
        if body[0] != HANDLE_VERSION:
            raise HandleError(f"unknown receipt handle version {body[0]}")
        if not hmac.compare_digest(tag, self._tag(body)):
            raise HandleError("the receipt handle's integrity tag does not match")
        _, queue_id, queue_offset, attempt, delivery_id = _FIXED.unpack_from(body)
        names, position = [], _FIXED.size
        for _ in range(2):
            (length,) = _LENGTH.unpack_from(body, position)
            position += _LENGTH.size
            chunk = body[position:position + length]
            if len(chunk) != length:
                raise HandleError("a receipt handle with a truncated name")
            names.append(chunk.decode("utf-8"))  # the tag held: the encoder wrote UTF-8
            position += length
        if position != len(body):
            raise HandleError("a receipt handle with trailing bytes")
        return ReceiptHandle(names[0], names[1], queue_id, queue_offset, attempt, delivery_id)

    def decode_for(self, text: str, *, group: str, topic: str) -> ReceiptHandle:
        """Decode a handle presented to `group`'s consumption of `topic`: a real handle of
        another group or topic is refused like garbage (a 400-class mistake of the client)."""
        handle = self.decode(text)
        if handle.group != group or handle.topic != topic:
            raise HandleError(
                f"the receipt handle belongs to group {handle.group!r}, topic {handle.topic!r}")
        return handle

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
must not invalidate handles, RocketMQ #10278). The bytes of a version are fixed (the tests
pin handles written by its first release): brokers of two builds accept each other's handles
across an upgrade or a failover; another layout takes another version byte, which a build
that does not know it refuses as garbage (400).
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import struct
from typing import NamedTuple

HANDLE_VERSION = 1
TAG_BYTES = 8
NAME_BYTES_MAX = 1_024
HANDLE_CHARS_MAX = 4_096
DEFAULT_HANDLE_KEY = b"twinlog-receipt-handle-v1"
# The encoded (group, topic) names of this many pairs are kept, for the encode of every
# delivery and the decode of every acked handle; past it the kept ones are dropped.
NAMES_KEPT_MAX = 1_024
_FIXED = struct.Struct(">BIQHQ")
_LENGTH = struct.Struct(">H")
_FROM_URL_SAFE = bytes.maketrans(b"-_", b"+/")
_TO_URL_SAFE = bytes.maketrans(b"+/", b"-_")


class HandleError(ValueError):
    """Not a receipt handle of this broker: garbage, a bad tag, an unknown version."""


class ReceiptHandle(NamedTuple):
    """(A named tuple: one is built for every message received and every handle acked.)"""

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
        # The keyed hash's state after the key block, copied for each tag.
        self._mac = hashlib.blake2b(key=hashlib.blake2b(key, digest_size=32).digest(),
                                    digest_size=TAG_BYTES)
        self._names: dict[tuple[str, str], bytes] = {}

    def _tag(self, body: bytes) -> bytes:
        mac = self._mac.copy()
        mac.update(body)
        return mac.digest()

    def _names_of(self, group: str, topic: str) -> bytes:
        """The names' part of a handle's body: each one's u16 length and UTF-8 bytes."""
        names = self._names.get((group, topic))
        if names is None:
            names = b"".join(_LENGTH.pack(len(raw)) + raw
                             for raw in (group.encode(), topic.encode()))
            if len(self._names) >= NAMES_KEPT_MAX:
                self._names.clear()
            self._names[(group, topic)] = names
        return names

    def encode(self, handle: ReceiptHandle) -> str:
        return self.encode_fields(*handle)

    def encode_fields(self, group: str, topic: str, queue_id: int, queue_offset: int,
                      attempt: int, delivery_id: int) -> str:
        """`encode` of the handle of these fields (without building it)."""
        try:
            body = _FIXED.pack(HANDLE_VERSION, queue_id, queue_offset, attempt, delivery_id) \
                + self._names_of(group, topic)
        except struct.error as error:
            raise ValueError(f"a handle field is out of range: {error}") from error
        # base64.urlsafe_b64encode's steps, without padding
        return binascii.b2a_base64(body + self._tag(body), newline=False) \
            .translate(_TO_URL_SAFE).rstrip(b"=").decode("ascii")

    def decode(self, text: str) -> ReceiptHandle:
        return _parsed(self._verified(text))

    def decode_for(self, text: str, *, group: str, topic: str) -> ReceiptHandle:
        """Decode a handle presented to `group`'s consumption of `topic`: a real handle of
        another group or topic is refused like garbage (a 400-class mistake of the client)."""
        body = self._verified(text)
        if body[_FIXED.size:] == self._names_of(group, topic):  # its names are these
            _, queue_id, queue_offset, attempt, delivery_id = _FIXED.unpack_from(body)
            return ReceiptHandle(group, topic, queue_id, queue_offset, attempt, delivery_id)
        handle = _parsed(body)
        if handle.group != group or handle.topic != topic:
            raise HandleError(
                f"the receipt handle belongs to group {handle.group!r}, topic {handle.topic!r}")
        return handle

    def _verified(self, text: str) -> bytes:
        """The body of a handle of this broker (version and tag checked), without its tag."""
        if not isinstance(text, str) or not 0 < len(text) <= HANDLE_CHARS_MAX:
            raise HandleError("a receipt handle is a non-empty string of bounded length")
        try:
            # base64.urlsafe_b64decode's steps: ASCII only, the URL-safe alphabet mapped to
            # the standard one, characters outside it skipped.
            raw = binascii.a2b_base64(
                text.encode("ascii").translate(_FROM_URL_SAFE) + b"=" * (-len(text) % 4))
        except (binascii.Error, ValueError) as error:
            raise HandleError("a receipt handle is base64url") from error
        if len(raw) < _FIXED.size + 2 * _LENGTH.size + TAG_BYTES:
            raise HandleError("a receipt handle too short")
        body, tag = raw[:-TAG_BYTES], raw[-TAG_BYTES:]
        if body[0] != HANDLE_VERSION:
            raise HandleError(f"unknown receipt handle version {body[0]}")
        if not hmac.compare_digest(tag, self._tag(body)):
            raise HandleError("the receipt handle's integrity tag does not match")
        return body


def _parsed(body: bytes) -> ReceiptHandle:
    """The fields of a verified body, its names read from their lengths."""
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

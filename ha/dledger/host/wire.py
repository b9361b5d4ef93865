"""The binary wire format of DLedger peer messages, and a bounded frame reader.

A frame is `length (u32, big-endian) + body (length bytes) + tag` where the tag (16 bytes on
an authenticated link, none on an open one) authenticates the body (ha/auth.py's FrameTagger).
A length above the reader's `frame_bytes_max` is refused before anything is buffered.

Every body starts with `type (u8) + source id (u8 length + ASCII) + term (i64)`; the rest per
type is in docs/dledger.md. Integers are big-endian; indexes and terms are i64 and never
negative. Entries of a push are consecutive from `prev_index + 1`, so only their terms and
payloads travel. Decoding is strict: an unknown type or flag bit, a negative or out-of-order
number, a length past the body, or a byte left over is a `WireError`, and no size field is
trusted before it is checked against the bytes actually present (no large allocation).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable

from ha.dledger.core.messages import (
    Entry,
    Message,
    PushRequest,
    PushResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from ha.dledger.core.peers import is_valid_id
from ha.protocol import ProtocolError

TYPE_VOTE_REQUEST = 1
TYPE_VOTE_RESPONSE = 2
TYPE_PUSH_REQUEST = 3
TYPE_PUSH_RESPONSE = 4
TYPE_TIMEOUT_NOW = 5

LENGTH = struct.Struct(">I")
_HEAD = struct.Struct(">Bq")  # flags, term (after type and id)
_VOTE_REQUEST = struct.Struct(">qq")  # last_index, last_term
_PUSH_REQUEST = struct.Struct(">qqqI")  # prev_index, prev_term, commit_index, entry count
_VOTE_COMMIT = struct.Struct(">qq")  # commit_index, commit_term (with FLAG_COMMIT)
_PREV_CRC = struct.Struct(">I")  # the payload CRC at prev_index (with FLAG_PREV_CRC)
_ENTRY = struct.Struct(">qI")  # term, payload size
_PUSH_RESPONSE = struct.Struct(">qqqqq")  # prev, match, hint index, hint term, last index
_ID_SIZE = struct.Struct(">B")

FLAG_PRE_VOTE = 0x01  # vote request and response
FLAG_GRANTED = 0x02  # vote response
FLAG_TRANSFER = 0x02  # vote request: the election a leader asked for (TimeoutNow)
FLAG_FROM_BASE = 0x01  # push request
FLAG_PREV_CRC = 0x02  # push request: prev_crc follows the fixed fields
FLAG_SUCCESS = 0x01  # push response
FLAG_COMMIT = 0x04  # vote response: the voter's commit index and term follow
FLAG_COMMIT_CRC = 0x08  # vote response: and the payload CRC at its commit index
_FLAGS_ALLOWED = {
    TYPE_VOTE_REQUEST: FLAG_PRE_VOTE | FLAG_TRANSFER,
    TYPE_VOTE_RESPONSE: FLAG_PRE_VOTE | FLAG_GRANTED | FLAG_COMMIT | FLAG_COMMIT_CRC,
    TYPE_PUSH_REQUEST: FLAG_FROM_BASE | FLAG_PREV_CRC,
    TYPE_PUSH_RESPONSE: FLAG_SUCCESS,
    TYPE_TIMEOUT_NOW: 0,
}
_HEAD_BYTES_MAX = 1 + _ID_SIZE.size + 32 + _HEAD.size


class WireError(ProtocolError):
    """A frame the protocol does not allow: the connection that carried it is closed."""


# ----- encoding -----


def encode_message(message: Message, *, fork_marks: bool = True) -> bytes:
    """The body of one frame (no length, no tag). Without `fork_marks` (a peer of a build
    before them: handshake.py), a push leaves out its prev_crc and a vote response its commit
    mark: that peer refuses their flags, and checks no fork by them."""
    if isinstance(message, VoteRequest):
        flags = FLAG_PRE_VOTE * message.pre_vote | FLAG_TRANSFER * message.transfer
        head = _head(TYPE_VOTE_REQUEST, message.source_id, flags, message.term)
        return head + _VOTE_REQUEST.pack(message.last_index, message.last_term)
    if isinstance(message, VoteResponse):
        return _encode_vote_response(message, fork_marks)
    if isinstance(message, PushRequest):
        return _encode_push_request(message, fork_marks)
    if isinstance(message, TimeoutNow):
        return _head(TYPE_TIMEOUT_NOW, message.source_id, 0, message.term)
    return _head(TYPE_PUSH_RESPONSE, message.source_id, message.success, message.term) + \
        _PUSH_RESPONSE.pack(message.prev_index, message.match_index, message.hint_index,
                            message.hint_term, message.last_index)


def push_frame_bytes_needed(push_bytes_max: int, push_entries_max: int,
                            entry_payload_bytes_max: int) -> int:
    """The largest body a leader's push can need: the node fills a push up to push_bytes_max
    of payloads, or sends one larger entry alone (ha/dledger/core/messages.py within_bytes)."""
    payloads_max = max(push_bytes_max, entry_payload_bytes_max)
    return (_HEAD_BYTES_MAX + _PUSH_REQUEST.size + _PREV_CRC.size
            + push_entries_max * _ENTRY.size + payloads_max)


def encode_frame(body: bytes, tag: bytes) -> bytes:
    return LENGTH.pack(len(body)) + body + tag


def _head(message_type: int, source_id: str, flags: int, term: int) -> bytes:
    raw_id = source_id.encode("ascii")
    return bytes([message_type]) + _ID_SIZE.pack(len(raw_id)) + raw_id + _HEAD.pack(flags, term)


def _encode_vote_response(message: VoteResponse, fork_marks: bool) -> bytes:
    flags = FLAG_PRE_VOTE * message.pre_vote | FLAG_GRANTED * message.granted
    mark = b""
    if message.commit_index and fork_marks:
        flags |= FLAG_COMMIT
        mark = _VOTE_COMMIT.pack(message.commit_index, message.commit_term)
        if message.commit_crc is not None:
            flags |= FLAG_COMMIT_CRC
            mark += _PREV_CRC.pack(message.commit_crc)
    return _head(TYPE_VOTE_RESPONSE, message.source_id, flags, message.term) + mark


def _encode_push_request(message: PushRequest, fork_marks: bool) -> bytes:
    entries = message.entries
    prev_crc = message.prev_crc if fork_marks else None
    flags = message.from_base | (FLAG_PREV_CRC if prev_crc is not None else 0)
    return b"".join((
        _head(TYPE_PUSH_REQUEST, message.source_id, flags, message.term),
        _PUSH_REQUEST.pack(message.prev_index, message.prev_term, message.commit_index,
                           len(entries)),
        _PREV_CRC.pack(prev_crc) if prev_crc is not None else b"",
        _entries_bytes(entries, message.prev_index) if entries else b""))


class _EntriesMemo:
    """The last push's entries as encoded: a leader pushes the same run to every peer, and
    the entries are most of a push's bytes. Keyed by the identity of the first and the last
    entry and the count: entries are never changed once built (messages.Entry), and a log's
    slice of `count` consecutive entries that starts and ends with the same two objects holds
    the same entries. One slot per thread (a process may host several members)."""

    __slots__ = ("first", "last", "count", "encoded")

    def __init__(self) -> None:
        self.first: Entry | None = None
        self.last: Entry | None = None
        self.count = 0
        self.encoded = b""


_memos = threading.local()


def _entries_bytes(entries: tuple[Entry, ...], prev_index: int) -> bytes:
    """Each entry's term, payload size and payload, in order (checked consecutive)."""
    memo: _EntriesMemo | None = getattr(_memos, "memo", None)
    if memo is None:
        memo = _memos.memo = _EntriesMemo()
    first, last = entries[0], entries[-1]
    if memo.first is first and memo.last is last and memo.count == len(entries):
        assert first.index == prev_index + 1, "entries must follow prev_index"
        return memo.encoded
    parts: list[bytes] = []
    pack = _ENTRY.pack
    for position, entry in enumerate(entries):
        assert entry.index == prev_index + 1 + position, "entries must be consecutive"
        payload = entry.payload
        parts.append(pack(entry.term, len(payload)))
        parts.append(payload)
    encoded = b"".join(parts)
    memo.first, memo.last, memo.count, memo.encoded = first, last, len(entries), encoded
    return encoded


# ----- decoding -----


class _Reader:
    """Reads fields from one body; running past its end is a WireError, never an IndexError."""

    def __init__(self, body: bytes | memoryview) -> None:
        self._body = memoryview(body)
        self._position = 0

    @property
    def remaining_bytes(self) -> int:
        return len(self._body) - self._position

    def take(self, size_bytes: int) -> memoryview:
        if size_bytes > self.remaining_bytes:
            raise WireError(f"truncated message: {size_bytes} bytes needed at "
                            f"{self._position}, {self.remaining_bytes} left")
        start = self._position
        self._position += size_bytes
        return self._body[start:self._position]

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        return layout.unpack(self.take(layout.size))

    def entries(self, prev_index: int, prev_term: int, term: int,
                count: int) -> tuple[Entry, ...]:
        """`count` entries after `prev_index` (term and payload each), their terms never
        decreasing from `prev_term` and none newer than the push's `term`. One loop over the
        body with local names: it runs once per replicated entry on every follower."""
        body, position, end = self._body, self._position, len(self._body)
        unpack_from, entry_size = _ENTRY.unpack_from, _ENTRY.size
        entries: list[Entry] = []
        previous_term = prev_term
        for index in range(prev_index + 1, prev_index + 1 + count):
            if position + entry_size > end:
                raise WireError(f"truncated message: an entry head at {position}, "
                                f"{end - position} bytes left")
            entry_term, payload_size = unpack_from(body, position)
            position += entry_size
            # The node appends only non-decreasing terms no newer than the sender's.
            if not previous_term <= entry_term <= term:
                raise WireError(f"entry term {entry_term} after {previous_term} in a push of "
                                f"term {term}")
            if position + payload_size > end:
                raise WireError(f"truncated message: {payload_size} payload bytes needed at "
                                f"{position}, {end - position} left")
            entries.append(Entry(index, entry_term, bytes(body[position:position + payload_size])))
            position += payload_size
            previous_term = entry_term
        self._position = position
        return tuple(entries)

    def finish(self) -> None:
        if self.remaining_bytes:
            raise WireError(f"{self.remaining_bytes} bytes left over after the message")


def decode_message(body: bytes | memoryview) -> Message:
    """The message in one frame body, or WireError."""
    reader = _Reader(body)
    (message_type,) = reader.take(1)
    if message_type not in _FLAGS_ALLOWED:
        raise WireError(f"unknown message type {message_type}")
    source_id = _decode_id(reader)
    flags, term = reader.unpack(_HEAD)
    if flags & ~_FLAGS_ALLOWED[message_type]:
        raise WireError(f"unknown flags {flags:#x} for message type {message_type}")
    _check_non_negative(term)
    message = _DECODERS[message_type](reader, source_id, flags, term)
    reader.finish()
    return message


def _decode_id(reader: _Reader) -> str:
    (size,) = reader.unpack(_ID_SIZE)
    raw = bytes(reader.take(size))
    known = _KNOWN_IDS.get(raw)
    if known is not None:
        return known
    if not raw.isascii() or not is_valid_id(raw.decode("ascii")):
        raise WireError(f"invalid source id {raw!r}")
    node_id = raw.decode("ascii")
    if len(_KNOWN_IDS) < _KNOWN_IDS_MAX:
        _KNOWN_IDS[raw] = node_id
    return node_id


# Ids already checked (a group has a few members, each message names one): a lookup instead
# of the pattern. Bounded: past it, ids are checked every time.
_KNOWN_IDS: dict[bytes, str] = {}
_KNOWN_IDS_MAX = 256


def _check_non_negative(*numbers: int) -> None:
    if min(numbers) < 0:
        raise WireError(f"negative index or term in {numbers}")


def _decode_vote_request(reader: _Reader, source_id: str, flags: int, term: int) -> Message:
    last_index, last_term = reader.unpack(_VOTE_REQUEST)
    _check_non_negative(last_index, last_term)
    return VoteRequest(source_id, term, last_index, last_term, bool(flags & FLAG_PRE_VOTE),
                       bool(flags & FLAG_TRANSFER))


def _decode_vote_response(reader: _Reader, source_id: str, flags: int, term: int) -> Message:
    commit_index = commit_term = 0
    commit_crc = None
    if flags & FLAG_COMMIT:
        commit_index, commit_term = reader.unpack(_VOTE_COMMIT)
        _check_non_negative(commit_index, commit_term)
        if not commit_index:  # the encoder sends no mark then: one body per message
            raise WireError("a vote response's commit mark of index 0")
        if flags & FLAG_COMMIT_CRC:
            commit_crc = reader.unpack(_PREV_CRC)[0]
    elif flags & FLAG_COMMIT_CRC:
        raise WireError("a vote response's commit CRC without its commit index")
    return VoteResponse(source_id, term, bool(flags & FLAG_GRANTED), bool(flags & FLAG_PRE_VOTE),
                        commit_index, commit_term, commit_crc)


def _decode_push_request(reader: _Reader, source_id: str, flags: int, term: int) -> Message:
    prev_index, prev_term, commit_index, entry_count = reader.unpack(_PUSH_REQUEST)
    _check_non_negative(prev_index, prev_term, commit_index)
    prev_crc = reader.unpack(_PREV_CRC)[0] if flags & FLAG_PREV_CRC else None
    if entry_count * _ENTRY.size > reader.remaining_bytes:
        raise WireError(f"{entry_count} entries cannot fit in {reader.remaining_bytes} bytes")
    entries = reader.entries(prev_index, prev_term, term, entry_count)
    return PushRequest(source_id, term, prev_index, prev_term, entries, commit_index,
                       bool(flags & FLAG_FROM_BASE), prev_crc)


def _decode_push_response(reader: _Reader, source_id: str, flags: int, term: int) -> Message:
    numbers = reader.unpack(_PUSH_RESPONSE)
    _check_non_negative(*numbers)
    prev_index, match_index, hint_index, hint_term, last_index = numbers
    return PushResponse(source_id, term, bool(flags & FLAG_SUCCESS), prev_index, match_index,
                        hint_index, hint_term, last_index)


def _decode_timeout_now(reader: _Reader, source_id: str, flags: int, term: int) -> Message:
    return TimeoutNow(source_id, term)


_DECODERS: dict[int, Callable[[_Reader, str, int, int], Message]] = {
    TYPE_VOTE_REQUEST: _decode_vote_request,
    TYPE_VOTE_RESPONSE: _decode_vote_response,
    TYPE_PUSH_REQUEST: _decode_push_request,
    TYPE_PUSH_RESPONSE: _decode_push_response,
    TYPE_TIMEOUT_NOW: _decode_timeout_now,
}


# ----- frames -----

TagCheck = Callable[[bytes, bytes], None]  # check(tag, body) raises on a bad tag


class FrameReader:
    """Cuts a byte stream into frame bodies. Holds at most one frame (the length is checked
    against `frame_bytes_max` before its body is waited for), so a peer cannot make it grow."""

    def __init__(self, frame_bytes_max: int, tag_size: int, check: TagCheck) -> None:
        assert frame_bytes_max >= 1 and tag_size >= 0
        self._frame_bytes_max = frame_bytes_max
        self._tag_size = tag_size
        self._check = check
        self._buffer = bytearray()

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """The complete, authenticated bodies in what was received so far."""
        self._buffer += data
        bodies: list[bytes] = []
        position = 0
        while len(self._buffer) - position >= LENGTH.size:
            (length,) = LENGTH.unpack_from(self._buffer, position)
            if length > self._frame_bytes_max:
                raise WireError(f"frame of {length} bytes is over the {self._frame_bytes_max} "
                                "byte bound")
            body_start = position + LENGTH.size
            frame_end = body_start + length + self._tag_size
            if frame_end > len(self._buffer):
                break
            body = bytes(self._buffer[body_start:body_start + length])
            self._check(bytes(self._buffer[body_start + length:frame_end]), body)
            bodies.append(body)
            position = frame_end
        del self._buffer[:position]
        return bodies

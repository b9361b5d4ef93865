"""The DLedger wire codec: every message round trips; every malformed body or frame is a
WireError, never another exception or a large allocation."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ha.auth import FrameTagger
from ha.dledger.core.messages import (
    Entry,
    Message,
    PushRequest,
    PushResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from ha.dledger.host import wire
from ha.dledger.host.wire import (
    LENGTH,
    FrameReader,
    WireError,
    decode_message,
    encode_frame,
    encode_message,
    push_frame_bytes_needed,
)
from ha.protocol import ProtocolError

_numbers = st.integers(0, (1 << 63) - 1)
_ids = st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=32)


@st.composite
def _push_requests(draw: st.DrawFn) -> PushRequest:
    term = draw(st.integers(0, 1 << 40))
    prev_term = draw(st.integers(0, term))
    prev_index = draw(st.integers(0, 1 << 40))
    terms = sorted(draw(st.lists(st.integers(prev_term, term), max_size=6)))
    payloads = draw(st.lists(st.binary(max_size=64), min_size=len(terms), max_size=len(terms)))
    entries = tuple(Entry(prev_index + 1 + i, entry_term, payload)
                    for i, (entry_term, payload) in enumerate(zip(terms, payloads, strict=True)))
    return PushRequest(draw(_ids), term, prev_index, prev_term, entries, draw(_numbers),
                       draw(st.booleans()), draw(st.none() | st.integers(0, (1 << 32) - 1)))


@st.composite
def _vote_responses(draw: st.DrawFn) -> VoteResponse:
    """With the voter's commit mark (index >= 1, its CRC known or not) or without one."""
    response = VoteResponse(draw(_ids), draw(_numbers), draw(st.booleans()), draw(st.booleans()))
    if not draw(st.booleans()):
        return response
    return VoteResponse(response.source_id, response.term, response.granted, response.pre_vote,
                        draw(st.integers(1, (1 << 63) - 1)), draw(_numbers),
                        draw(st.none() | st.integers(0, (1 << 32) - 1)))


_messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(VoteRequest, _ids, _numbers, _numbers, _numbers, st.booleans(), st.booleans()),
    _vote_responses(),
    _push_requests(),
    st.builds(PushResponse, _ids, _numbers, st.booleans(), _numbers, _numbers, _numbers,
              _numbers, _numbers),
    st.builds(TimeoutNow, _ids, _numbers),
)

PUSH = PushRequest("n0", 7, 10, 6, (Entry(11, 6, b"abc"), Entry(12, 7, b"")), 9, False)


@given(_messages)
def test_round_trip(message: Message) -> None:
    """Every message decodes to itself."""
    assert decode_message(encode_message(message)) == message


@given(_messages)
@settings(max_examples=50)
def test_every_truncation_is_a_wire_error(message: Message) -> None:
    """Every strict prefix of a body is refused as truncated."""
    body = encode_message(message)
    for size in range(len(body)):
        with pytest.raises(WireError):
            decode_message(body[:size])


@given(_messages, st.binary(min_size=1, max_size=8))
def test_trailing_bytes_are_refused(message: Message, extra: bytes) -> None:
    """A body with bytes after its message is refused."""
    with pytest.raises(WireError, match="left over"):
        decode_message(encode_message(message) + extra)


@given(st.binary(max_size=200))
@settings(max_examples=2000)
def test_random_garbage_never_escapes(garbage: bytes) -> None:
    """Random bytes decode to a message that encodes back to them, or a WireError."""
    try:
        message = decode_message(garbage)
    except WireError:
        return
    assert encode_message(message) == garbage


@given(_messages, st.data())
@settings(max_examples=300)
def test_flipped_bytes_never_escape(message: Message, data: st.DataObject) -> None:
    """A body with one byte changed is a WireError or a well-formed message, nothing else."""
    body = bytearray(encode_message(message))
    position = data.draw(st.integers(0, len(body) - 1))
    body[position] ^= data.draw(st.integers(1, 255))
    try:
        decoded = decode_message(bytes(body))
    except WireError:
        return
    assert encode_message(decoded) == bytes(body)


def test_unknown_types_are_refused() -> None:
    """A type outside 1-5 is refused by number."""
    body = bytearray(encode_message(PUSH))
    for message_type in (0, 6, 200):
        body[0] = message_type
        with pytest.raises(WireError, match=f"unknown message type {message_type}"):
            decode_message(bytes(body))


def test_a_full_push_fits_the_frame_bound_the_wire_derives() -> None:
    """A push of push_entries_max entries filling push_bytes_max, or one entry as large as the
    largest payload, encodes within push_frame_bytes_needed (ids of 32 bytes, huge numbers)."""
    source_id, big = "n" * 32, (1 << 63) - 1
    full = tuple(Entry(big - 16 + i, big, bytes(64)) for i in range(16))
    alone = (Entry(big - 16, big, bytes(5000)),)
    for entries in (full, alone):
        body = encode_message(PushRequest(source_id, big, big - 17, big, entries, big, True,
                                          (1 << 32) - 1))
        assert len(body) <= push_frame_bytes_needed(16 * 64, 16, 5000)
    assert len(encode_message(PushRequest(source_id, big, big - 17, big, full, big, True,
                                          0))) == push_frame_bytes_needed(16 * 64, 16, 0)


def test_huge_entry_count_is_refused_before_allocating() -> None:
    """An entry count of 2**32 - 1 in a short body is refused from its size alone."""
    body = bytearray(encode_message(PushRequest("n0", 7, 10, 6, (), 9)))
    struct.pack_into(">I", body, len(body) - 4, 0xFFFF_FFFF)
    with pytest.raises(WireError, match="cannot fit"):
        decode_message(bytes(body))


def test_huge_payload_size_is_refused() -> None:
    """A payload size past the body's end is a truncation, not an allocation."""
    body = bytearray(encode_message(PushRequest("n0", 7, 10, 6, (Entry(11, 7, b"x"),), 9)))
    struct.pack_into(">I", body, len(body) - 5, 0xFFFF_FFFF)
    with pytest.raises(WireError, match="truncated"):
        decode_message(bytes(body))


@pytest.mark.parametrize(("change", "error"), [
    (lambda body: body.__setitem__(4, 0x80), "unknown flags"),  # flags byte of "n0"
    (lambda body: body.__setitem__(1, 0), "invalid source id"),
    (lambda body: body.__setitem__(2, ord("-")), "invalid source id"),
    (lambda body: body.__setitem__(slice(5, 13), struct.pack(">q", -1)), "negative"),
])
def test_bad_header_fields(change: object, error: str) -> None:
    """Unknown flag bits, a bad id and a negative term are refused by name."""
    body = bytearray(encode_message(PUSH))
    change(body)  # type: ignore[operator]
    with pytest.raises(WireError, match=error):
        decode_message(bytes(body))


def test_entry_terms_out_of_order_are_refused() -> None:
    """A push whose entry terms go down, or past the sender's term, is refused."""
    for entries in ((Entry(11, 7, b""), Entry(12, 6, b"")), (Entry(11, 8, b""),),
                    (Entry(11, 5, b""),)):
        body = encode_message(PushRequest("n0", 7, 10, 6, (), 9))
        parts = b"".join(struct.pack(">qI", e.term, 0) for e in entries)
        body = body[:-4] + struct.pack(">I", len(entries)) + parts
        with pytest.raises(WireError, match="entry term"):
            decode_message(body)


def test_wire_error_is_a_protocol_error() -> None:
    """Callers that close on ProtocolError (as the classic HA port does) close on these too."""
    assert issubclass(WireError, ProtocolError)


def _no_check(tag: bytes, body: bytes) -> None:
    assert tag == b""


def test_frame_reader_cuts_a_stream_fed_byte_by_byte() -> None:
    """Frames split anywhere come out whole and in order."""
    bodies = [encode_message(PUSH), encode_message(VoteResponse("n1", 3, True, False))]
    stream = b"".join(encode_frame(body, b"") for body in bodies)
    reader = FrameReader(1024, 0, _no_check)
    out: list[bytes] = []
    for position in range(len(stream)):
        out += reader.feed(stream[position:position + 1])
    assert out == bodies and reader.buffered_bytes == 0


def test_frame_over_the_bound_is_refused_from_its_length() -> None:
    """A length over frame_bytes_max is refused as soon as the 4 length bytes arrive."""
    reader = FrameReader(100, 0, _no_check)
    assert reader.feed(encode_frame(bytes(100), b"")) == [bytes(100)]
    with pytest.raises(WireError, match="over the 100 byte bound"):
        reader.feed(LENGTH.pack(101))


def test_tagged_frames_are_checked_in_order() -> None:
    """On an authenticated link a frame with an altered body or a replayed tag is refused."""
    sender, receiver = FrameTagger(b"k" * 32), FrameTagger(b"k" * 32)
    body = encode_message(PUSH)
    first = encode_frame(body, sender.tag(body))
    reader = FrameReader(1024, 16, receiver.check)
    assert reader.feed(first) == [body]
    with pytest.raises(ProtocolError, match="failed authentication"):
        reader.feed(first)  # the same frame again: sequence 1 expected


def test_altered_tagged_frame_is_refused() -> None:
    """A body changed in flight fails its tag."""
    sender, receiver = FrameTagger(b"k" * 32), FrameTagger(b"k" * 32)
    body = encode_message(PUSH)
    frame = bytearray(encode_frame(body, sender.tag(body)))
    frame[LENGTH.size + 1 + 1 + 2 + 1 + 8 + 3] ^= 1
    with pytest.raises(ProtocolError, match="failed authentication"):
        FrameReader(1024, 16, receiver.check).feed(bytes(frame))



def test_checked_ids_are_remembered_within_a_bound_and_bad_ones_never() -> None:
    """Each valid id decodes to itself, the first 256 from a lookup afterwards and any more
    from the pattern; an invalid id is refused every time, before and after."""
    bad = bytearray(encode_message(TimeoutNow("n1", 3)))
    bad[2] = ord("-")
    with pytest.raises(WireError, match="invalid source id"):
        decode_message(bytes(bad))
    ids = [f"node{number}" for number in range(300)]
    for _ in range(2):
        assert [decode_message(encode_message(TimeoutNow(node_id, 3))).source_id
                for node_id in ids] == ids
    assert len(wire._KNOWN_IDS) <= wire._KNOWN_IDS_MAX
    with pytest.raises(WireError, match="invalid source id"):
        decode_message(bytes(bad))


def test_a_run_pushed_to_every_peer_is_encoded_once_and_never_confused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same entries pushed to two peers (other commits) share one encoding of the
    entries; a slice with the same first entry and count but another last entry, or the same
    entries rebuilt as new objects, is encoded afresh; every push decodes to itself."""
    entries = tuple(Entry(index, 1, b"e%d" % index) for index in range(5, 9))
    other_last = entries[:3] + (Entry(8, 2, b"other"),)
    rebuilt = tuple(Entry(e.index, e.term, e.payload) for e in entries)
    messages = [PushRequest("n0", 2, 4, 1, entries, 3, False),
                PushRequest("n0", 2, 4, 1, entries, 4, False),
                PushRequest("n0", 2, 4, 1, other_last, 3, False),
                PushRequest("n0", 2, 4, 1, rebuilt, 3, False)]
    packs: list[int] = []
    real = wire._ENTRY

    class CountingEntry:
        size = real.size
        unpack_from = real.unpack_from

        @staticmethod
        def pack(*values: int) -> bytes:
            packs.append(values[0])
            return real.pack(*values)

    monkeypatch.setattr(wire, "_ENTRY", CountingEntry)
    bodies = [encode_message(messages[0]), encode_message(messages[1])]
    assert len(packs) == len(entries)  # once for both peers
    bodies += [encode_message(messages[2]), encode_message(messages[3])]
    assert len(packs) == 3 * len(entries)
    assert [decode_message(body) for body in bodies] == messages


def test_a_vote_response_commit_mark_of_index_0_is_refused() -> None:
    """The encoder sends no commit mark for commit index 0; a body carrying one (a flipped
    flag bit: found by test_flipped_bytes_never_escape in CI) is refused, not decoded into a
    message whose body differs."""
    body = bytearray(encode_message(VoteResponse("000", 0, False, False, 1, 0, None)))
    body[21] ^= 1  # the commit index's low byte: 1 -> 0, the flag kept
    with pytest.raises(WireError, match="index 0"):
        decode_message(bytes(body))

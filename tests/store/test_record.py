from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from store.record import (
    HEADER_SIZE,
    MESSAGE_MAGIC,
    PROPERTIES_SIZE_MAX,
    Message,
    RecordError,
    decode_record,
    encode_message,
    stamp_offsets,
    tags_code,
)
from store.status import PutMessageStatus

HOST = b"\x0a\x00\x00\x01\x00\x00\x2a\x9f"
MAX = 4 * 1024 * 1024

topics = st.text(alphabet="abcXYZ019_%|-", min_size=1, max_size=127)
property_text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    max_size=40,
)
properties = st.dictionaries(property_text.filter(bool), property_text, max_size=6)


def _encode(message: Message, queue_id: int = 0) -> bytes:
    encoded = encode_message(message, queue_id, 1_700_000_000_123, HOST, MAX)
    assert isinstance(encoded, bytes), encoded
    return encoded


@settings(max_examples=200, deadline=None)
@given(topic=topics, body=st.binary(max_size=2048), props=properties,
       queue_id=st.integers(0, 1023), queue_offset=st.integers(0, 2**53),
       physical=st.integers(0, 2**53))
def test_round_trip(
    topic: str, body: bytes, props: dict[str, str], queue_id: int, queue_offset: int,
    physical: int,
) -> None:
    """Every field written by encode reads back identically through decode."""
    record = bytearray(_encode(Message(topic, body, props, born_timestamp_ms=42), queue_id))
    stamp_offsets(record, 0, queue_offset, physical)
    decoded = decode_record(record)
    assert decoded.total_size == len(record)
    assert (decoded.topic, decoded.body, decoded.properties) == (topic, body, props)
    assert (decoded.queue_id, decoded.queue_offset, decoded.commit_log_offset) == (
        queue_id, queue_offset, physical)
    assert decoded.born_timestamp_ms == 42
    assert decoded.store_timestamp_ms == 1_700_000_000_123
    assert decoded.store_host == HOST


@pytest.mark.parametrize("size", [0, 1, MAX])
def test_round_trip_edge_body_sizes(size: int) -> None:
    """An empty body and a body of exactly the 4 MiB limit both round-trip."""
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    decoded = decode_record(_encode(Message("T", body, {"KEYS": "k1 k2", "TAGS": "a"})))
    assert decoded.body == body
    assert decoded.keys == "k1 k2" and decoded.tags == "a"


def test_layout_matches_rocketmq_v1() -> None:
    """Field positions are RocketMQ's: size, magic, CRC, then body length at byte 84."""
    record = _encode(Message("TopicA", b"hello", {"TAGS": "t"}), queue_id=3)
    assert int.from_bytes(record[0:4], "big") == len(record)
    assert int.from_bytes(record[4:8], "big") == MESSAGE_MAGIC
    assert int.from_bytes(record[12:16], "big") == 3
    assert int.from_bytes(record[84:88], "big") == 5
    assert record[HEADER_SIZE : HEADER_SIZE + 5] == b"hello"
    assert record[HEADER_SIZE + 5] == len("TopicA")
    assert record[HEADER_SIZE + 6 : HEADER_SIZE + 12] == b"TopicA"
    assert record[-len("TAGS\x01t\x02"):] == b"TAGS\x01t\x02"


@pytest.mark.parametrize(
    ("message", "status"),
    [
        (Message("", b"x"), PutMessageStatus.MESSAGE_ILLEGAL),
        (Message("a" * 128, b"x"), PutMessageStatus.MESSAGE_ILLEGAL),
        (Message("bad topic", b"x"), PutMessageStatus.MESSAGE_ILLEGAL),
        (Message("bad/topic", b"x"), PutMessageStatus.MESSAGE_ILLEGAL),
        (Message("T", bytes(MAX + 1)), PutMessageStatus.MESSAGE_ILLEGAL),
        (Message("T", b"x", {"k": "v" * PROPERTIES_SIZE_MAX}),
         PutMessageStatus.PROPERTIES_SIZE_EXCEEDED),
        (Message("T", b"x", {"k\x01": "v"}), PutMessageStatus.MESSAGE_ILLEGAL),
    ],
)
def test_refusals(message: Message, status: PutMessageStatus) -> None:
    """Bad topics, oversize bodies and properties are refused with RocketMQ's statuses."""
    refused = encode_message(message, 0, 0, HOST, MAX)
    assert isinstance(refused, tuple)
    assert refused[0] is status
    assert refused[1]


def test_topic_of_127_bytes_is_accepted() -> None:
    """The topic limit is inclusive: 127 bytes is fine."""
    assert decode_record(_encode(Message("a" * 127, b"x"))).topic == "a" * 127


@settings(max_examples=100, deadline=None)
@given(body=st.binary(min_size=1, max_size=300), flip=st.integers(0, 10_000))
def test_any_flipped_body_byte_is_detected(body: bytes, flip: int) -> None:
    """A flipped byte inside the body fails the CRC check on read."""
    record = bytearray(_encode(Message("T", body)))
    record[HEADER_SIZE + flip % len(body)] ^= 0xFF
    with pytest.raises(RecordError):
        decode_record(record)


def test_truncated_record_is_detected() -> None:
    """A record cut anywhere is not decoded."""
    record = _encode(Message("T", b"payload", {"TAGS": "x"}))
    for cut in range(len(record)):
        with pytest.raises(RecordError):
            decode_record(record[:cut])


def test_tags_code_is_java_string_hash() -> None:
    """tagsCode equals Java's String.hashCode (values computed by the JVM)."""
    assert tags_code("hello") == 99162322
    assert tags_code("TagA") == 2598919
    assert tags_code("") == 0
    assert tags_code("a much longer tag that overflows") == -2142409375
    assert tags_code("标签") == 857175

from __future__ import annotations

import zlib

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from store.record import (
    HEADER_SIZE,
    MESSAGE_MAGIC,
    PROPERTIES_SIZE_MAX,
    RECORD_OVERHEAD,
    Message,
    RecordError,
    check_entry_record,
    decode_head,
    decode_properties,
    decode_record,
    encode_blank,
    encode_message,
    stamp_offsets,
    tags_code,
    with_offsets,
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
    """Every field written by encode reads back identically through decode (and
    decode_head); check_entry_record returns decode's topic, queue id and both offsets."""
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
    head = decode_head(record)
    assert (head.total_size, head.topic, head.properties, head.queue_id, head.queue_offset,
            head.commit_log_offset, head.store_timestamp_ms, head.msg_id) == (
        decoded.total_size, topic, props, queue_id, queue_offset, physical,
        decoded.store_timestamp_ms, decoded.msg_id)
    assert check_entry_record(bytes(record)) == (topic, queue_id, queue_offset, physical)


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


# -- RocketMQ's V1 layout, written out field by field without the module's struct formats ------

V1_MAGIC = bytes.fromhex("DAA320A7")
LOOPBACK_HOST = bytes.fromhex("7F000001 00000000")


def v1_record(
    body: bytes,
    topic: bytes,
    properties: bytes,
    *,
    queue_id: int = 0,
    sys_flag: int = 0,
    body_size: int | None = None,
    crc: int | None = None,
) -> bytes:
    """A V1 record as RocketMQ's CommitLog writes it, every field at its documented width."""
    born_ms, store_ms = 1_600_000_000_001, 1_700_000_000_123
    total_size = 88 + len(body) + 1 + len(topic) + 2 + len(properties)
    fields = [
        total_size.to_bytes(4, "big"),
        V1_MAGIC,
        (zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc).to_bytes(4, "big"),
        queue_id.to_bytes(4, "big"),
        (7).to_bytes(4, "big"),  # FLAG
        (0).to_bytes(8, "big"),  # QUEUEOFFSET, stamped under the lock
        (0).to_bytes(8, "big"),  # PHYSICALOFFSET, stamped under the lock
        sys_flag.to_bytes(4, "big"),
        born_ms.to_bytes(8, "big"),
        LOOPBACK_HOST,
        store_ms.to_bytes(8, "big"),
        HOST,
        (2).to_bytes(4, "big"),  # RECONSUMETIMES
        (0).to_bytes(8, "big"),  # PREPARED_TRANSACTION_OFFSET
        (len(body) if body_size is None else body_size).to_bytes(4, "big", signed=True),
        body,
        len(topic).to_bytes(1, "big"),
        topic,
        len(properties).to_bytes(2, "big"),
        properties,
    ]
    return b"".join(fields)


def test_encoded_bytes_are_rocketmq_v1_field_by_field() -> None:
    """An encoded record equals RocketMQ's V1 bytes: magic 0xDAA320A7, zero offsets, sys flag
    and prepared offset, loopback born host by default, properties as k\x01v\x02."""
    message = Message("TopicA", b"hello", {"TAGS": "t", "KEYS": "k"}, flag=7,
                      born_timestamp_ms=1_600_000_000_001, reconsume_times=2)
    encoded = encode_message(message, 3, 1_700_000_000_123, HOST, MAX)
    expected = v1_record(b"hello", b"TopicA", b"TAGS\x01t\x02KEYS\x01k\x02", queue_id=3)
    assert encoded == expected
    assert int.from_bytes(expected[8:12], "big") == 907060870  # CRC32 of b"hello", 31 bits


def test_message_defaults_are_rocketmqs() -> None:
    """A bare message has no properties, tags or keys, no queue chosen, flag, born time and
    reconsume count 0, and the loopback born host."""
    message = Message("T", b"x")
    assert (message.properties, message.tags, message.keys, message.queue_id) == (
        {}, None, None, None)
    assert (message.flag, message.born_timestamp_ms, message.reconsume_times) == (0, 0, 0)
    assert message.born_host == LOOPBACK_HOST
    with_both = Message("T", b"x", {"TAGS": "a", "KEYS": "k1 k2"})
    assert (with_both.tags, with_both.keys) == ("a", "k1 k2")


def test_stamped_offsets_land_at_bytes_20_to_36() -> None:
    """stamp_offsets writes the queue offset at byte 20 and the physical offset at byte 28,
    relative to the record's position in the buffer."""
    record = _encode(Message("T", b"x"))
    buffer = bytearray(b"\xee" * 10 + record)
    stamp_offsets(buffer, 10, 5, 1000)
    assert buffer[:10] == b"\xee" * 10
    assert buffer[30:38] == (5).to_bytes(8, "big")
    assert buffer[38:46] == (1000).to_bytes(8, "big")
    assert buffer[10:30] + buffer[46:] == record[:20] + record[36:]


def test_with_offsets_stamps_a_copy_as_stamp_offsets_does() -> None:
    """with_offsets returns the record with both offsets stamped, as stamp_offsets would
    stamp them in place, and leaves the record it was given unchanged."""
    record = _encode(Message("T", b"body", {"TAGS": "t"}))
    stamped = bytearray(record)
    stamp_offsets(stamped, 0, 7, 2**40 + 3)
    assert with_offsets(record, 7, 2**40 + 3) == bytes(stamped)
    assert decode_record(with_offsets(record, 7, 2**40 + 3)).queue_offset == 7
    assert record == _encode(Message("T", b"body", {"TAGS": "t"}))


def test_msg_id_is_store_host_then_physical_offset_in_hex() -> None:
    """msg_id is RocketMQ's: the 8 store-host bytes and the 8-byte physical offset, upper hex."""
    record = bytearray(_encode(Message("T", b"x")))
    stamp_offsets(record, 0, 0, 1000)
    assert decode_record(record).msg_id == "0A00000100002A9F" + "00000000000003E8"


def test_end_of_file_blank_is_size_and_blank_magic() -> None:
    """The end-of-file marker is the remaining size and 0xCBD43194; 8 bytes is the smallest."""
    assert encode_blank(8) == bytes.fromhex("00000008 CBD43194")
    assert encode_blank(4096) == bytes.fromhex("00001000 CBD43194")
    with pytest.raises(AssertionError):
        encode_blank(7)


def test_properties_limit_is_32767_bytes_inclusive() -> None:
    """Encoded properties of exactly 32767 bytes are stored; 32768 bytes are refused."""
    fits = {"k": "v" * (32767 - len("k\x01\x02"))}
    assert decode_record(_encode(Message("T", b"x", fits))).properties == fits
    refused = encode_message(Message("T", b"x", {"k": "v" * (32768 - len("k\x01\x02"))}),
                             0, 0, HOST, MAX)
    assert isinstance(refused, tuple)
    assert refused[0] is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED


@pytest.mark.parametrize("properties", [{"": "v"}, {"k": "a\x02b"}, {"k\x02": "v"}])
def test_property_that_cannot_be_encoded_is_refused(properties: dict[str, str]) -> None:
    """An empty property name or a separator inside a name or value is MESSAGE_ILLEGAL."""
    refused = encode_message(Message("T", b"x", properties), 0, 0, HOST, MAX)
    assert isinstance(refused, tuple)
    assert refused[0] is PutMessageStatus.MESSAGE_ILLEGAL


def test_record_at_a_position_decodes_and_a_cut_one_is_refused() -> None:
    """decode_record reads a record at any position of a buffer; the record after it, cut
    anywhere, raises RecordError (never a struct or index error)."""
    first = _encode(Message("First", b"one"))
    second = bytearray(_encode(Message("Second", b"two", {"TAGS": "tag", "KEYS": "key"})))
    stamp_offsets(second, 0, 1, len(first))
    decoded = decode_record(first + second, len(first))
    assert (decoded.topic, decoded.body, decoded.commit_log_offset) == ("Second", b"two",
                                                                       len(first))
    assert decoded.properties == {"TAGS": "tag", "KEYS": "key"}
    for cut in range(len(second)):
        with pytest.raises(RecordError):
            decode_record(first + second[:cut], len(first))


def test_smallest_v1_record_decodes() -> None:
    """A 91-byte record (empty body, topic and properties) is whole: the fixed overhead is the
    88-byte header, the topic length byte and the properties length."""
    assert RECORD_OVERHEAD == 91
    decoded = decode_record(v1_record(b"", b"", b""))
    assert (decoded.total_size, decoded.body, decoded.topic, decoded.properties) == (
        91, b"", "", {})
    assert decode_record(v1_record(b"body", b"", b"")).body == b"body"


@pytest.mark.parametrize("extra_bytes", [1, 3, 50])
def test_body_length_past_the_record_is_refused_even_with_a_matching_crc(
    extra_bytes: int,
) -> None:
    """A body length that runs past the record raises RecordError, even when the CRC field
    matches the bytes the reader would take as the body."""
    honest = v1_record(b"body", b"", b"")
    claimed = 4 + extra_bytes
    crc = zlib.crc32(honest[88 : 88 + claimed]) & 0x7FFFFFFF
    with pytest.raises(RecordError):
        decode_record(v1_record(b"body", b"", b"", body_size=claimed, crc=crc))


@pytest.mark.parametrize("sys_flag", [0x10, 0x20, 0x30])
def test_ipv6_host_flags_are_refused(sys_flag: int) -> None:
    """A record whose sys flag says IPv6 born or store host (0x10, 0x20) is not decoded."""
    assert decode_record(v1_record(b"x", b"T", b"", sys_flag=0x01)).sys_flag == 0x01
    with pytest.raises(RecordError):
        decode_record(v1_record(b"x", b"T", b"", sys_flag=sys_flag))


def test_foreign_topic_and_property_bytes() -> None:
    """A topic that is not UTF-8 decodes with replacement characters; properties that are not
    UTF-8 raise RecordError."""
    assert decode_record(v1_record(b"x", b"T\xff", b"")).topic == "T\ufffd"
    with pytest.raises(RecordError):
        decode_record(v1_record(b"x", b"T", b"k\x01\xff\x02"))


def test_empty_property_pairs_are_skipped() -> None:
    """Two separators in a row are an empty pair: skipped, and later pairs still read."""
    assert decode_properties(b"a\x01b\x02\x02c\x01d\x02") == {"a": "b", "c": "d"}
    with pytest.raises(RecordError):
        decode_properties(b"no-separator\x02")


def test_head_skips_the_body_but_not_the_sizes() -> None:
    """decode_head reads a record whose body bytes were damaged (it never reads them), and
    still refuses a cut record or a bad magic like decode_record."""
    record = bytearray(_encode(Message("T", b"body", {"k": "v"})))
    record[HEADER_SIZE] ^= 0xFF
    assert decode_head(record).properties == {"k": "v"}
    with pytest.raises(RecordError):
        decode_record(record)
    with pytest.raises(RecordError):
        decode_head(record[:-1])
    record[4] ^= 0xFF
    with pytest.raises(RecordError):
        decode_head(record)


# -- check_entry_record: decode_record's verdict on one whole record, without decoding it ------


def _decoded_place(payload: bytes) -> tuple[str, int, int, int] | None:
    """What check_entry_record must answer, from decode_record: None when it refuses."""
    try:
        decoded = decode_record(payload)
    except RecordError:
        return None
    if decoded.total_size != len(payload):
        return None
    return decoded.topic, decoded.queue_id, decoded.queue_offset, decoded.commit_log_offset


def _checked_place(payload: bytes) -> tuple[str, int, int, int] | None:
    try:
        return check_entry_record(payload)
    except RecordError:
        return None


_damage = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 10_000), st.just(0)),
    st.tuples(st.just("extend"), st.integers(1, 40), st.integers(0, 255)),
    st.tuples(st.just("set"), st.integers(0, 10_000), st.integers(0, 255)),
)


def _damaged(record: bytes, damages: list[tuple[str, int, int]]) -> bytes:
    buffer = bytearray(record)
    for kind, where, value in damages:
        if kind == "extend":
            buffer += bytes([value]) * where
        elif not buffer:
            continue
        elif kind == "cut":
            del buffer[where % len(buffer):]
        elif kind == "flip":
            buffer[where % len(buffer)] ^= value
        else:
            buffer[where % len(buffer)] = value
    return bytes(buffer)


@settings(max_examples=600, deadline=None)
@given(topic=topics, body=st.binary(max_size=200),
       props=st.dictionaries(st.sampled_from(["KEYS", "TAGS", "k", "é"]),
                             st.text(alphabet="ab\x03é", max_size=8), max_size=3),
       damages=st.lists(_damage, min_size=1, max_size=3),
       fields=st.booleans())
def test_entry_check_refuses_every_record_decode_refuses(
    topic: str, body: bytes, props: dict[str, str], damages: list[tuple[str, int, int]],
    fields: bool,
) -> None:
    """On damaged records (bytes flipped, set, cut or added; or a record built field by field
    from the damaged parts) check_entry_record accepts exactly what decode_record accepts as
    one whole record, with the same place, and refuses the rest with RecordError."""
    if fields:
        # The sizes stay consistent while the bytes of each field are damaged: this reaches
        # the topic, properties and CRC checks rather than the header's size checks.
        raw_props = _damaged("".join(f"{k}\x01{v}\x02" for k, v in props.items()).encode(),
                             damages)
        payload = v1_record(_damaged(body, damages), topic.encode(), raw_props,
                            crc=zlib.crc32(body) & 0x7FFFFFFF)
    else:
        payload = _damaged(_encode(Message(topic, body, props)), damages)
    assert _checked_place(payload) == _decoded_place(payload)


def test_topic_length_past_the_record_is_a_record_error() -> None:
    """A topic length byte that runs past the end of a record that ends its buffer raises
    RecordError from decode_record and check_entry_record (it raised struct.error)."""
    record = bytearray(v1_record(b"abc", b"T", b""))
    record[HEADER_SIZE + 3] = 200  # the topic length byte
    with pytest.raises(RecordError, match="topic of 200 bytes"):
        decode_record(bytes(record))
    with pytest.raises(RecordError, match="topic of 200 bytes"):
        check_entry_record(bytes(record))


def test_entry_check_refuses_a_record_shorter_or_longer_than_its_payload() -> None:
    """A valid record followed by other bytes is not one whole record: refused, though
    decode_record reads the record at the front of such a buffer."""
    record = _encode(Message("T", b"body"))
    assert check_entry_record(record)[0] == "T"
    with pytest.raises(RecordError, match="in a payload of"):
        check_entry_record(record + b"\x00")
    with pytest.raises(RecordError):
        check_entry_record(record[:-1])

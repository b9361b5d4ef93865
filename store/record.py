"""RocketMQ's V1 commit-log record, byte for byte (shared/reference/rocketmq-ha.md section 4).

Every integer is big-endian. A record is encoded outside the commit-log lock with placeholder
queue and physical offsets; `stamp_offsets` fills those two in under the lock. Readers verify
what they read (`decode_record`), writers validate what they write (`encode_message`).
A DLedger member checks a replicated record with `check_entry_record`: decode_record's
verdict and the record's place, without copying the body or building the properties.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from store.property_names import PROPERTY_KEYS, PROPERTY_TAGS
from store.status import PutMessageStatus
from store.topic import TOPIC_LENGTH_MAX, topic_problem

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8
PROPERTIES_SIZE_MAX = 32767

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP,
# BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES, PREPARED_TX_OFFSET, BODYLEN.
HEADER = struct.Struct(">iIiiiqqiq8sq8siqi")
HEADER_SIZE = HEADER.size
QUEUE_OFFSET_POSITION = 20
OFFSETS = struct.Struct(">qq")  # QUEUEOFFSET, PHYSICALOFFSET at QUEUE_OFFSET_POSITION
PREFIX = struct.Struct(">iI")  # TOTALSIZE, MAGIC: enough to tell a record from a blank
BLANK = PREFIX
_TOPIC_LENGTH = struct.Struct(">B")
_PROPERTIES_LENGTH = struct.Struct(">H")
# Sizes that do not depend on the message: header, topic length byte, properties length.
RECORD_OVERHEAD = HEADER_SIZE + 1 + 2
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

DEFAULT_HOST = b"\x7f\x00\x00\x01\x00\x00\x00\x00"

assert HEADER_SIZE == 88


class RecordError(ValueError):
    """The bytes at an offset are not a valid record (torn, corrupt or foreign)."""


@dataclass(slots=True)
class Message:
    """A message as a producer hands it to the store."""

    topic: str
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    queue_id: int | None = None
    flag: int = 0
    born_timestamp_ms: int = 0
    born_host: bytes = DEFAULT_HOST
    reconsume_times: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)


@dataclass(slots=True)
class StoredMessage:
    """A record read back from the commit log, every field of the V1 format."""

    total_size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: bytes
    store_timestamp_ms: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def msg_id(self) -> str:
        """STOREHOST and commit-log offset as hex (store/message_id.py parses it)."""
        return message_id(self.store_host, self.commit_log_offset)


@dataclass(frozen=True, slots=True)
class RecordHead:
    """A record without its body: what rebuilding an index from keys and properties needs."""

    total_size: int
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_timestamp_ms: int
    store_host: bytes
    topic: str
    properties: dict[str, str]

    @property
    def msg_id(self) -> str:
        return message_id(self.store_host, self.commit_log_offset)


def message_id(store_host: bytes, commit_log_offset: int) -> str:
    """RocketMQ's offset message id: the store host and the record's commit-log offset."""
    return (store_host + commit_log_offset.to_bytes(8, "big")).hex().upper()


def body_crc(body: bytes | memoryview) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


def encode_properties(properties: dict[str, str]) -> bytes:
    """`k\\x01v\\x02` pairs; a key or value holding a separator cannot be encoded."""
    parts = []
    for name, value in properties.items():
        if _has_separator(name) or _has_separator(value) or not name:
            raise RecordError(f"property {name!r} is empty or holds a separator character")
        parts.append(f"{name}\x01{value}\x02")
    return "".join(parts).encode("utf-8")


def _has_separator(text: str) -> bool:
    return NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text


def property_marker(name: str) -> bytes:
    """What a property's name looks like in encoded properties (`name\x01`)."""
    return f"{name}{NAME_VALUE_SEPARATOR}".encode()


def decode_properties(raw: bytes | memoryview) -> dict[str, str]:
    properties: dict[str, str] = {}
    for pair in bytes(raw).decode("utf-8").split(PROPERTY_SEPARATOR):
        if not pair:
            continue
        name, separator, value = pair.partition(NAME_VALUE_SEPARATOR)
        if not separator:
            raise RecordError(f"property pair {pair!r} has no name/value separator")
        properties[name] = value
    return properties


@lru_cache(maxsize=4096)
def _topic_bytes(topic: str) -> bytes | None:
    """The topic's length byte and UTF-8 bytes, or None when the name is not valid."""
    if topic_problem(topic) is not None:
        return None
    raw = topic.encode("utf-8")
    return _TOPIC_LENGTH.pack(len(raw)) + raw


@lru_cache(maxsize=4096)
def tags_code(tags: str) -> int:
    """Java's String.hashCode of the tags, widened to int64 as RocketMQ's tagsCode."""
    value = 0
    units = tags.encode("utf-16-be")
    for index in range(0, len(units), 2):
        value = (31 * value + (units[index] << 8 | units[index + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def encode_message(
    message: Message,
    queue_id: int,
    store_timestamp_ms: int,
    store_host: bytes,
    message_size_max_bytes: int,
) -> bytes | tuple[PutMessageStatus, str]:
    """Encode a record with zero queue/physical offsets, or say why the message is refused."""
    body = message.body
    properties = message.properties
    tail = _tail_without_properties(message.topic) if not properties else None
    if tail is None:
        refusal_or_tail = _tail(message.topic, properties)
        if isinstance(refusal_or_tail, tuple):
            return refusal_or_tail
        tail = refusal_or_tail
    body_size = len(body)
    if body_size > message_size_max_bytes:
        return (
            PutMessageStatus.MESSAGE_ILLEGAL,
            f"body of {body_size} bytes is over the limit of {message_size_max_bytes} bytes",
        )
    return HEADER.pack(
        HEADER_SIZE + body_size + len(tail),
        MESSAGE_MAGIC,
        zlib.crc32(body) & 0x7FFFFFFF,
        queue_id,
        message.flag,
        0,
        0,
        0,
        message.born_timestamp_ms,
        message.born_host,
        store_timestamp_ms,
        store_host,
        message.reconsume_times,
        0,
        body_size,
    ) + body + tail


@lru_cache(maxsize=4096)
def _tail_without_properties(topic: str) -> bytes | None:
    """Topic length, topic, and an empty properties field; None for an invalid topic."""
    topic_field = _topic_bytes(topic)
    return None if topic_field is None else topic_field + b"\x00\x00"


def _tail(topic: str, properties: dict[str, str]) -> bytes | tuple[PutMessageStatus, str]:
    """Topic and properties fields, or the refusal when either is not valid."""
    topic_field = _topic_bytes(topic)
    if topic_field is None:
        problem = topic_problem(topic)
        return PutMessageStatus.MESSAGE_ILLEGAL, f"{problem} (at most {TOPIC_LENGTH_MAX} bytes)"
    try:
        raw = encode_properties(properties)
    except (RecordError, UnicodeEncodeError) as error:
        return PutMessageStatus.MESSAGE_ILLEGAL, str(error)
    if len(raw) > PROPERTIES_SIZE_MAX:
        return (
            PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
            f"properties of {len(raw)} bytes are over the limit of {PROPERTIES_SIZE_MAX} bytes",
        )
    return topic_field + _PROPERTIES_LENGTH.pack(len(raw)) + raw


def stamp_offsets(
    buffer: bytearray | memoryview, position: int, queue_offset: int, commit_log_offset: int
) -> None:
    """Fill in the two offsets only known under the commit-log lock."""
    OFFSETS.pack_into(buffer, position + QUEUE_OFFSET_POSITION, queue_offset, commit_log_offset)


def with_offsets(record: bytes, queue_offset: int, commit_log_offset: int) -> bytes:
    """A copy of `record` with its two offsets filled in (one copy, no bytearray)."""
    end = QUEUE_OFFSET_POSITION + OFFSETS.size
    return record[:QUEUE_OFFSET_POSITION] + OFFSETS.pack(queue_offset, commit_log_offset) \
        + record[end:]


def encode_blank(size_bytes: int) -> bytes:
    """The end-of-file marker: the remaining size and BLANK_MAGIC (readers skip to next file)."""
    assert size_bytes >= END_FILE_MIN_BLANK_LENGTH
    return BLANK.pack(size_bytes, BLANK_MAGIC)


def decode_record(buffer: bytes | memoryview | bytearray, position: int = 0) -> StoredMessage:
    """Decode and verify the record at `position`; raise RecordError when it is not whole."""
    view = memoryview(buffer)
    fields = _checked_header(view, position)
    total_size, _, crc, queue_id, flag, queue_offset, physical_offset = fields[:7]
    sys_flag, born_ms, born_host, store_ms, store_host, reconsume, prepared, body_size = fields[7:]
    cursor = position + HEADER_SIZE
    body = bytes(view[cursor : cursor + body_size])
    if body_crc(body) != crc:
        raise RecordError("body CRC does not match")
    topic, properties = _topic_and_properties(view, position, total_size, body_size)
    return StoredMessage(
        total_size=total_size,
        body_crc=crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        commit_log_offset=physical_offset,
        sys_flag=sys_flag,
        born_timestamp_ms=born_ms,
        born_host=born_host,
        store_timestamp_ms=store_ms,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body=body,
        topic=topic,
        properties=properties,
    )


def decode_head(buffer: bytes | memoryview | bytearray, position: int = 0) -> RecordHead:
    """The record at `position` without its body: the body is neither copied nor checked
    (its CRC needs every byte of it), so reading a head costs the same for 10 B and 4 MiB."""
    view = memoryview(buffer)
    fields = _checked_header(view, position)
    total_size, body_size = fields[0], fields[14]
    topic, properties = _topic_and_properties(view, position, total_size, body_size)
    return RecordHead(total_size=total_size, queue_id=fields[3], queue_offset=fields[5],
                      commit_log_offset=fields[6], store_timestamp_ms=fields[10],
                      store_host=fields[11], topic=topic, properties=properties)


def decode_head_having(buffer: bytes | memoryview | bytearray, position: int,
                       marker: bytes) -> RecordHead | None:
    """`decode_head`, for a record whose encoded properties hold `marker` (a property's
    `name\x01`); None, without decoding its properties, for one whose do not."""
    view = memoryview(buffer)
    fields = _checked_header(view, position)
    total_size, body_size = fields[0], fields[14]
    _, cursor, properties_size = _topic_and_properties_size(view, position, total_size,
                                                            body_size)
    if marker not in bytes(view[cursor : cursor + properties_size]):
        return None
    topic, properties = _topic_and_properties(view, position, total_size, body_size)
    return RecordHead(total_size=total_size, queue_id=fields[3], queue_offset=fields[5],
                      commit_log_offset=fields[6], store_timestamp_ms=fields[10],
                      store_host=fields[11], topic=topic, properties=properties)


def _checked_header(view: memoryview, position: int) -> tuple[Any, ...]:
    """The header fields at `position`, once the magic and every size in them fit."""
    available = len(view) - position
    if available < HEADER_SIZE:
        raise RecordError(f"only {available} bytes left, a header needs {HEADER_SIZE}")
    fields = HEADER.unpack_from(view, position)
    total_size, magic = fields[0], fields[1]
    if magic != MESSAGE_MAGIC:
        raise RecordError(f"bad magic 0x{magic:08X}")
    if total_size < RECORD_OVERHEAD or total_size > available:
        raise RecordError(f"total size {total_size} does not fit the {available} bytes left")
    if fields[7] & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6):
        raise RecordError("IPv6 host fields are not supported")
    body_size = fields[14]
    if body_size < 0 or HEADER_SIZE + body_size + 3 > total_size:
        raise RecordError(f"body size {body_size} does not fit total size {total_size}")
    return fields


def _topic_and_properties(view: memoryview, position: int, total_size: int,
                          body_size: int) -> tuple[str, dict[str, str]]:
    topic, cursor, properties_size = _topic_and_properties_size(view, position, total_size,
                                                                body_size)
    try:
        properties = decode_properties(view[cursor : cursor + properties_size])
    except UnicodeDecodeError as error:
        raise RecordError(f"properties are not UTF-8: {error}") from error
    return topic, properties


def _topic_and_properties_size(view: memoryview | bytes, position: int, total_size: int,
                               body_size: int) -> tuple[str, int, int]:
    """The topic, where the properties start and their size, once the sizes add up."""
    cursor = position + HEADER_SIZE + body_size
    topic_size = view[cursor]
    topic = bytes(view[cursor + 1 : cursor + 1 + topic_size]).decode("utf-8", "replace")
    cursor += 1 + topic_size
    # A topic length past the record would read the properties' length out of the buffer
    # (struct.error) when the record ends the buffer, as an entry's payload does.
    if cursor + 2 - position > total_size:
        raise RecordError(f"topic of {topic_size} bytes does not fit total size {total_size}")
    (properties_size,) = _PROPERTIES_LENGTH.unpack_from(view, cursor)
    cursor += 2
    if cursor + properties_size - position != total_size:
        raise RecordError(f"field sizes do not add up to total size {total_size}")
    return topic, cursor, properties_size


def check_entry_record(payload: bytes) -> tuple[str, int, int, int]:
    """(topic, queue id, queue offset, physical offset) of `payload`, which must be exactly one
    record that `decode_record` accepts: the same refusals (RecordError), without copying the
    body or building the properties (a replicated entry needs only where its record goes).
    Properties are still checked as decode_record checks them: UTF-8, name/value pairs."""
    view = memoryview(payload)
    fields = _checked_header(view, 0)
    total_size, body_size = fields[0], fields[14]
    if total_size != len(payload):
        raise RecordError(f"record of {total_size} bytes in a payload of {len(payload)}")
    if body_crc(view[HEADER_SIZE : HEADER_SIZE + body_size]) != fields[2]:
        raise RecordError("body CRC does not match")
    topic, cursor, properties_size = _topic_and_properties_size(payload, 0, total_size,
                                                                body_size)
    if properties_size:
        _check_properties(payload[cursor:])
    return topic, fields[3], fields[5], fields[6]


def _check_properties(raw: bytes) -> None:
    """Refuse what decode_properties refuses, without building the dictionary."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RecordError(f"properties are not UTF-8: {error}") from error
    for pair in text.split(PROPERTY_SEPARATOR):
        if pair and NAME_VALUE_SEPARATOR not in pair:
            raise RecordError(f"property pair {pair!r} has no name/value separator")

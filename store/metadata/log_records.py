"""Metadata changes as records of the commit log's metadata topic: what each one carries, and
its bytes.

A change carries its whole result (a topic's full config with its times, an offset's value),
never a delta or a "now": applying it is a pure function of the tables and the record, so every
replica that applies the same records in the same order holds the same tables, and applying a
record again (after a restart that resumed from an earlier position) changes nothing that the
records after it do not set again.

The body is JSON with a version; the operation also travels as the record's `TWINLOG_OP`
property (store/system_topics.py), so the store reads a topic delete without this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from store.system_topics import OP_TOPIC_DELETE

RECORD_VERSION = 1
OP_TOPIC_PUT = "topic.put"
OP_TOPICS_PUT = "topics.put"
OP_GROUP_PUT = "group.put"
OP_GROUP_DELETE = "group.delete"
OP_OFFSET_SET = "offset.set"


class MetadataRecordError(ValueError):
    """A metadata record that cannot be decoded (an unknown version or operation, a bad body)."""


@dataclass(frozen=True, slots=True)
class TopicPut:
    """A topic created or changed: its whole config afterwards."""

    name: str
    read_queue_count: int
    write_queue_count: int
    permission: int
    created_at_ms: int
    updated_at_ms: int


@dataclass(frozen=True, slots=True)
class TopicsPut:
    """Topics created together (a batch create: all of them, in one record)."""

    topics: tuple[TopicPut, ...]


@dataclass(frozen=True, slots=True)
class TopicDelete:
    """A topic deleted, with its consumer offsets; its queues go at this record (dispatch)."""

    name: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class GroupPut:
    """A subscription group created or changed: its whole config afterwards."""

    name: str
    consume_enabled: bool
    broadcast_enabled: bool
    retry_queue_count: int
    retry_times_max: int
    created_at_ms: int
    updated_at_ms: int


@dataclass(frozen=True, slots=True)
class GroupDelete:
    """A group deleted, with its consumer offsets."""

    name: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class OffsetSet:
    """A consumer offset committed (only forward: a lower one applies as nothing) or reset
    (`reset`: either way)."""

    group_name: str
    topic: str
    queue_id: int
    queue_offset: int
    reset: bool
    at_ms: int


MetadataChange = TopicPut | TopicsPut | TopicDelete | GroupPut | GroupDelete | OffsetSet

_OPS: dict[str, type[MetadataChange]] = {
    OP_TOPIC_PUT: TopicPut,
    OP_TOPICS_PUT: TopicsPut,
    OP_TOPIC_DELETE: TopicDelete,
    OP_GROUP_PUT: GroupPut,
    OP_GROUP_DELETE: GroupDelete,
    OP_OFFSET_SET: OffsetSet,
}
_OP_OF: dict[type[MetadataChange], str] = {kind: op for op, kind in _OPS.items()}
# Each flat change's fields and their types (TopicsPut nests TopicPuts: decoded apart).
_FIELD_TYPES: dict[type[MetadataChange], tuple[tuple[str, type], ...]] = {
    kind: tuple((name, {"bool": bool, "int": int, "str": str}[str(field.type)])
                for name, field in kind.__dataclass_fields__.items())
    for kind in _OPS.values() if kind is not TopicsPut}


def op_of(change: MetadataChange) -> str:
    return _OP_OF[type(change)]


def encode(change: MetadataChange) -> bytes:
    # orjson writes the dataclasses TopicsPut nests itself (fields in declaration order).
    return orjson.dumps({"v": RECORD_VERSION, "op": op_of(change), **_shallow(change)})


def _shallow(change: MetadataChange) -> dict[str, Any]:
    """The change's fields (dataclasses.asdict without its deep copy: an offset commit's
    record is encoded and decoded on the commit's path)."""
    return {name: getattr(change, name) for name in change.__dataclass_fields__}


def decode(op: str, body: bytes) -> MetadataChange:
    """The change a record holds; MetadataRecordError when it is not one this build reads."""
    if op == OP_TOPICS_PUT:
        fields = _fields(op, body)
        items = fields.get("topics")
        if set(fields) != {"topics"} or not isinstance(items, list):
            raise MetadataRecordError(f"{op} record without a list of topics")
        return TopicsPut(tuple(_checked(TopicPut, op, item) for item in items))
    kind = _OPS.get(op)
    if kind is None:
        raise MetadataRecordError(f"unknown metadata operation {op!r}")
    change: MetadataChange = _checked(kind, op, _fields(op, body))
    return change


def _fields(op: str, body: bytes) -> dict[str, Any]:
    try:
        fields: Any = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise MetadataRecordError(f"{op} record body does not decode: {error}") from error
    if not isinstance(fields, dict):
        raise MetadataRecordError(f"{op} record body is not a JSON object")
    version = fields.pop("v", None)
    if version != RECORD_VERSION:
        raise MetadataRecordError(f"{op} record of version {version!r}, this build reads "
                                  f"{RECORD_VERSION}")
    if fields.pop("op", None) != op:
        raise MetadataRecordError(f"{op} record whose body names another operation")
    return fields


def _checked(kind: Any, op: str, fields: Any) -> Any:
    if not isinstance(fields, dict):
        raise MetadataRecordError(f"{op} record holds {fields!r}, not an object")
    # What the encoder writes (every field, of exactly its type) is built at once: every
    # replica decodes every offset commit. Anything else is judged field by field below.
    field_types = _FIELD_TYPES[kind]
    if len(fields) == len(field_types) and all(
            type(fields.get(name)) is wanted for name, wanted in field_types):
        return kind(**fields)
    try:
        change = kind(**fields)
    except TypeError as error:
        raise MetadataRecordError(f"{op} record fields do not match: {error}") from error
    for name, value in _shallow(change).items():
        wanted = kind.__dataclass_fields__[name].type
        if not _is(value, str(wanted)):
            raise MetadataRecordError(f"{op} record field {name} is {value!r}, not {wanted}")
    return change


def _is(value: object, type_name: str) -> bool:
    if type_name == "bool":
        return isinstance(value, bool)
    if type_name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, str)

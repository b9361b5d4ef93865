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

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from store.consumption.snapshot import (
    PopCountsImage,
    PopImageError,
    PopQueueImage,
    decode_queue_image,
)
from store.system_topics import OP_SNAPSHOT, OP_TOPIC_DELETE

log = logging.getLogger(__name__)

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
    # The group's backoff (store/consumption/policy.py `Backoff.text`), "" for the broker's
    # default; left out of a record when "" (the bytes of builds before it).
    backoff: str = ""
    # A FIFO group (docs/group-consumption.md); left out of a record when False (the bytes
    # of builds before it).
    fifo: bool = False


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


@dataclass(frozen=True, slots=True)
class QueueStart:
    """A queue's next queue offset where a snapshot stands in the log (the next message of
    the queue after it gets this offset)."""

    topic: str
    queue_id: int
    queue_offset: int


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    """One part of a snapshot: the whole tables (and every queue's next offset) as the log's
    records before it say. Part 0 replaces the tables with what it holds, later parts add
    theirs; the parts of one snapshot are appended together, in order. An offset is a reset
    (`OffsetSet.reset`): it sets the value either way."""

    part: int
    parts: int
    topics: tuple[TopicPut, ...]
    groups: tuple[GroupPut, ...]
    offsets: tuple[OffsetSet, ...]
    queues: tuple[QueueStart, ...]
    # Group consumption's states and counts (store/consumption/snapshot.py); absent from
    # the snapshots of builds before them.
    pop_queues: tuple[PopQueueImage, ...] = ()
    pop_counts: tuple[PopCountsImage, ...] = ()


MetadataChange = (TopicPut | TopicsPut | TopicDelete | GroupPut | GroupDelete | OffsetSet
                  | MetadataSnapshot)

_OPS: dict[str, type[MetadataChange]] = {
    OP_TOPIC_PUT: TopicPut,
    OP_TOPICS_PUT: TopicsPut,
    OP_TOPIC_DELETE: TopicDelete,
    OP_GROUP_PUT: GroupPut,
    OP_GROUP_DELETE: GroupDelete,
    OP_OFFSET_SET: OffsetSet,
    OP_SNAPSHOT: MetadataSnapshot,
}
_OP_OF: dict[type[MetadataChange], str] = {kind: op for op, kind in _OPS.items()}
# Each flat record item's fields and their types (TopicsPut and MetadataSnapshot nest them:
# decoded apart).
_FIELD_TYPES: dict[type, tuple[tuple[str, type], ...]] = {
    kind: tuple((name, {"bool": bool, "int": int, "str": str}[str(field.type)])
                for name, field in kind.__dataclass_fields__.items())
    for kind in (*_OPS.values(), QueueStart, PopCountsImage)
    if kind not in (TopicsPut, MetadataSnapshot)}


def op_of(change: MetadataChange) -> str:
    return _OP_OF[type(change)]


def encode(change: MetadataChange) -> bytes:
    if type(change) is OffsetSet:  # every commit: its fields written out, in the same order
        return orjson.dumps({"v": RECORD_VERSION, "op": OP_OFFSET_SET,
                             "group_name": change.group_name, "topic": change.topic,
                             "queue_id": change.queue_id, "queue_offset": change.queue_offset,
                             "reset": change.reset, "at_ms": change.at_ms})
    # orjson writes the dataclasses TopicsPut nests itself (fields in declaration order).
    fields = _shallow(change)
    if type(change) is MetadataSnapshot:
        for name in _SNAPSHOT_LATER:  # left out when empty: the bytes older builds wrote
            if not fields[name]:
                del fields[name]
        fields["groups"] = [_group_fields(group) for group in change.groups]
    elif type(change) is GroupPut:
        fields = _group_fields(change)
    return orjson.dumps({"v": RECORD_VERSION, "op": op_of(change), **fields})


def _group_fields(group: GroupPut) -> dict[str, Any]:
    """A group's fields, without a backoff of "" (the broker's default) or a fifo of False: a
    group without a backoff of its own, not FIFO, is written as builds before those fields
    wrote it, in its record and in a snapshot."""
    fields = _shallow(group)
    if not group.backoff:
        del fields["backoff"]
    if not group.fifo:
        del fields["fifo"]
    return fields


def _shallow(change: MetadataChange) -> dict[str, Any]:
    """The change's fields (dataclasses.asdict without its deep copy: an offset commit's
    record is encoded and decoded on the commit's path)."""
    return {name: getattr(change, name) for name in change.__dataclass_fields__}


def decode(op: str, body: bytes) -> MetadataChange:
    """The change a record holds; MetadataRecordError when it is not one this build reads."""
    if op == OP_SNAPSHOT:
        return _snapshot(_fields(op, body))
    if op == OP_TOPICS_PUT:
        fields = _fields(op, body)
        items = fields.get("topics")
        if set(fields) != {"topics"} or not isinstance(items, list):
            raise MetadataRecordError(f"{op} record without a list of topics")
        return TopicsPut(tuple(_checked(TopicPut, op, item) for item in items))
    if op == OP_OFFSET_SET:
        offset_set = _plain_offset_set(body)
        if offset_set is not None:
            return offset_set
    kind = _OPS.get(op)
    if kind is None:
        raise MetadataRecordError(f"unknown metadata operation {op!r}")
    change: MetadataChange = _checked(kind, op, _fields(op, body))
    return change


_SNAPSHOT_LISTS = {"topics": TopicPut, "groups": GroupPut, "offsets": OffsetSet,
                   "queues": QueueStart, "pop_counts": PopCountsImage}
_SNAPSHOT_LATER = {"pop_queues", "pop_counts"}  # lists a snapshot of an older build lacks
_SNAPSHOT_FIELDS = frozenset({"part", "parts", "pop_queues", *_SNAPSHOT_LISTS})
# The unknown snapshot fields already warned of (bounded: past it, skipped unsaid).
_SKIPPED_WARNED: set[str] = set()
_SKIPPED_WARNED_MAX = 64


def _snapshot(fields: dict[str, Any]) -> MetadataSnapshot:
    for name in _SNAPSHOT_LATER:
        fields.setdefault(name, [])
    unknown = set(fields) - _SNAPSHOT_FIELDS
    if unknown:
        _skip(unknown)
        for name in unknown:
            del fields[name]
    if set(fields) != _SNAPSHOT_FIELDS:
        raise MetadataRecordError(f"{OP_SNAPSHOT} record with fields {sorted(fields)}")
    part, parts = fields["part"], fields["parts"]
    if not (_is(part, "int") and _is(parts, "int") and 0 <= part < parts <= SNAPSHOT_PARTS_MAX):
        raise MetadataRecordError(f"{OP_SNAPSHOT} record part {part!r} of {parts!r}")
    lists: dict[str, tuple[Any, ...]] = {}
    for name, kind in _SNAPSHOT_LISTS.items():
        items = fields[name]
        if not isinstance(items, list):
            raise MetadataRecordError(f"{OP_SNAPSHOT} record's {name} is not a list")
        lists[name] = tuple(_checked(kind, OP_SNAPSHOT, item) for item in items)
    if not isinstance(fields["pop_queues"], list):
        raise MetadataRecordError(f"{OP_SNAPSHOT} record's pop_queues is not a list")
    try:
        pop_queues = tuple(decode_queue_image(item) for item in fields["pop_queues"])
    except PopImageError as error:
        raise MetadataRecordError(f"{OP_SNAPSHOT} record: {error}") from error
    return MetadataSnapshot(part, parts, lists["topics"], lists["groups"], lists["offsets"],
                            lists["queues"], pop_queues, lists["pop_counts"])


def _skip(names: set[str]) -> None:
    """A newer build's snapshot fields: state of features this build lacks, which a newer
    build adds only when a build that passes it over still holds the tables right (a change
    that must not be passed over raises RECORD_VERSION instead, refused above). Passed over,
    with a warning once per name."""
    new = sorted(names - _SKIPPED_WARNED)
    if new and len(_SKIPPED_WARNED) < _SKIPPED_WARNED_MAX:
        _SKIPPED_WARNED.update(new)
        log.warning("metadata: a snapshot holds fields this build does not know (%s), written "
                    "by a newer build; passed over (docs/operations.md, Upgrades and "
                    "downgrades)", ", ".join(new))


# A snapshot's parts: each record at most SNAPSHOT_PART_BYTES_MAX of body (the last item
# past it may add one item's size), at most SNAPSHOT_PARTS_MAX of them.
SNAPSHOT_PART_BYTES_MAX = 256 * 1024
SNAPSHOT_PARTS_MAX = 4096


class SnapshotTooLarge(ValueError):
    """The tables do not fit in SNAPSHOT_PARTS_MAX parts."""


_Chunk = dict[str, list[Any]]
_KINDS = ("topics", "groups", "offsets", "queues", "pop_queues", "pop_counts")


def _chunks(kinds: Sequence[tuple[str, Sequence[Any]]], part_bytes_max: int) -> list[_Chunk]:
    """The items in order, cut into chunks of about `part_bytes_max` encoded bytes (an item
    is never split: one larger than that is a chunk alone); at least one chunk."""
    chunks: list[_Chunk] = []
    current: _Chunk = {name: [] for name in _KINDS}
    size = 0
    for name, items in kinds:
        for item in items:
            item_size = len(orjson.dumps(item)) + 1
            if size and size + item_size > part_bytes_max:
                chunks.append(current)
                current, size = {kind: [] for kind in _KINDS}, 0
            current[name].append(item)
            size += item_size
    chunks.append(current)
    return chunks


@dataclass(frozen=True)
class SnapshotPlan:
    """A snapshot's parts, its tables cut already: `table_parts` can be encoded ahead, and
    `queue_parts` takes the queue starts last (read in the append's lock hold) in exactly
    `queue_part_count` parts, split evenly."""

    tables: tuple[_Chunk, ...]
    queue_part_count: int

    @property
    def part_count(self) -> int:
        return len(self.tables) + self.queue_part_count

    def table_parts(self) -> list[MetadataSnapshot]:
        return [_part(number, self.part_count, chunk) for number, chunk in enumerate(self.tables)]

    def queue_parts(self, queues: Sequence[QueueStart]) -> list[MetadataSnapshot]:
        count = self.queue_part_count
        size = -(-len(queues) // count)  # ceil
        return [_part(len(self.tables) + number, self.part_count,
                      {"queues": list(queues[number * size:(number + 1) * size])})
                for number in range(count)]


def _part(number: int, parts: int, chunk: _Chunk) -> MetadataSnapshot:
    return MetadataSnapshot(number, parts, tuple(chunk.get("topics", ())),
                            tuple(chunk.get("groups", ())), tuple(chunk.get("offsets", ())),
                            tuple(chunk.get("queues", ())), tuple(chunk.get("pop_queues", ())),
                            tuple(chunk.get("pop_counts", ())))


def plan_snapshot(topics: Sequence[TopicPut], groups: Sequence[GroupPut],
                  offsets: Sequence[OffsetSet], queues_about: Sequence[QueueStart],
                  part_bytes_max: int = SNAPSHOT_PART_BYTES_MAX, *,
                  pop_queues: Sequence[PopQueueImage] = (),
                  pop_counts: Sequence[PopCountsImage] = ()) -> SnapshotPlan:
    """Topics first, then groups and offsets (a part never names a group or topic a later
    part adds), then group consumption's states and counts, each part's body about
    `part_bytes_max` at most; the queue starts get parts of their own, as many as
    `queues_about` (what they are about to be) needs. Raises SnapshotTooLarge past
    SNAPSHOT_PARTS_MAX parts."""
    tables = _chunks((("topics", topics), ("groups", groups), ("offsets", offsets),
                      ("pop_queues", pop_queues), ("pop_counts", pop_counts)),
                     part_bytes_max)
    plan = SnapshotPlan(tuple(tables),
                        len(_chunks((("queues", queues_about),), part_bytes_max)))
    if plan.part_count > SNAPSHOT_PARTS_MAX:
        raise SnapshotTooLarge(f"a metadata snapshot of {plan.part_count} parts, more than "
                               f"{SNAPSHOT_PARTS_MAX}")
    return plan


def snapshot_parts(topics: Sequence[TopicPut], groups: Sequence[GroupPut],
                   offsets: Sequence[OffsetSet], queues: Sequence[QueueStart],
                   part_bytes_max: int = SNAPSHOT_PART_BYTES_MAX, *,
                   pop_queues: Sequence[PopQueueImage] = (),
                   pop_counts: Sequence[PopCountsImage] = ()) -> list[MetadataSnapshot]:
    """The tables, group consumption's states and the queue starts as snapshot parts
    (plan_snapshot)."""
    plan = plan_snapshot(topics, groups, offsets, queues, part_bytes_max,
                         pop_queues=pop_queues, pop_counts=pop_counts)
    return plan.table_parts() + plan.queue_parts(queues)


def _plain_offset_set(body: bytes) -> OffsetSet | None:
    """An offset commit's record as the encoder writes it (every replica decodes every
    commit): its change built at once; None for anything else, which `decode` judges field
    by field."""
    try:
        fields = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if type(fields) is not dict or len(fields) != 8 or fields.get("v") != RECORD_VERSION \
            or fields.get("op") != OP_OFFSET_SET:
        return None
    group_name, topic, queue_id = fields.get("group_name"), fields.get("topic"), \
        fields.get("queue_id")
    queue_offset, reset, at_ms = fields.get("queue_offset"), fields.get("reset"), \
        fields.get("at_ms")
    if type(group_name) is not str or type(topic) is not str or type(queue_id) is not int \
            or type(queue_offset) is not int or type(reset) is not bool \
            or type(at_ms) is not int:
        return None
    return OffsetSet(group_name, topic, queue_id, queue_offset, reset, at_ms)


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

"""The broker's own topics: records that carry the broker's state through the commit log.

Everything a failover must keep travels in the replicated log, as records of a system topic
that every replica dispatches in log order: metadata changes (topics, groups, consumer
offsets) are records of `METADATA_TOPIC`, whose body the metadata layer decodes
(store/metadata/log_records.py). The store itself reads one kind: a topic delete
(`OP_TOPIC_DELETE`, the deleted topic in `PROPERTY_SUBJECT_TOPIC`), which dispatch applies as
a tombstone at the record's offset on every replica, and which the master's commit log applies
to its next queue offsets in the same lock hold as the append, so the topic's next incarnation
starts at queue offset 0 everywhere.

Names starting with `SYSTEM_TOPIC_PREFIX` are the broker's: a client cannot create, produce to,
consume or list them (the gateway refuses them as reserved).
"""

from __future__ import annotations

from typing import NamedTuple

import orjson

SYSTEM_TOPIC_PREFIX = "TWINLOG_SYS_"
METADATA_TOPIC = SYSTEM_TOPIC_PREFIX + "METADATA"
METADATA_TOPIC_BYTES = METADATA_TOPIC.encode()
# What a system record does, readable without decoding its body.
PROPERTY_OP = "TWINLOG_OP"
# The user topic a record is about (a topic delete's victim).
PROPERTY_SUBJECT_TOPIC = "TWINLOG_TOPIC"
OP_TOPIC_DELETE = "topic.delete"
# A snapshot of the metadata tables (store/metadata/log_records.py's MetadataSnapshot). The
# store reads its queue starts (`queue_starts`): a replica whose log starts past a queue's
# last record still starts that queue at its next offset.
OP_SNAPSHOT = "snapshot"


class SnapshotAt(NamedTuple):
    """Where a whole metadata snapshot lies in the log: its part 0's queue offset (in the
    metadata topic) and commit-log offset, and how many parts it has (consecutive records)."""

    queue_offset: int
    commit_log_offset: int
    parts: int


def is_system_topic(topic: str) -> bool:
    return topic.startswith(SYSTEM_TOPIC_PREFIX)


def deleted_topic(topic: str, properties: dict[str, str]) -> str | None:
    """The user topic a record deletes: a topic delete's subject, else None."""
    if topic != METADATA_TOPIC or properties.get(PROPERTY_OP) != OP_TOPIC_DELETE:
        return None
    return properties.get(PROPERTY_SUBJECT_TOPIC) or None


def snapshot_fields(op: str, body: bytes) -> dict[str, object] | None:
    """A snapshot record's decoded body; None for any other record or a bad body."""
    if op != OP_SNAPSHOT:
        return None
    try:
        fields = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return fields if isinstance(fields, dict) else None


def snapshot_part(op: str, body: bytes) -> tuple[int, int] | None:
    """A snapshot record's (part, parts); None for any other record."""
    fields = snapshot_fields(op, body)
    if fields is None:
        return None
    part, parts = fields.get("part"), fields.get("parts")
    if type(part) is int and type(parts) is int and 0 <= part < parts:
        return part, parts
    return None


def queue_starts(op: str, body: bytes) -> list[tuple[str, int, int]]:
    """A snapshot record's (topic, queue id, next queue offset) of every queue; [] for any
    other record, or a body without them."""
    fields = snapshot_fields(op, body)
    items = fields.get("queues") if fields is not None else None
    starts = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get("topic"), str) and \
                type(item.get("queue_id")) is int and type(item.get("queue_offset")) is int:
            starts.append((item["topic"], item["queue_id"], item["queue_offset"]))
    return starts


def forget_topic(counters: dict[tuple[str, int], int], topic: str) -> None:
    """Drop a deleted topic's next queue offsets from `counters` (its next incarnation starts
    every queue at 0)."""
    for key in [key for key in counters if key[0] == topic]:
        del counters[key]

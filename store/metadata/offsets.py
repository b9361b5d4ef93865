"""Consumer offset repository: (group, topic, queue_id) -> the next queue offset to consume.

These functions write the database directly. The broker's hot path goes through the in-memory
ConsumerOffsetTable (offset_table.py) instead, which the MetadataStore persists in batches with
persist_consumer_offsets.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from store.metadata.database import read_transaction, transaction
from store.metadata.errors import GroupNotFound, InvalidQueueId, OffsetMovesBackwards, TopicNotFound
from store.metadata.models import (
    ConsumerOffset,
    ConsumerOffsetRow,
    SubscriptionGroupRow,
    TopicConfigRow,
)
from store.metadata.rules import (
    check_group_name,
    check_queue_id,
    check_queue_offset,
    check_topic_name,
)
from store.metadata.versions import MetadataTable, bump_data_version


class OffsetKey(NamedTuple):
    group_name: str
    topic: str
    queue_id: int

    def describe(self) -> str:
        return f"group {self.group_name!r} topic {self.topic!r} queue {self.queue_id}"


def offset_key(offset: ConsumerOffset) -> OffsetKey:
    return OffsetKey(offset.group_name, offset.topic, offset.queue_id)


def check_offset_key(key: OffsetKey) -> None:
    """The shape rules of a key (names, queue id range); no database needed."""
    check_group_name(key.group_name)
    check_topic_name(key.topic)
    check_queue_id(key.queue_id)


def check_moves_forward(key: OffsetKey, current_offset: int | None, queue_offset: int) -> None:
    if current_offset is not None and queue_offset < current_offset:
        raise OffsetMovesBackwards(
            f"offset of {key.describe()} would move backwards from {current_offset} to"
            f" {queue_offset}; reset the offset to move it back"
        )


def check_offset_target(session: Session, key: OffsetKey) -> None:
    """The group and topic exist and the queue is one of the topic's read queues."""
    if session.get(SubscriptionGroupRow, key.group_name) is None:
        raise GroupNotFound(f"group {key.group_name!r} does not exist")
    topic = session.get(TopicConfigRow, key.topic)
    if topic is None:
        raise TopicNotFound(f"topic {key.topic!r} does not exist")
    if key.queue_id >= topic.read_queue_count:
        raise InvalidQueueId(
            f"queue_id {key.queue_id} is not a read queue of topic {key.topic!r}"
            f" (read_queue_count {topic.read_queue_count})"
        )


def get_consumer_offset(
    *, engine: Engine, group_name: str, topic: str, queue_id: int
) -> ConsumerOffset | None:
    key = OffsetKey(group_name, topic, queue_id)
    check_offset_key(key)
    with read_transaction(engine) as session:
        row = session.get(ConsumerOffsetRow, key)
        return None if row is None else _public(row)


def list_consumer_offsets(
    *, engine: Engine, group_name: str | None = None, topic: str | None = None
) -> list[ConsumerOffset]:
    """Stored offsets, optionally of one group and/or topic, ordered by key."""
    statement = select(ConsumerOffsetRow)
    if group_name is not None:
        check_group_name(group_name)
        statement = statement.where(col(ConsumerOffsetRow.group_name) == group_name)
    if topic is not None:
        check_topic_name(topic)
        statement = statement.where(col(ConsumerOffsetRow.topic) == topic)
    statement = statement.order_by(
        col(ConsumerOffsetRow.group_name),
        col(ConsumerOffsetRow.topic),
        col(ConsumerOffsetRow.queue_id),
    )
    with read_transaction(engine) as session:
        return [_public(row) for row in session.exec(statement).all()]


def commit_consumer_offset(
    *, engine: Engine, group_name: str, topic: str, queue_id: int, queue_offset: int, now_ms: int
) -> bool:
    """Store an offset that does not move backwards; True when the stored value changed."""
    return _write_one(
        engine, OffsetKey(group_name, topic, queue_id), queue_offset, now_ms, allow_backwards=False
    )


def reset_consumer_offset(
    *, engine: Engine, group_name: str, topic: str, queue_id: int, queue_offset: int, now_ms: int
) -> bool:
    """Store an offset in either direction (an operator's explicit reset)."""
    return _write_one(
        engine, OffsetKey(group_name, topic, queue_id), queue_offset, now_ms, allow_backwards=True
    )


def persist_consumer_offsets(
    *, engine: Engine, offsets: Iterable[ConsumerOffset], now_ms: int
) -> int:
    """Write a batch of offsets as they are (the in-memory table is authoritative).

    Returns how many rows changed; the data version is bumped once when any did.
    """
    with transaction(engine) as session:
        changed_count = sum(_upsert(session, offset) for offset in offsets)
        if changed_count:
            bump_data_version(session, MetadataTable.CONSUMER_OFFSET, now_ms=now_ms)
        return changed_count


def _write_one(
    engine: Engine, key: OffsetKey, queue_offset: int, now_ms: int, *, allow_backwards: bool
) -> bool:
    check_offset_key(key)
    check_queue_offset(queue_offset)
    with transaction(engine) as session:
        check_offset_target(session, key)
        row = session.get(ConsumerOffsetRow, key)
        if not allow_backwards:
            check_moves_forward(key, None if row is None else row.queue_offset, queue_offset)
        offset = ConsumerOffset(
            group_name=key.group_name,
            topic=key.topic,
            queue_id=key.queue_id,
            queue_offset=queue_offset,
            updated_at_ms=now_ms,
        )
        changed = _upsert(session, offset)
        if changed:
            bump_data_version(session, MetadataTable.CONSUMER_OFFSET, now_ms=now_ms)
        return changed


def _upsert(session: Session, offset: ConsumerOffset) -> bool:
    """Insert or update one row; False when the stored offset is already this value."""
    row = session.get(ConsumerOffsetRow, offset_key(offset))
    if row is None:
        session.add(ConsumerOffsetRow.model_validate(offset, from_attributes=True))
        return True
    if row.queue_offset == offset.queue_offset:
        return False
    row.queue_offset = offset.queue_offset
    row.updated_at_ms = offset.updated_at_ms
    return True


def _public(row: ConsumerOffsetRow) -> ConsumerOffset:
    return ConsumerOffset.model_validate(row, from_attributes=True)

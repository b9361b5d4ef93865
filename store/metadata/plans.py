"""What a metadata request would change, decided against the tables as they are and written
nowhere: the records a master puts in the log (store/metadata/log_records.py), each refused
with the same MetadataError the direct writes raise. The tables change only when the records
apply (store/metadata/apply.py), on this broker and on every replica.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import TypeVar

from sqlalchemy import Engine, func
from sqlmodel import col, select

from store.metadata.database import read_transaction
from store.metadata.errors import (
    GroupAlreadyExists,
    GroupNotFound,
    GroupsMaxReached,
    QueuesPerTopicMaxExceeded,
    TopicAlreadyExists,
    TopicNotFound,
    TopicsMaxReached,
)
from store.metadata.log_records import GroupDelete, GroupPut, TopicDelete, TopicPut
from store.metadata.models import SubscriptionGroupRow, TopicConfigRow
from store.metadata.offsets import OffsetKey, check_offset_key, check_offset_target
from store.metadata.rules import (
    check_backoff,
    check_group_name,
    check_permission,
    check_queue_count,
    check_queue_count_cap,
    check_queue_counts,
    check_retry_times_max,
    check_topic_name,
)
from store.metadata.topics import NewTopic

_V = TypeVar("_V")


def create_topics(engine: Engine, new_topics: Sequence[NewTopic], *, now_ms: int,
                  topics_max: int | None, queues_per_topic_max: int) -> list[TopicPut]:
    """Every topic or none: TopicAlreadyExists (one exists or is named twice), TopicsMaxReached."""
    for topic in new_topics:
        check_topic_name(topic.name)
        for field, count in (("read_queue_count", topic.read_queue_count),
                             ("write_queue_count", topic.write_queue_count)):
            check_queue_count(field, count)
            check_queue_count_cap(field, count, queues_per_topic_max)
        check_queue_counts(topic.read_queue_count, topic.write_queue_count)
        check_permission(topic.permission)
    names = [topic.name for topic in new_topics]
    twice = [name for name, count in Counter(names).items() if count > 1]
    if twice:
        raise TopicAlreadyExists(f"topic {twice[0]!r} is named twice")
    with read_transaction(engine) as session:
        existing = session.exec(select(TopicConfigRow.name).where(
            col(TopicConfigRow.name).in_(names))).first()
        if existing is not None:
            raise TopicAlreadyExists(f"topic {existing!r} already exists")
        if topics_max is not None:
            count = session.exec(select(func.count()).select_from(TopicConfigRow)).one()
            if count + len(names) > topics_max:
                what = f"topic {names[0]!r}" if len(names) == 1 else f"{len(names)} topics"
                raise TopicsMaxReached(f"{what} not created: the broker holds {count} topics "
                                       f"and its topics_max setting is {topics_max}")
    return [TopicPut(topic.name, topic.read_queue_count, topic.write_queue_count,
                     int(topic.permission), now_ms, now_ms) for topic in new_topics]


def update_topic(engine: Engine, name: str, *, now_ms: int, read_queue_count: int | None,
                 write_queue_count: int | None, permission: int | None,
                 queues_per_topic_max: int) -> TopicPut | None:
    """The topic afterwards, or None when nothing would change; TopicNotFound."""
    check_topic_name(name)
    for field, count in (("read_queue_count", read_queue_count),
                         ("write_queue_count", write_queue_count)):
        if count is not None:
            check_queue_count(field, count)
            check_queue_count_cap(field, count, queues_per_topic_max)
    if permission is not None:
        check_permission(permission)
    with read_transaction(engine) as session:
        row = session.get(TopicConfigRow, name)
        if row is None:
            raise TopicNotFound(f"topic {name!r} does not exist")
        before = (row.read_queue_count, row.write_queue_count, row.permission)
        created_at_ms = row.created_at_ms
    read, write, perm = (old if new is None else int(new) for old, new in zip(
        before, (read_queue_count, write_queue_count, permission), strict=True))
    check_queue_counts(read, write)
    if (read, write, perm) == before:
        return None
    return TopicPut(name, read, write, perm, created_at_ms, now_ms)


def delete_topic(engine: Engine, name: str, *, now_ms: int) -> TopicDelete:
    check_topic_name(name)
    with read_transaction(engine) as session:
        if session.get(TopicConfigRow, name) is None:
            raise TopicNotFound(f"topic {name!r} does not exist")
    return TopicDelete(name, now_ms)


def _check_retry_queue_count(count: int, queues_per_topic_max: int | None) -> None:
    """The group's retry topics get `count` queues: within the broker's cap on a topic's
    queues, or a receive needing the retry topic would be refused for the group's setting."""
    check_queue_count("retry_queue_count", count, minimum=0)
    if queues_per_topic_max is not None and count > queues_per_topic_max:
        raise QueuesPerTopicMaxExceeded(
            f"retry_queue_count {count} is above this broker's queues_per_topic_max "
            f"({queues_per_topic_max}): the group's retry topics would have that many queues")


def create_group(engine: Engine, name: str, *, now_ms: int, consume_enabled: bool,
                 broadcast_enabled: bool, retry_queue_count: int,
                 retry_times_max: int, backoff: str = "", fifo: bool = False,
                 queues_per_topic_max: int | None = None) -> GroupPut:
    check_group_name(name)
    _check_retry_queue_count(retry_queue_count, queues_per_topic_max)
    check_retry_times_max(retry_times_max)
    check_backoff(backoff)
    with read_transaction(engine) as session:
        if session.get(SubscriptionGroupRow, name) is not None:
            raise GroupAlreadyExists(f"group {name!r} already exists")
    return GroupPut(name, consume_enabled, broadcast_enabled, retry_queue_count,
                    retry_times_max, now_ms, now_ms, backoff, fifo)


def update_group(engine: Engine, name: str, *, now_ms: int, consume_enabled: bool | None,
                 broadcast_enabled: bool | None, retry_queue_count: int | None,
                 retry_times_max: int | None, backoff: str | None = None,
                 fifo: bool | None = None,
                 queues_per_topic_max: int | None = None) -> GroupPut | None:
    """The group afterwards, or None when nothing would change; GroupNotFound. None keeps a
    field; a backoff of "" is the broker's default."""
    check_group_name(name)
    if retry_queue_count is not None:
        _check_retry_queue_count(retry_queue_count, queues_per_topic_max)
    if retry_times_max is not None:
        check_retry_times_max(retry_times_max)
    if backoff is not None:
        check_backoff(backoff)
    with read_transaction(engine) as session:
        row = session.get(SubscriptionGroupRow, name)
        if row is None:
            raise GroupNotFound(f"group {name!r} does not exist")
        after = GroupPut(
            name, _kept(consume_enabled, row.consume_enabled),
            _kept(broadcast_enabled, row.broadcast_enabled),
            _kept(retry_queue_count, row.retry_queue_count),
            _kept(retry_times_max, row.retry_times_max), row.created_at_ms, row.updated_at_ms,
            _kept(backoff, row.backoff), _kept(fifo, row.fifo))
        if after == GroupPut(name, row.consume_enabled, row.broadcast_enabled,
                             row.retry_queue_count, row.retry_times_max, row.created_at_ms,
                             row.updated_at_ms, row.backoff, row.fifo):
            return None
        return replace(after, updated_at_ms=now_ms)



def check_groups_max(engine: Engine, name: str, groups_max: int | None) -> None:
    if groups_max is None:
        return
    with read_transaction(engine) as session:
        count = session.exec(select(func.count()).select_from(SubscriptionGroupRow)).one()
    if count >= groups_max:
        raise GroupsMaxReached(f"group {name!r} not created: the broker holds {count} groups "
                               f"and its groups_max setting is {groups_max}")


def delete_group(engine: Engine, name: str, *, now_ms: int) -> GroupDelete:
    check_group_name(name)
    with read_transaction(engine) as session:
        if session.get(SubscriptionGroupRow, name) is None:
            raise GroupNotFound(f"group {name!r} does not exist")
    return GroupDelete(name, now_ms)


def check_offset(engine: Engine, key: OffsetKey) -> None:
    """The key's names and queue id, and that its group, topic and queue exist."""
    check_offset_key(key)
    with read_transaction(engine) as session:
        check_offset_target(session, key)


def _kept(new: _V | None, old: _V) -> _V:
    """An update's field: the new value, or the old one when none was given."""
    return old if new is None else new

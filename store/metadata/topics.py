"""Topic config repository: create, read, update, delete, and the produce-time check."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from store.metadata.changes import delete_row_and_offsets, update_row
from store.metadata.database import read_transaction, transaction
from store.metadata.errors import (
    TopicAlreadyExists,
    TopicNotFound,
    TopicNotWritable,
    TopicsMaxReached,
)
from store.metadata.models import READ_WRITE, ConsumerOffsetRow, TopicConfig, TopicConfigRow
from store.metadata.rules import (
    DEFAULT_QUEUE_COUNT,
    check_permission,
    check_queue_count,
    check_topic_name,
)
from store.metadata.versions import MetadataTable, bump_data_version


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    read_queue_count: int = DEFAULT_QUEUE_COUNT
    write_queue_count: int = DEFAULT_QUEUE_COUNT
    permission: int = READ_WRITE


def create_topic(
    *,
    engine: Engine,
    name: str,
    now_ms: int,
    read_queue_count: int = DEFAULT_QUEUE_COUNT,
    write_queue_count: int = DEFAULT_QUEUE_COUNT,
    permission: int = READ_WRITE,
    topics_max: int | None = None,
) -> TopicConfig:
    """Create a topic; TopicAlreadyExists when it exists, TopicsMaxReached when `topics_max`
    topics exist already (counted in the same transaction as the insert)."""
    topic = NewTopic(name, read_queue_count, write_queue_count, permission)
    return create_topics(engine=engine, topics=[topic], now_ms=now_ms, topics_max=topics_max)[0]


def create_topics(
    *,
    engine: Engine,
    topics: Sequence[NewTopic],
    now_ms: int,
    topics_max: int | None = None,
) -> list[TopicConfig]:
    """Create every topic in one transaction, or none: TopicAlreadyExists when one exists
    (or is named twice), TopicsMaxReached when they would take the count past `topics_max`."""
    rows = [_new_row(topic, now_ms) for topic in topics]
    names = [row.name for row in rows]
    try:
        with transaction(engine) as session:
            _check_absent(session, names)
            _check_topics_max(session, names, topics_max)
            session.add_all(rows)
            session.flush()
            bump_data_version(session, MetadataTable.TOPIC_CONFIG, now_ms=now_ms)
    except IntegrityError as error:
        # Another connection created one between our check and our insert.
        raise TopicAlreadyExists(f"topic {names[0]!r} already exists" if len(names) == 1
                                 else "one of the topics already exists") from error
    return [_public(row) for row in rows]


def _new_row(topic: NewTopic, now_ms: int) -> TopicConfigRow:
    check_topic_name(topic.name)
    check_queue_count("read_queue_count", topic.read_queue_count)
    check_queue_count("write_queue_count", topic.write_queue_count)
    check_permission(topic.permission)
    return TopicConfigRow(
        name=topic.name,
        read_queue_count=topic.read_queue_count,
        write_queue_count=topic.write_queue_count,
        permission=int(topic.permission),
        created_at_ms=now_ms,
        updated_at_ms=now_ms,
    )


def _check_absent(session: Session, names: list[str]) -> None:
    if len(names) == 1:
        existing = [names[0]] if session.get(TopicConfigRow, names[0]) is not None else []
    else:
        twice = [name for name, count in Counter(names).items() if count > 1]
        if twice:
            raise TopicAlreadyExists(f"topic {twice[0]!r} is named twice")
        existing = list(session.exec(select(TopicConfigRow.name).where(
            col(TopicConfigRow.name).in_(names))).all())
    if existing:
        raise TopicAlreadyExists(f"topic {existing[0]!r} already exists")


def _check_topics_max(session: Session, names: list[str], topics_max: int | None) -> None:
    if topics_max is None:
        return
    count = session.exec(select(func.count()).select_from(TopicConfigRow)).one()
    if count + len(names) > topics_max:
        what = f"topic {names[0]!r}" if len(names) == 1 else f"{len(names)} topics"
        raise TopicsMaxReached(
            f"{what} not created: the broker holds {count} topics and its topics_max"
            f" setting is {topics_max}"
        )


def find_topic(*, engine: Engine, name: str) -> TopicConfig | None:
    check_topic_name(name)
    with read_transaction(engine) as session:
        row = session.get(TopicConfigRow, name)
        return None if row is None else _public(row)


def get_topic(*, engine: Engine, name: str) -> TopicConfig:
    topic = find_topic(engine=engine, name=name)
    if topic is None:
        raise TopicNotFound(f"topic {name!r} does not exist")
    return topic


def list_topics(*, engine: Engine) -> list[TopicConfig]:
    """Every topic, ordered by name."""
    with read_transaction(engine) as session:
        rows = session.exec(select(TopicConfigRow).order_by(col(TopicConfigRow.name))).all()
        return [_public(row) for row in rows]


def update_topic(
    *,
    engine: Engine,
    name: str,
    now_ms: int,
    read_queue_count: int | None = None,
    write_queue_count: int | None = None,
    permission: int | None = None,
) -> TopicConfig:
    """Change the given fields (None keeps a field); identical values write nothing."""
    check_topic_name(name)
    if read_queue_count is not None:
        check_queue_count("read_queue_count", read_queue_count)
    if write_queue_count is not None:
        check_queue_count("write_queue_count", write_queue_count)
    if permission is not None:
        check_permission(permission)
    with transaction(engine) as session:
        row = _get_row(session, name)
        changes = {
            "read_queue_count": read_queue_count,
            "write_queue_count": write_queue_count,
            "permission": None if permission is None else int(permission),
        }
        update_row(session, row, MetadataTable.TOPIC_CONFIG, changes, now_ms=now_ms)
        return _public(row)


def delete_topic(*, engine: Engine, name: str, now_ms: int) -> None:
    """Delete a topic and the consumer offsets kept for it."""
    check_topic_name(name)
    with transaction(engine) as session:
        delete_row_and_offsets(session, _get_row(session, name), MetadataTable.TOPIC_CONFIG,
                               col(ConsumerOffsetRow.topic) == name, now_ms=now_ms)


def ensure_writable_topic(
    *,
    engine: Engine,
    name: str,
    auto_create_topics: bool,
    now_ms: int,
    default_queue_count: int = DEFAULT_QUEUE_COUNT,
    topics_max: int | None = None,
) -> TopicConfig:
    """The config of a topic a producer may write to, creating it on first produce if allowed.

    Raises InvalidTopicName, TopicNotFound (absent and auto-creation off), TopicsMaxReached
    or TopicNotWritable.
    """
    topic = find_or_create_topic(
        engine=engine,
        name=name,
        auto_create_topics=auto_create_topics,
        now_ms=now_ms,
        default_queue_count=default_queue_count,
        topics_max=topics_max,
    )
    check_writable(topic)
    return topic


def find_or_create_topic(
    *,
    engine: Engine,
    name: str,
    auto_create_topics: bool,
    now_ms: int,
    default_queue_count: int = DEFAULT_QUEUE_COUNT,
    topics_max: int | None = None,
) -> TopicConfig:
    """A topic's config; an absent topic is created (read + write) when auto-creation is on
    and fewer than `topics_max` topics exist."""
    topic = find_topic(engine=engine, name=name)
    if topic is not None:
        return topic
    if not auto_create_topics:
        raise TopicNotFound(f"topic {name!r} does not exist and auto_create_topics is off")
    try:
        return create_topic(
            engine=engine,
            name=name,
            now_ms=now_ms,
            read_queue_count=default_queue_count,
            write_queue_count=default_queue_count,
            topics_max=topics_max,
        )
    except TopicAlreadyExists:
        # A concurrent produce created it first; use theirs.
        return get_topic(engine=engine, name=name)


def check_writable(topic: TopicConfig) -> None:
    if not topic.writable:
        raise TopicNotWritable(
            f"topic {topic.name!r} does not allow writes (permission {topic.permission})"
        )


def _get_row(session: Session, name: str) -> TopicConfigRow:
    row = session.get(TopicConfigRow, name)
    if row is None:
        raise TopicNotFound(f"topic {name!r} does not exist")
    return row


def _public(row: TopicConfigRow) -> TopicConfig:
    return TopicConfig.model_validate(row, from_attributes=True)

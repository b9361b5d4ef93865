"""Topic config repository: create, read, update, delete, and the produce-time check."""

from __future__ import annotations

from sqlalchemy import Engine, delete
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from store.metadata.database import execute_delete, transaction
from store.metadata.errors import TopicAlreadyExists, TopicNotFound, TopicNotWritable
from store.metadata.models import READ_WRITE, ConsumerOffsetRow, TopicConfig, TopicConfigRow
from store.metadata.rules import (
    DEFAULT_QUEUE_COUNT,
    check_permission,
    check_queue_count,
    check_topic_name,
)
from store.metadata.versions import MetadataTable, bump_data_version


def create_topic(
    *,
    engine: Engine,
    name: str,
    now_ms: int,
    read_queue_count: int = DEFAULT_QUEUE_COUNT,
    write_queue_count: int = DEFAULT_QUEUE_COUNT,
    permission: int = READ_WRITE,
) -> TopicConfig:
    """Create a topic; TopicAlreadyExists when it exists."""
    check_topic_name(name)
    check_queue_count("read_queue_count", read_queue_count)
    check_queue_count("write_queue_count", write_queue_count)
    check_permission(permission)
    row = TopicConfigRow(
        name=name,
        read_queue_count=read_queue_count,
        write_queue_count=write_queue_count,
        permission=int(permission),
        created_at_ms=now_ms,
        updated_at_ms=now_ms,
    )
    try:
        with transaction(engine) as session:
            if session.get(TopicConfigRow, name) is not None:
                raise TopicAlreadyExists(f"topic {name!r} already exists")
            session.add(row)
            session.flush()
            bump_data_version(session, MetadataTable.TOPIC_CONFIG, now_ms=now_ms)
    except IntegrityError as error:
        # Another connection created it between our check and our insert.
        raise TopicAlreadyExists(f"topic {name!r} already exists") from error
    return _public(row)


def find_topic(*, engine: Engine, name: str) -> TopicConfig | None:
    check_topic_name(name)
    with transaction(engine) as session:
        row = session.get(TopicConfigRow, name)
        return None if row is None else _public(row)


def get_topic(*, engine: Engine, name: str) -> TopicConfig:
    topic = find_topic(engine=engine, name=name)
    if topic is None:
        raise TopicNotFound(f"topic {name!r} does not exist")
    return topic


def list_topics(*, engine: Engine) -> list[TopicConfig]:
    """Every topic, ordered by name."""
    with transaction(engine) as session:
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
        changed = False
        for field, value in changes.items():
            if value is not None and getattr(row, field) != value:
                setattr(row, field, value)
                changed = True
        if changed:
            row.updated_at_ms = now_ms
            bump_data_version(session, MetadataTable.TOPIC_CONFIG, now_ms=now_ms)
        return _public(row)


def delete_topic(*, engine: Engine, name: str, now_ms: int) -> None:
    """Delete a topic and the consumer offsets kept for it."""
    check_topic_name(name)
    with transaction(engine) as session:
        session.delete(_get_row(session, name))
        removed_count = execute_delete(
            session, delete(ConsumerOffsetRow).where(col(ConsumerOffsetRow.topic) == name)
        )
        bump_data_version(session, MetadataTable.TOPIC_CONFIG, now_ms=now_ms)
        if removed_count:
            bump_data_version(session, MetadataTable.CONSUMER_OFFSET, now_ms=now_ms)


def ensure_writable_topic(
    *,
    engine: Engine,
    name: str,
    auto_create_topics: bool,
    now_ms: int,
    default_queue_count: int = DEFAULT_QUEUE_COUNT,
) -> TopicConfig:
    """The config of a topic a producer may write to, creating it on first produce if allowed.

    Raises InvalidTopicName, TopicNotFound (absent and auto-creation off) or TopicNotWritable.
    """
    topic = find_or_create_topic(
        engine=engine,
        name=name,
        auto_create_topics=auto_create_topics,
        now_ms=now_ms,
        default_queue_count=default_queue_count,
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
) -> TopicConfig:
    """A topic's config; an absent topic is created (read + write) when auto-creation is on."""
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

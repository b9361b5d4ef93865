"""Topic config repository on a real SQLite file."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from store.metadata import (
    DEFAULT_QUEUE_COUNT,
    QUEUE_COUNT_MAX,
    READ_WRITE,
    InvalidPermission,
    InvalidQueueCount,
    InvalidTopicName,
    MetadataTable,
    TopicAlreadyExists,
    TopicNotFound,
    TopicNotWritable,
    TopicPermission,
    commit_consumer_offset,
    create_group,
    create_topic,
    delete_topic,
    ensure_writable_topic,
    find_topic,
    get_consumer_offset,
    get_data_version,
    get_topic,
    list_topics,
    update_topic,
)
from tests.support.metadata import FakeClock, database_snapshot


def test_create_and_get_topic(engine: Engine, clock: FakeClock) -> None:
    """A created topic reads back with its queue counts, permission and times."""
    created = create_topic(
        engine=engine, name="orders", now_ms=clock(), read_queue_count=8, write_queue_count=2
    )
    fetched = get_topic(engine=engine, name="orders")
    assert fetched == created
    assert (fetched.read_queue_count, fetched.write_queue_count) == (8, 2)
    assert fetched.permission == READ_WRITE and fetched.readable and fetched.writable
    assert fetched.created_at_ms == fetched.updated_at_ms == clock()


def test_create_topic_defaults_to_four_queues(engine: Engine, clock: FakeClock) -> None:
    """Without queue counts a topic gets RocketMQ's default of 4 read and 4 write queues."""
    topic = create_topic(engine=engine, name="t", now_ms=clock())
    assert topic.read_queue_count == topic.write_queue_count == DEFAULT_QUEUE_COUNT == 4


def test_create_existing_topic_is_refused(engine: Engine, clock: FakeClock) -> None:
    """Creating a topic twice raises TopicAlreadyExists and leaves the first one as it was."""
    create_topic(engine=engine, name="t", now_ms=clock(), read_queue_count=3)
    before = database_snapshot(engine)
    with pytest.raises(TopicAlreadyExists, match="'t' already exists"):
        create_topic(engine=engine, name="t", now_ms=clock.advance(), read_queue_count=5)
    assert database_snapshot(engine) == before


def test_find_list_and_missing_topics(engine: Engine, clock: FakeClock) -> None:
    """find_topic returns None and get_topic raises for a missing topic; list is by name."""
    for name in ("b", "a", "c"):
        create_topic(engine=engine, name=name, now_ms=clock())
    assert [topic.name for topic in list_topics(engine=engine)] == ["a", "b", "c"]
    assert find_topic(engine=engine, name="zz") is None
    with pytest.raises(TopicNotFound, match="'zz' does not exist"):
        get_topic(engine=engine, name="zz")


def test_update_topic_changes_given_fields_only(engine: Engine, clock: FakeClock) -> None:
    """update_topic changes the fields given, keeps the others and sets updated_at_ms."""
    create_topic(engine=engine, name="t", now_ms=clock())
    updated = update_topic(
        engine=engine,
        name="t",
        now_ms=clock.advance(),
        write_queue_count=16,
        permission=TopicPermission.READ,
    )
    assert (updated.read_queue_count, updated.write_queue_count) == (4, 16)
    assert updated.readable and not updated.writable
    assert updated.updated_at_ms == clock() and updated.created_at_ms == clock() - 1
    assert get_topic(engine=engine, name="t") == updated


def test_update_missing_topic_is_refused(engine: Engine, clock: FakeClock) -> None:
    """Updating a topic that does not exist raises TopicNotFound."""
    with pytest.raises(TopicNotFound):
        update_topic(engine=engine, name="nope", now_ms=clock(), read_queue_count=2)


def test_topic_version_bumps_on_change_only(engine: Engine, clock: FakeClock) -> None:
    """Each change bumps the topic data version once; an identical update does not."""
    table = MetadataTable.TOPIC_CONFIG
    assert get_data_version(engine=engine, table=table).counter == 0
    create_topic(engine=engine, name="t", now_ms=clock.advance())
    assert get_data_version(engine=engine, table=table).counter == 1
    update_topic(engine=engine, name="t", now_ms=clock.advance(), read_queue_count=4)
    update_topic(engine=engine, name="t", now_ms=clock.advance(), permission=READ_WRITE)
    unchanged = get_data_version(engine=engine, table=table)
    assert (unchanged.counter, unchanged.timestamp_ms) == (1, clock() - 2)
    assert get_topic(engine=engine, name="t").updated_at_ms == clock() - 2
    update_topic(engine=engine, name="t", now_ms=clock.advance(), read_queue_count=5)
    assert get_data_version(engine=engine, table=table).counter == 2
    delete_topic(engine=engine, name="t", now_ms=clock.advance())
    bumped = get_data_version(engine=engine, table=table)
    assert (bumped.counter, bumped.timestamp_ms) == (3, clock())


def test_delete_topic_removes_its_consumer_offsets(engine: Engine, clock: FakeClock) -> None:
    """Deleting a topic deletes it and the offsets groups kept for it, bumping both versions."""
    create_topic(engine=engine, name="t", now_ms=clock())
    create_topic(engine=engine, name="keep", now_ms=clock())
    create_group(engine=engine, name="g", now_ms=clock())
    for topic in ("t", "keep"):
        commit_consumer_offset(
            engine=engine, group_name="g", topic=topic, queue_id=0, queue_offset=3, now_ms=clock()
        )
    offsets_version = get_data_version(engine=engine, table=MetadataTable.CONSUMER_OFFSET)
    delete_topic(engine=engine, name="t", now_ms=clock.advance())
    assert find_topic(engine=engine, name="t") is None
    assert get_consumer_offset(engine=engine, group_name="g", topic="t", queue_id=0) is None
    kept = get_consumer_offset(engine=engine, group_name="g", topic="keep", queue_id=0)
    assert kept is not None and kept.queue_offset == 3
    after = get_data_version(engine=engine, table=MetadataTable.CONSUMER_OFFSET)
    assert after.counter == offsets_version.counter + 1
    with pytest.raises(TopicNotFound):
        delete_topic(engine=engine, name="t", now_ms=clock())


def test_ensure_writable_topic_auto_creates(engine: Engine, clock: FakeClock) -> None:
    """On first produce with auto-creation on, a topic is created with the default queues."""
    topic = ensure_writable_topic(
        engine=engine, name="new", auto_create_topics=True, now_ms=clock(), default_queue_count=4
    )
    assert (topic.read_queue_count, topic.write_queue_count, topic.permission) == (4, 4, 6)
    assert get_topic(engine=engine, name="new") == topic
    again = ensure_writable_topic(
        engine=engine, name="new", auto_create_topics=True, now_ms=clock.advance()
    )
    assert again == topic
    assert get_data_version(engine=engine, table=MetadataTable.TOPIC_CONFIG).counter == 1


def test_ensure_writable_topic_without_auto_create(engine: Engine, clock: FakeClock) -> None:
    """With auto-creation off an unknown topic is refused with TopicNotFound and not created."""
    with pytest.raises(TopicNotFound, match="auto_create_topics is off"):
        ensure_writable_topic(engine=engine, name="new", auto_create_topics=False, now_ms=clock())
    assert list_topics(engine=engine) == []


def test_ensure_writable_topic_refuses_read_only_topic(engine: Engine, clock: FakeClock) -> None:
    """A topic without write permission refuses puts with TopicNotWritable naming the topic."""
    create_topic(engine=engine, name="ro", now_ms=clock(), permission=TopicPermission.READ)
    with pytest.raises(TopicNotWritable, match="'ro' does not allow writes"):
        ensure_writable_topic(engine=engine, name="ro", auto_create_topics=True, now_ms=clock())


@pytest.mark.parametrize("name", ["", "a b", "topic/1", "é", "x" * 128])
def test_invalid_topic_names_are_refused(engine: Engine, clock: FakeClock, name: str) -> None:
    """Names the store's topic rule rejects are refused by every topic function, writing nothing."""
    before = database_snapshot(engine)
    with pytest.raises(InvalidTopicName, match="invalid topic name"):
        create_topic(engine=engine, name=name, now_ms=clock())
    with pytest.raises(InvalidTopicName):
        ensure_writable_topic(engine=engine, name=name, auto_create_topics=True, now_ms=clock())
    with pytest.raises(InvalidTopicName):
        find_topic(engine=engine, name=name)
    with pytest.raises(InvalidTopicName):
        update_topic(engine=engine, name=name, now_ms=clock(), read_queue_count=1)
    assert database_snapshot(engine) == before


@pytest.mark.parametrize("count", [-1, 0, QUEUE_COUNT_MAX + 1])
def test_bad_queue_counts_are_refused(engine: Engine, clock: FakeClock, count: int) -> None:
    """Negative, zero and oversized queue counts raise InvalidQueueCount and write nothing."""
    create_topic(engine=engine, name="t", now_ms=clock())
    before = database_snapshot(engine)
    with pytest.raises(InvalidQueueCount, match="read_queue_count must be between 1 and"):
        create_topic(engine=engine, name="u", now_ms=clock(), read_queue_count=count)
    with pytest.raises(InvalidQueueCount, match="write_queue_count"):
        update_topic(engine=engine, name="t", now_ms=clock(), write_queue_count=count)
    assert database_snapshot(engine) == before


def test_bad_permission_is_refused(engine: Engine, clock: FakeClock) -> None:
    """Permission bits other than READ and WRITE raise InvalidPermission and write nothing."""
    before = database_snapshot(engine)
    for permission in (-1, 1, 8, 7):
        with pytest.raises(InvalidPermission):
            create_topic(engine=engine, name="t", now_ms=clock(), permission=permission)
    assert database_snapshot(engine) == before

"""Consumer offset repository functions (the database side) on a real SQLite file."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from store.metadata import (
    ConsumerOffset,
    GroupNotFound,
    InvalidOffset,
    InvalidQueueId,
    InvalidTopicName,
    MetadataTable,
    OffsetMovesBackwards,
    TopicNotFound,
    commit_consumer_offset,
    create_group,
    create_topic,
    get_consumer_offset,
    get_data_version,
    list_consumer_offsets,
    persist_consumer_offsets,
    reset_consumer_offset,
)
from tests.support.metadata import FakeClock, database_snapshot


@pytest.fixture
def engine_with_group(engine: Engine, clock: FakeClock) -> Engine:
    create_topic(engine=engine, name="t", now_ms=clock(), read_queue_count=4)
    create_topic(engine=engine, name="u", now_ms=clock(), read_queue_count=2)
    create_group(engine=engine, name="g", now_ms=clock())
    create_group(engine=engine, name="h", now_ms=clock())
    return engine


def _commit(
    engine: Engine,
    clock: FakeClock,
    queue_offset: int,
    *,
    group_name: str = "g",
    topic: str = "t",
    queue_id: int = 0,
) -> bool:
    return commit_consumer_offset(
        engine=engine,
        group_name=group_name,
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        now_ms=clock(),
    )


def test_commit_and_get_offset(engine_with_group: Engine, clock: FakeClock) -> None:
    """A committed offset reads back with its commit time; an uncommitted one is None."""
    engine = engine_with_group
    assert get_consumer_offset(engine=engine, group_name="g", topic="t", queue_id=0) is None
    assert _commit(engine, clock, 10)
    assert get_consumer_offset(engine=engine, group_name="g", topic="t", queue_id=0) == (
        ConsumerOffset(
            group_name="g", topic="t", queue_id=0, queue_offset=10, updated_at_ms=clock()
        )
    )


def test_commit_forward_and_same_offset(engine_with_group: Engine, clock: FakeClock) -> None:
    """Commits move forward and bump the version; the same offset again changes nothing."""
    engine = engine_with_group
    table = MetadataTable.CONSUMER_OFFSET
    _commit(engine, clock, 5)
    clock.advance()
    assert _commit(engine, clock, 7)
    assert get_data_version(engine=engine, table=table).counter == 2
    clock.advance()
    assert not _commit(engine, clock, 7)
    assert get_data_version(engine=engine, table=table).counter == 2
    stored = get_consumer_offset(engine=engine, group_name="g", topic="t", queue_id=0)
    assert stored is not None and stored.updated_at_ms == clock() - 1


def test_commit_backwards_is_refused_reset_is_allowed(
    engine_with_group: Engine, clock: FakeClock
) -> None:
    """A commit below the stored offset raises OffsetMovesBackwards; a reset moves it back."""
    engine = engine_with_group
    _commit(engine, clock, 50)
    before = database_snapshot(engine)
    with pytest.raises(OffsetMovesBackwards, match="backwards from 50 to 49; reset"):
        _commit(engine, clock, 49)
    assert database_snapshot(engine) == before
    assert reset_consumer_offset(
        engine=engine, group_name="g", topic="t", queue_id=0, queue_offset=3, now_ms=clock()
    )
    stored = get_consumer_offset(engine=engine, group_name="g", topic="t", queue_id=0)
    assert stored is not None and stored.queue_offset == 3


def test_list_offsets_filters_by_group_and_topic(
    engine_with_group: Engine, clock: FakeClock
) -> None:
    """list_consumer_offsets returns all offsets in key order, or those of a group or topic."""
    engine = engine_with_group
    _commit(engine, clock, 1, group_name="h", topic="u", queue_id=1)
    _commit(engine, clock, 2, group_name="g", topic="t", queue_id=3)
    _commit(engine, clock, 3, group_name="g", topic="u", queue_id=0)
    keys = [(o.group_name, o.topic, o.queue_id) for o in list_consumer_offsets(engine=engine)]
    assert keys == [("g", "t", 3), ("g", "u", 0), ("h", "u", 1)]
    assert [o.queue_offset for o in list_consumer_offsets(engine=engine, group_name="g")] == [2, 3]
    assert [o.queue_offset for o in list_consumer_offsets(engine=engine, topic="u")] == [3, 1]
    both = list_consumer_offsets(engine=engine, group_name="h", topic="t")
    assert both == []


def test_persist_batch_bumps_version_once(engine_with_group: Engine, clock: FakeClock) -> None:
    """A persisted batch writes every offset (any direction) and bumps the version once."""
    engine = engine_with_group
    _commit(engine, clock, 100)
    batch = [
        ConsumerOffset(group_name="g", topic="t", queue_id=0, queue_offset=90, updated_at_ms=5),
        ConsumerOffset(group_name="g", topic="t", queue_id=1, queue_offset=7, updated_at_ms=6),
    ]
    assert persist_consumer_offsets(engine=engine, offsets=batch, now_ms=clock.advance()) == 2
    assert list_consumer_offsets(engine=engine) == batch
    version = get_data_version(engine=engine, table=MetadataTable.CONSUMER_OFFSET)
    assert (version.counter, version.timestamp_ms) == (2, clock())
    assert persist_consumer_offsets(engine=engine, offsets=batch, now_ms=clock.advance()) == 0
    assert get_data_version(engine=engine, table=MetadataTable.CONSUMER_OFFSET).counter == 2


def test_unknown_group_topic_or_queue_is_refused(
    engine_with_group: Engine, clock: FakeClock
) -> None:
    """Commits for unknown groups, topics or queues beyond the read queues write nothing."""
    engine = engine_with_group
    before = database_snapshot(engine)
    with pytest.raises(GroupNotFound, match="'nobody' does not exist"):
        _commit(engine, clock, 1, group_name="nobody")
    with pytest.raises(TopicNotFound, match="'nothing' does not exist"):
        _commit(engine, clock, 1, topic="nothing")
    with pytest.raises(InvalidQueueId, match="not a read queue of topic 'u'"):
        _commit(engine, clock, 1, topic="u", queue_id=2)
    with pytest.raises(InvalidQueueId, match="queue_id must be between 0 and"):
        _commit(engine, clock, 1, queue_id=-1)
    with pytest.raises(InvalidTopicName):
        _commit(engine, clock, 1, topic="bad topic")
    assert database_snapshot(engine) == before


@pytest.mark.parametrize("queue_offset", [-1, -(2**40), 2**53])
def test_offsets_out_of_range_are_refused(
    engine_with_group: Engine, clock: FakeClock, queue_offset: int
) -> None:
    """Offsets below zero (or past 2^53) raise InvalidOffset for commit and reset alike."""
    engine = engine_with_group
    before = database_snapshot(engine)
    with pytest.raises(InvalidOffset, match="offset must be between 0 and 2\\^53 - 1"):
        _commit(engine, clock, queue_offset)
    with pytest.raises(InvalidOffset):
        reset_consumer_offset(
            engine=engine,
            group_name="g",
            topic="t",
            queue_id=0,
            queue_offset=queue_offset,
            now_ms=clock(),
        )
    assert database_snapshot(engine) == before

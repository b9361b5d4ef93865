"""Subscription group repository on a real SQLite file."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from store.metadata import (
    GroupAlreadyExists,
    GroupNotFound,
    InvalidGroupName,
    InvalidQueueCount,
    InvalidRetryTimes,
    MetadataTable,
    commit_consumer_offset,
    create_group,
    create_topic,
    delete_group,
    find_group,
    get_consumer_offset,
    get_data_version,
    get_group,
    list_groups,
    update_group,
)
from tests.support.metadata import FakeClock, database_snapshot


def test_create_and_get_group(engine: Engine, clock: FakeClock) -> None:
    """A created group reads back with RocketMQ's defaults unless told otherwise."""
    created = create_group(engine=engine, name="billing", now_ms=clock())
    assert get_group(engine=engine, name="billing") == created
    assert created.consume_enabled and not created.broadcast_enabled
    assert (created.retry_queue_count, created.retry_times_max) == (1, 16)
    custom = create_group(
        engine=engine,
        name="audit",
        now_ms=clock(),
        consume_enabled=False,
        broadcast_enabled=True,
        retry_queue_count=0,
        retry_times_max=3,
    )
    assert get_group(engine=engine, name="audit") == custom
    assert [group.name for group in list_groups(engine=engine)] == ["audit", "billing"]


def test_create_existing_group_is_refused(engine: Engine, clock: FakeClock) -> None:
    """Creating a group twice raises GroupAlreadyExists and writes nothing."""
    create_group(engine=engine, name="g", now_ms=clock())
    before = database_snapshot(engine)
    with pytest.raises(GroupAlreadyExists, match="'g' already exists"):
        create_group(engine=engine, name="g", now_ms=clock.advance(), retry_times_max=1)
    assert database_snapshot(engine) == before


def test_unknown_group_is_refused(engine: Engine, clock: FakeClock) -> None:
    """get, update and delete of an unknown group raise GroupNotFound; find returns None."""
    assert find_group(engine=engine, name="ghost") is None
    with pytest.raises(GroupNotFound, match="'ghost' does not exist"):
        get_group(engine=engine, name="ghost")
    with pytest.raises(GroupNotFound):
        update_group(engine=engine, name="ghost", now_ms=clock(), consume_enabled=False)
    with pytest.raises(GroupNotFound):
        delete_group(engine=engine, name="ghost", now_ms=clock())


def test_group_version_bumps_on_change_only(engine: Engine, clock: FakeClock) -> None:
    """Group changes bump the group data version; an update with identical values does not."""
    table = MetadataTable.SUBSCRIPTION_GROUP
    create_group(engine=engine, name="g", now_ms=clock.advance())
    same = update_group(
        engine=engine, name="g", now_ms=clock.advance(), consume_enabled=True, retry_times_max=16
    )
    assert same.updated_at_ms == clock() - 1
    assert get_data_version(engine=engine, table=table).counter == 1
    changed = update_group(engine=engine, name="g", now_ms=clock.advance(), broadcast_enabled=True)
    assert changed.broadcast_enabled and changed.updated_at_ms == clock()
    version = get_data_version(engine=engine, table=table)
    assert (version.counter, version.timestamp_ms) == (2, clock())


def test_delete_group_removes_its_offsets(engine: Engine, clock: FakeClock) -> None:
    """Deleting a group removes it and its consumer offsets, and bumps both versions."""
    create_topic(engine=engine, name="t", now_ms=clock())
    create_group(engine=engine, name="g", now_ms=clock())
    commit_consumer_offset(
        engine=engine, group_name="g", topic="t", queue_id=1, queue_offset=9, now_ms=clock()
    )
    delete_group(engine=engine, name="g", now_ms=clock.advance())
    assert find_group(engine=engine, name="g") is None
    assert get_consumer_offset(engine=engine, group_name="g", topic="t", queue_id=1) is None
    assert get_data_version(engine=engine, table=MetadataTable.SUBSCRIPTION_GROUP).counter == 2
    assert get_data_version(engine=engine, table=MetadataTable.CONSUMER_OFFSET).counter == 2


@pytest.mark.parametrize("name", ["", "a b", "g/1", "x" * 256])
def test_invalid_group_names_are_refused(engine: Engine, clock: FakeClock, name: str) -> None:
    """Group names outside RocketMQ's rule raise InvalidGroupName and write nothing."""
    before = database_snapshot(engine)
    with pytest.raises(InvalidGroupName, match="invalid group name"):
        create_group(engine=engine, name=name, now_ms=clock())
    with pytest.raises(InvalidGroupName):
        find_group(engine=engine, name=name)
    assert database_snapshot(engine) == before


def test_bad_retry_settings_are_refused(engine: Engine, clock: FakeClock) -> None:
    """Negative retry queue counts or retry times raise clear errors and write nothing."""
    create_group(engine=engine, name="g", now_ms=clock())
    before = database_snapshot(engine)
    with pytest.raises(InvalidQueueCount, match="retry_queue_count must be between 0 and"):
        create_group(engine=engine, name="h", now_ms=clock(), retry_queue_count=-1)
    with pytest.raises(InvalidRetryTimes, match="retry_times_max must be between 0 and"):
        update_group(engine=engine, name="g", now_ms=clock(), retry_times_max=-2)
    assert database_snapshot(engine) == before

"""The MetadataStore facade: lifecycle, batched offsets across restarts, caching, slave sync."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from store.metadata import (
    GroupNotFound,
    InvalidBackoff,
    InvalidOffset,
    InvalidQueueCount,
    MetadataStore,
    MetadataStoreState,
    MetadataStoreStateError,
    MetadataTable,
    OffsetMovesBackwards,
    TopicNotFound,
    TopicNotWritable,
    TopicPermission,
    create_metadata_engine,
    get_consumer_offset,
    get_data_version,
)
from tests.support.metadata import FakeClock, fresh_database_url

OpenStore = Callable[..., MetadataStore]
DEADLINE_S = 5.0


@pytest.fixture
def open_store(database_url: str, clock: FakeClock) -> Iterator[OpenStore]:
    """Opens MetadataStores on this test's database file; stops them all at the end."""
    opened: list[MetadataStore] = []

    def open_store(
        *,
        auto_create_topics: bool = True,
        default_queue_count: int = 4,
        consumer_offset_persist_interval_ms: int = 5000,
    ) -> MetadataStore:
        store = MetadataStore(
            database_url,
            auto_create_topics=auto_create_topics,
            default_queue_count=default_queue_count,
            consumer_offset_persist_interval_ms=consumer_offset_persist_interval_ms,
            clock_ms=clock,
        )
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.stop()


def _stored_offset(database_url: str, queue_id: int = 0) -> int | None:
    """What the database holds, read beside the store (not through its memory)."""
    engine = create_metadata_engine(database_url)
    try:
        offset = get_consumer_offset(engine=engine, group_name="g", topic="t", queue_id=queue_id)
        return None if offset is None else offset.queue_offset
    finally:
        engine.dispose()


def _wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.01)


def _with_topic_and_group(store: MetadataStore) -> MetadataStore:
    store.create_topic(name="t")
    store.create_group(name="g")
    return store


def test_lifecycle_misuse_is_a_clear_error(open_store: OpenStore) -> None:
    """Starting twice or using a stopped store is a MetadataStoreStateError; stop twice is fine."""
    store = open_store()
    assert store.state is MetadataStoreState.CREATED
    store.start()
    with pytest.raises(
        MetadataStoreStateError, match="cannot start a MetadataStore that is running"
    ):
        store.start()
    store.stop()
    store.stop()
    assert store.state.value == "stopped"
    with pytest.raises(MetadataStoreStateError, match="stopped"):
        store.list_topics()
    with pytest.raises(MetadataStoreStateError):
        store.start()


def test_settings_are_validated(database_url: str) -> None:
    """Bad settings fail at construction with the setting's name in the message."""
    with pytest.raises(ValueError, match="consumer_offset_persist_interval_ms must be positive"):
        MetadataStore(database_url, consumer_offset_persist_interval_ms=0)
    with pytest.raises(InvalidQueueCount, match="default_queue_count"):
        MetadataStore(database_url, default_queue_count=0)


def test_offsets_survive_restart(open_store: OpenStore, database_url: str) -> None:
    """Commits live in memory until stop() flushes them; a reopened store has them all."""
    store = _with_topic_and_group(open_store())
    store.start()
    for queue_id in range(4):
        assert store.commit_consumer_offset(
            group_name="g", topic="t", queue_id=queue_id, queue_offset=10 + queue_id
        )
    # The interval is 5 s: nothing has been written yet, but reads see the commits.
    assert _stored_offset(database_url) is None
    assert store.get_consumer_offset(group_name="g", topic="t", queue_id=3) == 13
    store.stop()
    assert _stored_offset(database_url, queue_id=3) == 13
    reopened = open_store()
    assert [o.queue_offset for o in reopened.list_consumer_offsets(group_name="g")] == [
        10,
        11,
        12,
        13,
    ]
    with pytest.raises(OffsetMovesBackwards):
        reopened.commit_consumer_offset(group_name="g", topic="t", queue_id=0, queue_offset=9)


def test_persister_writes_on_its_interval(open_store: OpenStore, database_url: str) -> None:
    """The persister thread writes pending offsets every interval, bumping the version."""
    store = _with_topic_and_group(open_store(consumer_offset_persist_interval_ms=20))
    store.start()
    store.commit_consumer_offset(group_name="g", topic="t", queue_id=0, queue_offset=5)
    _wait_until(lambda: _stored_offset(database_url) == 5)
    assert store.pending_consumer_offset_count == 0
    assert store.data_version(MetadataTable.CONSUMER_OFFSET).counter == 1


def test_commit_rules(open_store: OpenStore) -> None:
    """Commits refuse unknown groups, negative and backward offsets; an equal one is a no-op."""
    store = _with_topic_and_group(open_store())
    with pytest.raises(GroupNotFound):
        store.commit_consumer_offset(group_name="x", topic="t", queue_id=0, queue_offset=1)
    with pytest.raises(TopicNotFound):
        store.commit_consumer_offset(group_name="g", topic="x", queue_id=0, queue_offset=1)
    with pytest.raises(InvalidOffset):
        store.commit_consumer_offset(group_name="g", topic="t", queue_id=0, queue_offset=-1)
    assert store.list_consumer_offsets() == [] and store.pending_consumer_offset_count == 0
    assert store.commit_consumer_offset(group_name="g", topic="t", queue_id=0, queue_offset=8)
    assert not store.commit_consumer_offset(group_name="g", topic="t", queue_id=0, queue_offset=8)
    with pytest.raises(OffsetMovesBackwards):
        store.commit_consumer_offset(group_name="g", topic="t", queue_id=0, queue_offset=7)
    assert store.get_consumer_offset(group_name="g", topic="t", queue_id=0) == 8


def test_reset_moves_back_and_is_written_at_once(open_store: OpenStore, database_url: str) -> None:
    """A reset lowers an offset, goes to the database at once and later commits go on from it."""
    store = _with_topic_and_group(open_store())
    store.commit_consumer_offset(group_name="g", topic="t", queue_id=0, queue_offset=100)
    reset = store.reset_consumer_offset(group_name="g", topic="t", queue_id=0, queue_offset=4)
    assert reset.queue_offset == 4 and _stored_offset(database_url) == 4
    assert store.pending_consumer_offset_count == 0
    assert store.commit_consumer_offset(group_name="g", topic="t", queue_id=0, queue_offset=5)


def test_deleting_a_group_drops_pending_offsets(open_store: OpenStore, database_url: str) -> None:
    """Offsets of a deleted group are not resurrected by a later flush."""
    store = _with_topic_and_group(open_store())
    store.commit_consumer_offset(group_name="g", topic="t", queue_id=0, queue_offset=3)
    store.delete_group(name="g")
    assert store.flush_consumer_offsets() == 0
    assert store.list_consumer_offsets() == [] and _stored_offset(database_url) is None
    with pytest.raises(GroupNotFound):
        store.commit_consumer_offset(group_name="g", topic="t", queue_id=0, queue_offset=4)


def test_ensure_writable_topic_auto_creates_and_sees_updates(open_store: OpenStore) -> None:
    """Produce-time checks auto-create with default_queue_count and see permission changes."""
    store = open_store(default_queue_count=2)
    created = store.ensure_writable_topic(name="fresh")
    assert (created.read_queue_count, created.write_queue_count) == (2, 2)
    assert store.ensure_writable_topic(name="fresh") == created
    store.update_topic(name="fresh", permission=TopicPermission.READ)
    with pytest.raises(TopicNotWritable, match="'fresh' does not allow writes"):
        store.ensure_writable_topic(name="fresh")
    store.delete_topic(name="fresh")
    assert store.ensure_writable_topic(name="fresh").writable


def test_auto_create_off_refuses_unknown_topics(open_store: OpenStore) -> None:
    """With auto_create_topics off, producing to an unknown topic raises TopicNotFound."""
    store = open_store(auto_create_topics=False)
    with pytest.raises(TopicNotFound, match="auto_create_topics is off"):
        store.ensure_writable_topic(name="fresh")
    assert store.list_topics() == []


def test_master_to_slave_sync(
    open_store: OpenStore, migrated_template: Path, tmp_path: Path, clock: FakeClock
) -> None:
    """A slave applying a master's four exports matches it; offsets are flushed before export."""
    master = _with_topic_and_group(open_store())
    master.commit_consumer_offset(group_name="g", topic="t", queue_id=1, queue_offset=21)
    master.set_delay_offsets(offsets={3: 30})
    slave_directory = tmp_path / "slave"
    slave_directory.mkdir()
    slave = MetadataStore(fresh_database_url(migrated_template, slave_directory), clock_ms=clock)
    try:
        assert slave.import_topics(master.export_table(MetadataTable.TOPIC_CONFIG))
        assert slave.merge_consumer_offsets(master.export_table(MetadataTable.CONSUMER_OFFSET)) == 1
        assert slave.import_delay_offsets(master.export_table(MetadataTable.DELAY_OFFSET))
        assert slave.import_groups(master.export_table(MetadataTable.SUBSCRIPTION_GROUP))
        assert master.pending_consumer_offset_count == 0
        assert slave.data_versions() == master.data_versions()
        assert slave.get_consumer_offset(group_name="g", topic="t", queue_id=1) == 21
        assert slave.list_topics() == master.list_topics()
        assert slave.list_groups() == master.list_groups()
        assert slave.list_delay_offsets() == master.list_delay_offsets()
        assert not slave.import_topics(master.export_table(MetadataTable.TOPIC_CONFIG))
    finally:
        slave.stop()


def test_in_memory_sqlite_works() -> None:
    """An in-memory SQLite URL is migrated through the store's own engine and usable."""
    store = MetadataStore("sqlite://")
    try:
        store.create_topic(name="t", read_queue_count=1)
        assert [topic.name for topic in store.list_topics()] == ["t"]
    finally:
        store.stop()


def test_repository_writes_bump_versions_through_the_store(
    open_store: OpenStore, database_url: str
) -> None:
    """Group and topic changes through the store bump the versions the database shows."""
    store = open_store()
    store.create_group(name="g")
    store.update_group(name="g", retry_times_max=2)
    store.update_group(name="g", retry_times_max=2)
    assert store.get_group(name="g").retry_times_max == 2
    assert store.find_group(name="nope") is None
    engine = create_metadata_engine(database_url)
    try:
        assert get_data_version(engine=engine, table=MetadataTable.SUBSCRIPTION_GROUP).counter == 2
    finally:
        engine.dispose()


def test_concurrent_produces_create_a_topic_once(open_store: OpenStore) -> None:
    """Many threads producing to a new topic at once create it exactly once."""
    store = open_store()
    barrier = threading.Barrier(8)
    results: list[int] = []

    def produce() -> None:
        barrier.wait()
        results.append(store.ensure_writable_topic(name="hot").created_at_ms)

    threads = [threading.Thread(target=produce) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and len(set(results)) == 1
    assert store.data_version(MetadataTable.TOPIC_CONFIG).counter == 1


def test_concurrent_commits_while_persisting(open_store: OpenStore, database_url: str) -> None:
    """Commits racing the persister thread all reach the database by stop()."""
    store = open_store(consumer_offset_persist_interval_ms=1)
    store.create_topic(name="t", read_queue_count=4)
    store.create_group(name="g")
    store.start()

    def commit_queue(queue_id: int) -> None:
        for queue_offset in range(200):
            store.commit_consumer_offset(
                group_name="g", topic="t", queue_id=queue_id, queue_offset=queue_offset
            )

    threads = [threading.Thread(target=commit_queue, args=(queue_id,)) for queue_id in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.stop()
    assert [_stored_offset(database_url, queue_id) for queue_id in range(4)] == [199] * 4


@pytest.mark.processes  # the session's PostgreSQL server
def test_store_works_on_postgresql(postgres_database_url: str) -> None:
    """On PostgreSQL the store migrates, and offsets flushed at stop survive a reopen."""
    store = MetadataStore(postgres_database_url)
    try:
        _with_topic_and_group(store)
        store.commit_consumer_offset(group_name="g", topic="t", queue_id=2, queue_offset=77)
        store.set_delay_offsets(offsets={18: 5})
    finally:
        store.stop()
    reopened = MetadataStore(postgres_database_url)
    try:
        assert reopened.get_consumer_offset(group_name="g", topic="t", queue_id=2) == 77
        assert reopened.get_delay_offset(delay_level=18) == 5
        assert reopened.data_version(MetadataTable.CONSUMER_OFFSET).counter == 1
    finally:
        reopened.stop()


def test_a_groups_backoff_is_planned_applied_synced_and_snapshotted(
    open_store: OpenStore, migrated_template: Path, tmp_path: Path
) -> None:
    """The backoff travels with the group's record, its row, the slave sync's export and a
    snapshot's tables; "" sets the broker's default back; a bad one is refused by name."""
    store = open_store()
    own = "exponential:500:3.0:60000"
    change = store.plan_create_group(name="g", backoff=own)
    assert change.backoff == own
    store.apply_change(change)
    assert store.get_group(name="g").backoff == own
    with pytest.raises(InvalidBackoff, match="multiplier"):
        store.plan_update_group(name="g", backoff="exponential:500:30.0:60000")
    with pytest.raises(InvalidBackoff):
        store.plan_create_group(name="h", backoff="levels")
    assert store.plan_update_group(name="g", backoff=own) is None  # nothing changes
    _, (_, groups, _) = store.snapshot_tables()
    assert [group.backoff for group in groups] == [own]
    (tmp_path / "slave").mkdir()
    slave = MetadataStore(fresh_database_url(migrated_template, tmp_path / "slave"),
                          clock_ms=lambda: 1)
    try:
        assert slave.import_groups(store.export_table(MetadataTable.SUBSCRIPTION_GROUP))
        assert slave.get_group(name="g").backoff == own
    finally:
        slave.stop()
    cleared = store.plan_update_group(name="g", backoff="")
    assert cleared is not None and cleared.backoff == ""
    store.apply_change(cleared)
    assert store.get_group(name="g").backoff == ""
    assert store.update_group(name="g", backoff="table").backoff == "table"

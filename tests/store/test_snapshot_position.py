"""The last whole metadata snapshot is persisted with the tables' position (log_position's
snapshot columns) and a start takes it from there (store/system_feed.py): on real stores and
the real MetadataStore, a restart reads a handful of records to find it where it read back
every record since the snapshot; a position that names a record which is not that snapshot
(another log, a cut, one part too many) or that falls between a snapshot's parts falls back
to the scan, which finds the right one; a snapshot after the position is followed as the
records after it are handed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from app.broker.metadata_log import MetadataLog, record_of
from app.broker.metadata_snapshots import MetadataSnapshots
from store import MessageStore, PutMessageStatus
from store.metadata import MetadataStore, create_metadata_engine
from store.metadata.log_records import GroupPut, MetadataChange, OffsetSet, TopicPut
from store.reads import GetMessagesResult
from store.system_topics import METADATA_TOPIC, SnapshotAt
from tests.support.store import wait_dispatched

OpenStore = Callable[..., MessageStore]
RECORDS_AFTER = 600


class CountingReads:
    """The feed's reads of the store (its seam), counting the records they return."""

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self.records = 0

    def get_messages(self, topic: str, queue_id: int, offset: int, max_messages: int, *,
                     committed_only: bool) -> GetMessagesResult:
        result = self._store.get_messages(topic, queue_id, offset, max_messages,
                                          committed_only=committed_only)
        self.records += len(result.messages)
        return result


def _put(store: MessageStore, change: MetadataChange, wait: bool = True) -> None:
    result, _ = store.put_system_message(record_of(change))
    assert result.status is PutMessageStatus.PUT_OK
    if wait:
        wait_dispatched(store)


def _metadata_end(store: MessageStore) -> int:
    queue = store.queues.get(METADATA_TOPIC, 0)
    return 0 if queue is None else queue.max_queue_offset


def _attach(store: MessageStore, metadata: MetadataStore,
            snapshot: Any = "persisted") -> CountingReads:
    """Attach the tables to the store as a broker's start does, the feed's reads counted."""
    reads = CountingReads(store)
    store.system_feed._reads = reads
    applied = metadata.log_position
    store.attach_system_records(metadata.apply_record, applied.queue_offset,
                                applied.commit_log_offset, reset=metadata.reset_applied_state,
                                cut=metadata.cut_ahead,
                                snapshot=(metadata.applied_snapshot if snapshot == "persisted"
                                          else snapshot))
    return reads


def _snapshot(store: MessageStore, metadata: MetadataStore) -> SnapshotAt:
    """Write a snapshot (in several parts); where it lies."""
    queue_offset = _metadata_end(store)
    snapshots = MetadataSnapshots(store, MetadataLog(store), lambda: metadata,
                                  part_bytes_max=64)
    assert snapshots.write()
    wait_dispatched(store)
    parts = _metadata_end(store) - queue_offset
    assert parts >= 3
    found = store.get_messages(METADATA_TOPIC, 0, queue_offset, 1)
    return SnapshotAt(queue_offset, found.messages[0].commit_log_offset, parts)


@pytest.fixture
def logged(open_store: OpenStore, tmp_path: Path) -> tuple[MessageStore, MetadataStore,
                                                          SnapshotAt]:
    """A log with a few records, a snapshot, then RECORDS_AFTER offset commits; its tables
    persisted at its end."""
    store = open_store(data_dir=tmp_path / "log")
    metadata = MetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}")
    _attach(store, metadata)
    _put(store, TopicPut("A", 4, 4, 6, 1, 1))
    _put(store, GroupPut("g", True, False, 1, 16, 2, 2))
    for queue_id in range(4):
        _put(store, OffsetSet("g", "A", queue_id, queue_id + 1, False, 3))
    snapshot = _snapshot(store, metadata)
    for index in range(RECORDS_AFTER):
        _put(store, OffsetSet("g", "A", index % 4, index + 10, False, 4), wait=False)
    wait_dispatched(store)
    metadata.flush_consumer_offsets()
    return store, metadata, snapshot


def _restart(open_store: OpenStore, tmp_path: Path, store: MessageStore,
             metadata: MetadataStore) -> tuple[MessageStore, MetadataStore]:
    store.detach_system_records()
    metadata.stop()
    store.shutdown()
    return (open_store(data_dir=tmp_path / "log"),
            MetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}"))


def test_a_restart_finds_the_last_snapshot_where_the_tables_persisted_it(
        logged: tuple[MessageStore, MetadataStore, SnapshotAt], open_store: OpenStore,
        tmp_path: Path) -> None:
    """The position persisted names the snapshot: the start takes it after reading a few
    records (the old scan read back all RECORDS_AFTER records since it)."""
    store, metadata, snapshot = logged
    assert metadata.applied_snapshot == snapshot
    store, metadata = _restart(open_store, tmp_path, store, metadata)
    assert metadata.applied_snapshot == snapshot
    reads = _attach(store, metadata)
    latest = store.system_feed.latest_snapshot
    assert latest is not None
    assert (latest.queue_offset, latest.offset, latest.parts) == snapshot
    assert reads.records <= 8, reads.records
    assert store.metadata_records_since_snapshot() == RECORDS_AFTER + snapshot.parts
    assert reads.records <= 8  # the count comes from what the start found
    metadata.stop()


@pytest.mark.parametrize("wrong", ["another log's offset", "not a snapshot",
                                   "one part too many"])
def test_a_position_that_does_not_name_the_logs_snapshot_falls_back_to_the_scan(
        logged: tuple[MessageStore, MetadataStore, SnapshotAt], wrong: str) -> None:
    """The snapshot named is not in the log as named (tables of another log, a record that is
    no snapshot's part 0, a part count whose last is no last part): the scan finds the log's
    last whole snapshot."""
    store, metadata, snapshot = logged
    store.detach_system_records()
    named = {
        "another log's offset": snapshot._replace(commit_log_offset=snapshot.commit_log_offset
                                                  + 1),
        "not a snapshot": snapshot._replace(queue_offset=snapshot.queue_offset - 1),
        "one part too many": snapshot._replace(parts=snapshot.parts + 1),
    }[wrong]
    _attach(store, metadata, named)
    latest = store.system_feed.latest_snapshot
    assert latest is not None
    assert (latest.queue_offset, latest.offset, latest.parts) == snapshot
    metadata.stop()


def _newer_snapshot(store: MessageStore) -> SnapshotAt:
    """A snapshot written past where the tables stopped (the log went on without them)."""
    store.detach_system_records()
    other = MetadataStore("sqlite://")  # the writer's tables, fed from the log
    _attach(store, other, None)
    newer = _snapshot(store, other)
    _put(store, OffsetSet("g", "A", 0, 99_999, False, 5))
    store.detach_system_records()
    other.stop()
    return newer


def test_tables_stopped_between_a_snapshots_parts_fall_back_to_the_scan(
        logged: tuple[MessageStore, MetadataStore, SnapshotAt]) -> None:
    """Tables that name the older snapshot and stand between the parts of a newer one (they
    applied its part 0 only): the parts handed after the position do not make it whole, so
    the start searches the log, and finds the newer."""
    store, metadata, older = logged
    newer = _newer_snapshot(store)
    position = newer.queue_offset + 1
    store.attach_system_records(lambda record: None, position, newer.commit_log_offset,
                                snapshot=older)
    latest = store.system_feed.latest_snapshot
    assert latest is not None
    assert (latest.queue_offset, latest.offset, latest.parts) == newer
    metadata.stop()


def test_a_snapshot_past_the_persisted_position_is_followed_as_the_start_hands_it(
        logged: tuple[MessageStore, MetadataStore, SnapshotAt]) -> None:
    """The tables stopped at the log's end; a newer snapshot is written past it: the start
    names the older one, and the records handed after the position bring the newer."""
    store, metadata, older = logged
    newer = _newer_snapshot(store)
    assert metadata.applied_snapshot == older
    _attach(store, metadata)
    latest = store.system_feed.latest_snapshot
    assert latest is not None
    assert (latest.queue_offset, latest.offset, latest.parts) == newer
    assert metadata.applied_snapshot == newer
    metadata.stop()


def test_the_tables_forget_the_snapshot_when_reset_and_learn_it_again_from_the_replay(
        logged: tuple[MessageStore, MetadataStore, SnapshotAt], tmp_path: Path) -> None:
    """A reset (the log lost records the tables applied) empties the persisted snapshot
    with the tables; the replay of the log, passing the snapshot, names it again."""
    store, metadata, snapshot = logged
    store.detach_system_records()
    metadata.reset_applied_state()
    assert metadata.applied_snapshot is None
    engine = create_metadata_engine(f"sqlite:///{tmp_path / 'metadata.db'}")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT snapshot_queue_offset FROM log_position")) \
            .scalar_one() is None
    engine.dispose()
    _attach(store, metadata)
    assert metadata.applied_snapshot == snapshot
    metadata.flush_consumer_offsets()
    engine = create_metadata_engine(f"sqlite:///{tmp_path / 'metadata.db'}")
    with engine.connect() as connection:
        row = connection.execute(text(
            "SELECT snapshot_queue_offset, snapshot_commit_log_offset, snapshot_parts "
            "FROM log_position")).one()
    engine.dispose()
    assert tuple(row) == snapshot
    metadata.stop()

"""Metadata snapshots on real stores with the real MetadataStore (store/system_feed.py,
store/retention.py, app/broker/metadata_snapshots.py): retention keeps the file of the last
snapshot (of the first metadata record before any) until a newer snapshot is written; the
tables rebuilt from what retention left, and tables whose persisted position is below it,
hold the whole log's state; a snapshot's queue starts begin the queues a log has no record
of, and they survive a restart."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from app.broker.metadata_log import MetadataLog, record_of
from app.broker.metadata_snapshots import MetadataSnapshots
from app.broker.slave_sync import start_queues
from store import BrokerRole, Message, MessageStore, PutMessageStatus
from store.metadata import MetadataStore
from store.metadata.log_records import GroupPut, MetadataChange, OffsetSet, TopicPut
from store.retention import RetentionService
from store.timers.names import SCHEDULE_TOPIC
from tests.support.store import wait_dispatched

OpenStore = Callable[..., MessageStore]


def _attached(store: MessageStore, database: Path) -> MetadataStore:
    metadata = MetadataStore(f"sqlite:///{database}")
    applied = metadata.log_position
    store.attach_system_records(metadata.apply_record, applied.queue_offset,
                                applied.commit_log_offset, reset=metadata.reset_applied_state)
    return metadata


def _put(store: MessageStore, change: MetadataChange) -> None:
    result, _ = store.put_system_message(record_of(change))
    assert result.status is PutMessageStatus.PUT_OK
    wait_dispatched(store)


def _fill(store: MessageStore, count: int) -> None:
    for index in range(count):
        store.put_message(Message("Fill", bytes([index % 256]) * 1500, queue_id=0))
    wait_dispatched(store)


def _retention(store: MessageStore, write: Callable[[], bool] | None) -> RetentionService:
    service = RetentionService(store.config, store.commit_log, store.queues, store.dispatch,
                               used_ratio=lambda _: 0.99, wall_clock_s=time.time)
    service.metadata_floor = store.metadata_retention_floor
    service.on_metadata_floor = write
    return service


def _slave_after_a_snapshot(open_store: OpenStore, tmp_path: Path, master: MessageStore,
                            metadata: MetadataStore, start: int) -> MessageStore:
    """The master writes a snapshot; a slave's log then begins at `start` and holds the
    master's from there on, dispatched."""
    snapshots = MetadataSnapshots(master, MetadataLog(master), lambda: metadata)
    assert snapshots.write()
    slave = open_store(data_dir=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    assert slave.append_raw(start, master.commit_log.read_bytes(start, master.max_offset)) \
        .value == "OK"
    wait_dispatched(slave)
    return slave


def _state(metadata: MetadataStore) -> tuple[object, ...]:
    return ([t.model_dump() for t in metadata.list_topics()],
            [g.model_dump() for g in metadata.list_groups()],
            [(o.group_name, o.topic, o.queue_id, o.queue_offset)
             for o in metadata.list_consumer_offsets()])


def test_retention_keeps_the_last_snapshot_and_a_rebuild_past_it_holds_every_table(
        open_store: OpenStore, tmp_path: Path) -> None:
    store = open_store(data_dir=tmp_path / "log")
    metadata = _attached(store, tmp_path / "master.db")
    early = tmp_path / "early.db"
    _put(store, TopicPut("A", 4, 4, 6, 1, 1))
    metadata.flush_consumer_offsets()
    shutil.copy(tmp_path / "master.db", early)  # tables persisted after the first record
    _put(store, GroupPut("g", True, False, 1, 16, 2, 2))
    _put(store, OffsetSet("g", "A", 3, 7, False, 3))
    _fill(store, 200)
    _put(store, OffsetSet("g", "A", 0, 2, False, 4))
    files = len(list((tmp_path / "log" / "commitlog").iterdir()))
    assert files >= 4

    # A slave's retention (no writer): the first file holds the first metadata records.
    slave_side = _retention(store, None)
    assert slave_side.delete_expired() == 0
    assert slave_side.metadata_blocked_offset == 0 and store.min_offset == 0

    snapshots = MetadataSnapshots(store, MetadataLog(store), lambda: metadata,
                                  part_bytes_max=64)
    assert _retention(store, snapshots.write).delete_expired() == files - 1
    assert snapshots.written_count == 1 and store.min_offset > 0
    whole = _state(metadata)
    assert whole[2] == [("g", "A", 0, 2), ("g", "A", 3, 7)]

    # Every file but the last is gone, the snapshot's among them: the next round writes a
    # newer one first (the log's end is past the file being written).
    _fill(store, 200)
    assert _retention(store, snapshots.write).delete_expired() >= 1
    assert snapshots.written_count == 2

    # Tables rebuilt from what retention left (a fresh database), and tables persisted at
    # the first record (below what retention left), both hold the whole log's state.
    store.detach_system_records()
    rebuilt = _attached(store, tmp_path / "fresh.db")
    assert _state(rebuilt) == whole
    store.detach_system_records()
    restarted = _attached(store, early)
    assert _state(restarted) == whole
    for tables in (metadata, rebuilt, restarted):
        tables.stop()


def test_a_snapshots_queue_starts_begin_the_queues_a_log_lacks_and_survive_a_restart(
        open_store: OpenStore, tmp_path: Path) -> None:
    """A slave whose log begins past every record of Gone/0 takes the snapshot in its
    master's log: the queue starts at 3 (reads below find nothing), still after a restart,
    and promoted the slave's next message there gets queue offset 3."""
    master = open_store(data_dir=tmp_path / "master")
    metadata = _attached(master, tmp_path / "master.db")
    _put(master, TopicPut("Gone", 1, 1, 6, 1, 1))
    for _ in range(3):
        master.put_message(Message("Gone", b"old", queue_id=0))
    _fill(master, 120)
    start = master.commit_log.files.files[-1].start_offset  # where the slave's log begins
    slave = _slave_after_a_snapshot(open_store, tmp_path, master, metadata, start)
    assert slave.queue_offset_range("Gone", 0) is not None
    assert slave.queue_offset_range("Gone", 0)[1] == 3  # type: ignore[index]
    assert slave.get_messages("Gone", 0, 0, 10).messages == []
    slave.shutdown()
    reopened = open_store(data_dir=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    assert reopened.queue_offset_range("Gone", 0)[1] == 3  # type: ignore[index]
    reopened.change_role(BrokerRole.ASYNC_MASTER)
    result, _ = reopened.put_message(Message("Gone", b"new", queue_id=0))
    assert (result.status, result.queue_offset) == (PutMessageStatus.PUT_OK, 3)
    metadata.stop()


def test_a_slave_started_by_an_earlier_pull_moves_its_queues_to_the_snapshots_starts(
        open_store: OpenStore, tmp_path: Path) -> None:
    """An empty slave's bootstrap pull started Gone/0 at 1 (its master's next offset where
    its log began then); its HA link starts later, when the master's log begins past all 3 of
    Gone/0's records, and streams the master's snapshot, which starts Gone/0 at 3: the queue
    moves on to 3 (before: it kept 1, and promoted, the slave numbered its next message 1,
    an offset the old master gave another message a group may have consumed)."""
    master = open_store(data_dir=tmp_path / "master")
    metadata = _attached(master, tmp_path / "master.db")
    _put(master, TopicPut("Gone", 1, 1, 6, 1, 1))
    master.put_message(Message("Gone", b"old", queue_id=0))
    _fill(master, 120)
    early = master.commit_log.files.files[-1].start_offset
    assert ("Gone", 0, 1) in master.queues.starts_at(early)  # what the early pull says
    for _ in range(2):
        master.put_message(Message("Gone", b"old", queue_id=0))
    _fill(master, 120)
    start = master.commit_log.files.files[-1].start_offset  # where the slave's log begins
    snapshots = MetadataSnapshots(master, MetadataLog(master), lambda: metadata)
    assert snapshots.write()
    slave = open_store(data_dir=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    assert start_queues(slave, early, [("Gone", 0, 1)]) == 1
    assert slave.queue_offset_range("Gone", 0)[1] == 1  # type: ignore[index]
    assert slave.append_raw(start, master.commit_log.read_bytes(start, master.max_offset)) \
        .value == "OK"
    wait_dispatched(slave)
    assert slave.queue_offset_range("Gone", 0)[1] == 3  # type: ignore[index]
    assert slave.get_messages("Gone", 0, 0, 10).messages == []
    slave.shutdown()
    reopened = open_store(data_dir=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    reopened.change_role(BrokerRole.ASYNC_MASTER)
    result, _ = reopened.put_message(Message("Gone", b"new", queue_id=0))
    assert (result.status, result.queue_offset) == (PutMessageStatus.PUT_OK, 3)
    metadata.stop()


def test_a_snapshot_follows_once_enough_records_pass_the_last(open_store: OpenStore,
                                                              tmp_path: Path) -> None:
    """With metadata_snapshot_records_max records after the last snapshot (or the first
    record, before any), the master writes one: a rebuild or a start then replays only what
    follows it, however long the log. Fewer records, or 0 (off), write none."""
    store = open_store(data_dir=tmp_path / "log")
    metadata = _attached(store, tmp_path / "master.db")
    snapshots = MetadataSnapshots(store, MetadataLog(store), lambda: metadata)
    _put(store, TopicPut("A", 4, 4, 6, 1, 1))
    for offset in range(4):
        _put(store, OffsetSet("g", "A", 0, offset, False, 2 + offset))
    assert store.metadata_records_since_snapshot() == 5
    assert not snapshots.write_if_due(6) and not snapshots.write_if_due(0)
    assert snapshots.written_count == 0
    _put(store, OffsetSet("g", "A", 0, 9, False, 9))
    assert snapshots.write_if_due(6) and snapshots.written_count == 1
    parts = store.metadata_records_since_snapshot()  # the snapshot's own parts
    assert 1 <= parts <= 2  # the tables, and the queue starts
    _put(store, OffsetSet("g", "A", 1, 3, False, 10))
    assert store.metadata_records_since_snapshot() == parts + 1
    assert not snapshots.write_if_due(6)
    whole = _state(metadata)
    store.detach_system_records()
    rebuilt = _attached(store, tmp_path / "fresh.db")
    assert _state(rebuilt) == whole
    for tables in (metadata, rebuilt):
        tables.stop()


def test_a_snapshot_and_the_bootstrap_pull_start_the_lanes_a_log_lacks(
        open_store: OpenStore, tmp_path: Path) -> None:
    """Lane entries (a delay level's queue) whose records all lie below where a slave's log
    begins: the snapshot and the bootstrap pull's starts carry the lane's next offset, so the
    slave's lane starts there and, promoted, its next entry gets offset 3 (not 0, below the
    lane's progress that records consuming those entries carry)."""
    master = open_store(data_dir=tmp_path / "master")
    metadata = _attached(master, tmp_path / "master.db")
    _put(master, TopicPut("Live", 1, 1, 6, 1, 1))
    for _ in range(3):
        master.put_message(Message(SCHEDULE_TOPIC, b"delayed", queue_id=0))
    _fill(master, 120)
    start = master.commit_log.files.files[-1].start_offset  # where the slave's log begins
    assert (SCHEDULE_TOPIC, 0, 3) in master.queues.starts_at(start)  # the pull's starts
    slave = _slave_after_a_snapshot(open_store, tmp_path, master, metadata, start)
    assert slave.queue_offset_range(SCHEDULE_TOPIC, 0) is not None
    assert slave.queue_offset_range(SCHEDULE_TOPIC, 0)[1] == 3  # type: ignore[index]
    slave.change_role(BrokerRole.ASYNC_MASTER)
    result, _ = slave.put_message(Message(SCHEDULE_TOPIC, b"later", queue_id=0))
    assert (result.status, result.queue_offset) == (PutMessageStatus.PUT_OK, 3)
    metadata.stop()

"""Flush correctness: the flushed offset is the end of the contiguous msynced prefix of the
whole log, whatever rolled meanwhile (issue 9, items 1 and 7)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import FlushDiskType, Message, MessageStore, PutMessageStatus
from store.checkpoint import Checkpoint, read_checkpoint
from store.clock import monotonic_ms
from store.files.mapped_file import MappedFile
from store.waits.completion import PutCompletion
from tests.support.disk import RecordingDisk
from tests.support.store import SMALL_FILE_BYTES, small_config, wait_dispatched, wait_until

BODY = bytes(3000)


@pytest.fixture
def disk() -> RecordingDisk:
    return RecordingDisk()


@pytest.fixture
def store(tmp_path: Path, disk: RecordingDisk) -> Iterator[MessageStore]:
    """A SYNC_FLUSH store whose flush thread is stopped: the test drives every flush."""
    config = small_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                          sync_flush_timeout_ms=600_000)
    store = MessageStore(config, disk)
    store.start()
    store.flush.stop()
    yield store
    if store.state.value == "RUNNING":
        store.shutdown()


def _put(store: MessageStore) -> tuple[int, PutCompletion]:
    result, completion = store.put_message(Message("Flush", BODY))
    assert result.status is PutMessageStatus.PUT_OK, result
    return result.end_offset, completion


def _put_until_rolled(store: MessageStore, rolls: int) -> list[tuple[int, PutCompletion]]:
    """Puts until `rolls` new files exist and the last one holds a few records."""
    last = store.commit_log.files.last_file()
    target_start = (last.start_offset if last else 0) + rolls * SMALL_FILE_BYTES
    puts = []
    while store.max_offset < target_start + 4 * len(BODY):
        puts.append(_put(store))
    return puts


def _msynced_prefix(store: MessageStore, disk: RecordingDisk) -> int:
    """The end of the contiguous prefix of the log that msync calls really covered."""
    files = store.commit_log.files.files
    offset = files[0].start_offset
    for mapped in files:
        covered = min(disk.msynced_end(mapped.buffer), mapped.write_position)
        offset = mapped.start_offset + covered
        if covered < mapped.size_bytes:
            break
    return offset


def _acknowledged_end(puts: list[tuple[int, PutCompletion]]) -> int:
    return max((end for end, done in puts
                if done.is_done and done.result() is PutMessageStatus.PUT_OK), default=0)


def test_three_files_rolled_between_flushes_are_all_msynced(
    store: MessageStore, disk: RecordingDisk
) -> None:
    """When three files roll between two flushes, every one is msynced before the flushed
    offset passes it, no put is acknowledged beyond what was msynced, and the checkpoint
    records only msynced bytes."""
    first = _put_until_rolled(store, 0)
    store.flush.flush_commit_log()
    puts = first + _put_until_rolled(store, 3)
    flushed = store.flush.flush_commit_log()
    msynced = _msynced_prefix(store, disk)
    assert flushed <= msynced
    assert flushed == store.max_offset  # nothing was left out either
    assert _acknowledged_end(puts) <= msynced
    wait_dispatched(store)
    store.flush.checkpoint()
    checkpoint = read_checkpoint(store.paths.checkpoint)
    assert checkpoint is not None
    assert checkpoint.commit_log_flushed_offset <= _msynced_prefix(store, disk)


def test_roll_between_last_msync_and_offset_read_is_not_counted(
    store: MessageStore, disk: RecordingDisk
) -> None:
    """When the appender rolls a file right after the flush msynced the last file, the
    flushed offset stays at what that msync covered: the puts written meanwhile wait."""
    puts = _put_until_rolled(store, 1)
    store.flush.flush_commit_log()
    puts += [_put(store) for _ in range(3)]
    written_in_step: list[tuple[int, PutCompletion]] = []

    def roll_after_msync(mapped: MappedFile) -> None:
        if not written_in_step and not mapped.is_full:
            while store.commit_log.files.last_file() is mapped:  # roll it
                written_in_step.append(_put(store))
            written_in_step.append(_put(store))

    store.commit_log.files.flush_step_hook = roll_after_msync
    flushed = store.flush.flush_commit_log()
    store.commit_log.files.flush_step_hook = None
    assert written_in_step
    msynced = _msynced_prefix(store, disk)
    assert flushed <= msynced < store.max_offset
    assert _acknowledged_end(puts + written_in_step) <= msynced
    assert not any(done.is_done for _, done in written_in_step)
    assert store.flush.flush_commit_log() == store.max_offset  # the next flush takes them
    assert all(done.result(5) is PutMessageStatus.PUT_OK for _, done in written_in_step)


def test_new_files_are_followed_by_a_directory_fsync(
    store: MessageStore, disk: RecordingDisk, tmp_path: Path
) -> None:
    """A new commit-log file, a new consume-queue file and the new queue directories have
    their directory fsynced before the flushed offset or a checkpoint relies on them."""
    puts = _put_until_rolled(store, 0)
    store.flush.flush_commit_log()
    wait_dispatched(store)
    store.flush.checkpoint()  # the queue of topic Flush exists: its directories must be too
    fsynced = disk.directory_fsyncs()
    queue_dir = tmp_path / "consumequeue" / "Flush" / "0"
    for directory in (tmp_path / "consumequeue", tmp_path / "consumequeue" / "Flush",
                      queue_dir, tmp_path / "commitlog"):
        assert directory in fsynced, directory
    del disk.calls[:]
    before = store.commit_log.files.last_file()
    puts += _put_until_rolled(store, 1)
    store.flush.flush_commit_log()
    names = [(name, target) for name, target, _, _ in disk.calls]
    new_file = store.commit_log.files.last_file()
    assert new_file is not None and new_file is not before
    directory_at = names.index(("fsync_directory", tmp_path / "commitlog"))
    new_file_msync_at = names.index(("msync", new_file.buffer))
    assert directory_at < new_file_msync_at


def test_fsync_count_counts_the_flushes_that_moved_the_offset(store: MessageStore) -> None:
    """`fsync_count` (what shows a group commit serving many puts with one flush) grows by one
    per flush that made new bytes durable, and not for a flush that found nothing new: a store
    that was never written has flushed nothing."""
    assert store.flush.flush_commit_log() == store.max_offset == 0
    assert store.flush.fsync_count == 0
    _put(store)
    _put(store)
    store.flush.flush_commit_log()
    assert store.flush.fsync_count == 1
    store.flush.flush_commit_log()
    assert store.flush.fsync_count == 1
    _put(store)
    store.flush.flush_commit_log()
    assert store.flush.fsync_count == 2


def test_checkpoint_is_taken_every_interval_not_every_flush(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flush loop writes a checkpoint when flush_consume_queue_interval_ms (50 ms here)
    has passed since the last one, at the edge included, and not on the flushes between."""
    start_ms = monotonic_ms() + 60_000  # past any checkpoint the thread took before it was stopped
    clock_ms = [start_ms]
    monkeypatch.setattr("store.flush.monotonic_ms", lambda: clock_ms[0])
    taken: list[int] = []
    checkpoint = store.flush.checkpoint

    def counting_checkpoint() -> Checkpoint | None:
        taken.append(clock_ms[0] - start_ms)
        return checkpoint()

    monkeypatch.setattr(store.flush, "checkpoint", counting_checkpoint)
    store.flush.run_once()
    assert taken == [0]
    for step_ms in (10, 20, 49):
        clock_ms[0] = start_ms + step_ms
        store.flush.run_once()
    assert taken == [0]
    clock_ms[0] = start_ms + 50
    store.flush.run_once()
    assert taken == [0, 50]


def test_checkpoint_records_when_it_was_written(store: MessageStore) -> None:
    """The checkpoint file carries the wall-clock time it was written, in milliseconds."""
    _put(store)
    wait_dispatched(store)
    before_ms = int(time.time() * 1000)
    written = store.flush.checkpoint()
    after_ms = int(time.time() * 1000)
    assert written is not None
    assert read_checkpoint(store.paths.checkpoint) == written
    assert before_ms <= written.written_timestamp_ms <= after_ms


def test_async_flush_makes_puts_durable_and_checkpoints_on_its_own(tmp_path: Path) -> None:
    """Under ASYNC_FLUSH nothing asks for a flush: the flush thread makes the log durable, and
    writes a checkpoint covering it, on its own every flush_interval_ms (20 ms here)."""
    store = MessageStore(small_config(tmp_path, flush_interval_ms=20))
    store.start()
    try:
        result, done = store.put_message(Message("Flush", BODY))
        assert done.result(1) is PutMessageStatus.PUT_OK
        wait_until(lambda: store.commit_log.flushed_offset >= result.end_offset, 5.0)

        def checkpointed() -> bool:
            checkpoint = read_checkpoint(store.paths.checkpoint)
            return checkpoint is not None and checkpoint.recover_offset >= result.end_offset

        wait_until(checkpointed, 5.0)
    finally:
        store.shutdown()


@pytest.mark.parametrize("flush_type", [FlushDiskType.SYNC_FLUSH, FlushDiskType.ASYNC_FLUSH])
def test_flush_loop_sleeps_per_flush_type(tmp_path: Path, flush_type: FlushDiskType) -> None:
    """After a pass the flush loop sleeps flush_interval_ms under ASYNC_FLUSH (that is its
    flush cadence); under SYNC_FLUSH, where each put wakes it, it sleeps less than the
    checkpoint interval, so an idle store still checkpoints on time."""
    config = small_config(tmp_path, flush_disk_type=flush_type, flush_interval_ms=60_000,
                          flush_consume_queue_interval_ms=50)
    store = MessageStore(config)
    store.start()
    store.flush.stop()
    try:
        wait_s = store.flush.run_once()
    finally:
        store.shutdown()
    if flush_type is FlushDiskType.ASYNC_FLUSH:
        assert wait_s == 60.0
    else:
        assert 0 < wait_s < 0.05

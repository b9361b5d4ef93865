"""Flush correctness: the flushed offset is the end of the contiguous msynced prefix of the
whole log, whatever rolled meanwhile (issue 9, items 1 and 7)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from store import FlushDiskType, Message, MessageStore, PutMessageStatus
from store.checkpoint import read_checkpoint
from store.completion import PutCompletion
from store.mapped_file import MappedFile
from tests.store.conftest import SMALL_FILE_BYTES, small_config, wait_dispatched
from tests.support.disk import RecordingDisk

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

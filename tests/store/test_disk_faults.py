"""Disk errors are fatal to guarantees, never silent (issue 9, item 3): a failed msync or
fsync is never retried into a PUT_OK, the store stops taking writes, reads go on."""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import AppendRawStatus, FlushDiskType, Message, MessageStore, PutMessageStatus
from store.checkpoint import read_checkpoint
from store.paths import TEMP_SUFFIX
from tests.support.disk import RecordingDisk
from tests.support.store import small_config, wait_dispatched


def _eio(operation: str) -> OSError:
    return OSError(errno.EIO, f"Input/output error ({operation})")


@pytest.fixture
def disk() -> RecordingDisk:
    return RecordingDisk()


def _start(tmp_path: Path, disk: RecordingDisk, **overrides: object) -> MessageStore:
    """A store whose flush thread is stopped: the test drives every flush."""
    store = MessageStore(small_config(tmp_path, sync_flush_timeout_ms=600_000, **overrides), disk)
    store.start()
    store.flush.stop()
    return store


@pytest.fixture
def sync_store(tmp_path: Path, disk: RecordingDisk) -> Iterator[MessageStore]:
    store = _start(tmp_path, disk, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    yield store
    if store.state.value == "RUNNING":
        store.shutdown()


def test_msync_error_fails_waiting_puts_and_is_never_retried(
    sync_store: MessageStore, disk: RecordingDisk, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An msync that fails once (as Linux reports a write-back error) completes every waiting
    SYNC_FLUSH put with UNKNOWN_ERROR, no later flush acknowledges them, later puts answer
    SERVICE_NOT_AVAILABLE, reads go on, and one log line says why."""
    store = sync_store
    waiting = [store.put_message(Message("Fault", b"m%d" % i))[1] for i in range(5)]
    disk.failures["msync"] = _eio("msync")
    disk.fail_once.add("msync")
    flushed_before = store.commit_log.flushed_offset
    with caplog.at_level(logging.ERROR):
        store.flush.flush_commit_log()
        for _ in range(3):  # the retry that would "succeed" on Linux
            store.flush.flush_commit_log()
            store.flush.checkpoint()
    assert [done.result(1) for done in waiting] == [PutMessageStatus.UNKNOWN_ERROR] * 5
    assert store.commit_log.flushed_offset == flushed_before
    assert sum(1 for name, *_ in disk.calls if name == "msync") == 1
    fault = store.health.fault
    assert fault is not None and fault.errno_name == "EIO"
    assert fault.operation == "commit-log msync"
    fault_lines = [r for r in caplog.records if "no longer writable" in r.getMessage()]
    assert len(fault_lines) == 1 and "EIO" in fault_lines[0].getMessage()
    result, done = store.put_message(Message("Fault", b"after"))
    assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "EIO" in result.detail and done.result(0) is PutMessageStatus.SERVICE_NOT_AVAILABLE
    batch = store.put_messages([Message("Fault", b"a"), Message("Fault", b"b")])
    assert {r.status for r, _ in batch} == {PutMessageStatus.SERVICE_NOT_AVAILABLE}
    assert store.append_raw(store.max_offset, b"x") is AppendRawStatus.STORE_NOT_WRITABLE
    wait_dispatched(store)
    read = sum(len(store.get_messages("Fault", q, 0, 100).messages) for q in range(4))
    assert read == 5
    store.shutdown()
    assert (tmp_path / "abort").exists()  # the next start runs crash recovery


def test_async_flush_error_stops_writes(tmp_path: Path, disk: RecordingDisk) -> None:
    """Under ASYNC_FLUSH a failed msync also stops writes: the fast put path refuses too."""
    store = _start(tmp_path, disk)
    try:
        assert store.put_message(Message("Fault", b"x"))[0].status is PutMessageStatus.PUT_OK
        disk.failures["msync"] = _eio("msync")
        store.flush.flush_commit_log()
        result, _ = store.put_message(Message("Fault", b"y"))
        assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    finally:
        store.shutdown()


def test_directory_fsync_error_is_a_fault(tmp_path: Path, disk: RecordingDisk) -> None:
    """A failed directory fsync (a new file's name) fails waiting puts like a failed msync."""
    store = _start(tmp_path, disk, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    try:
        disk.failures["fsync_directory"] = _eio("fsync")
        completions = []
        while len(store.commit_log.files.files) < 2:  # roll: a new name to make durable
            completions.append(store.put_message(Message("Fault", bytes(2000)))[1])
        store.flush.flush_commit_log()
        assert {done.result(1) for done in completions} == {PutMessageStatus.UNKNOWN_ERROR}
        assert store.health.fault is not None
    finally:
        store.shutdown()


def test_consume_queue_msync_error_writes_no_checkpoint(
    sync_store: MessageStore, disk: RecordingDisk
) -> None:
    """A consume-queue msync error faults the store and no checkpoint claims those entries."""
    store = sync_store
    store.put_message(Message("Fault", b"x"))
    wait_dispatched(store)
    store.flush.flush_commit_log()
    before = read_checkpoint(store.paths.checkpoint)
    disk.failures["msync"] = _eio("msync")  # the commit log has nothing new: the queue fails
    assert store.flush.checkpoint() is None
    assert read_checkpoint(store.paths.checkpoint) == before
    fault = store.health.fault
    assert fault is not None and fault.operation == "consume-queue msync"


def test_checkpoint_write_error_keeps_the_previous_checkpoint(
    sync_store: MessageStore, disk: RecordingDisk, tmp_path: Path
) -> None:
    """A checkpoint whose fsync fails leaves the previous checkpoint whole and no temp file,
    does not stop writes, and the next checkpoint is written."""
    store = sync_store
    store.put_message(Message("Fault", b"x"))
    wait_dispatched(store)
    before = read_checkpoint(store.paths.checkpoint)
    disk.failures["fsync"] = OSError(errno.ENOSPC, "No space left on device")
    disk.fail_once.add("fsync")
    assert store.flush.checkpoint() is None
    assert read_checkpoint(store.paths.checkpoint) == before
    assert not (tmp_path / ("checkpoint" + TEMP_SUFFIX)).exists()
    assert store.flush.checkpoint_failure_count == 1 and store.flush.checkpoint_error
    assert store.health.is_writable
    result, done = store.put_message(Message("Fault", b"y"))
    store.flush.flush_commit_log()
    assert done.result(1) is PutMessageStatus.PUT_OK
    written = store.flush.checkpoint()
    assert written is not None and read_checkpoint(store.paths.checkpoint) == written
    assert store.flush.checkpoint_error is None


def test_a_failing_checkpoint_spell_is_counted_and_logged_once(
    tmp_path: Path, disk: RecordingDisk, caplog: pytest.LogCaptureFixture
) -> None:
    """Every failed checkpoint write is counted, a spell of failures is logged once, at its
    first failure (the store's very first checkpoint, at start, here), not once per retry, and
    the first checkpoint written after it says how many failed and clears the error."""
    disk.failures["fsync"] = OSError(errno.ENOSPC, "No space left on device")
    with caplog.at_level(logging.INFO, logger="store.flush"):
        store = _start(tmp_path, disk, flush_disk_type=FlushDiskType.SYNC_FLUSH)
        try:
            assert store.flush.checkpoint_failure_count == 1
            assert _flush_log_lines(caplog) == [(logging.ERROR, None)]  # at once
            assert store.flush.checkpoint() is None
            assert store.flush.checkpoint_failure_count == 2
            assert "No space left on device" in (store.flush.checkpoint_error or "")
            del disk.failures["fsync"]
            assert store.flush.checkpoint() is not None
        finally:
            store.shutdown()
    assert _flush_log_lines(caplog) == [(logging.ERROR, None), (logging.INFO, 2)]
    assert store.flush.checkpoint_error is None


def _flush_log_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, object]]:
    """(level, the failure count it names, if any) of each line the flush service logged."""
    return [(record.levelno, record.args[0] if record.levelno == logging.INFO else None)
            for record in caplog.records if record.name == "store.flush"]

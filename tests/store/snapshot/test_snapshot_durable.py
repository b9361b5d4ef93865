"""Snapshots hold only what the store has made durable, and survive retention mid-export."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from store import BrokerRole, Message, MessageStore
from store.retention import RetentionService
from store.snapshot import (
    DirectoryLogFiles,
    ExportRequest,
    HeldLogFiles,
    LogFiles,
    SnapshotRangeRemoved,
    export_snapshot,
)
from store.snapshot.log_reader import LogFile
from store.waits.completion import PutCompletion
from tests.support.store import wait_dispatched

OpenStore = Callable[..., MessageStore]
MIB = 1 << 20


def produce(store: MessageStore, count: int, size: int = 300) -> list[int]:
    """Put `count` messages; return their commit-log offsets."""
    offsets = []
    for index in range(count):
        result, _ = store.put_message(Message("D", bytes([index % 251]) * size))
        offsets.append(result.commit_log_offset)
    wait_dispatched(store)
    return offsets


def exported_offsets(snapshot_root: Path) -> list[int]:
    table = ds.dataset(str(snapshot_root), format="parquet", partitioning="hive").to_table(
        columns=["commit_log_offset"])
    return sorted(table["commit_log_offset"].to_pylist())


def test_an_async_flush_snapshot_stops_at_the_flushed_offset(open_store: OpenStore,
                                                             tmp_path: Path) -> None:
    """With unflushed records at the tail (ASYNC_FLUSH), the confirmed offset is the flushed
    one and a snapshot up to it holds no byte past it."""
    store = open_store(data_dir=tmp_path / "data", mapped_file_size_bytes=MIB,
                       flush_interval_ms=600_000)
    flushed_offsets = produce(store, 100)
    flushed = store.commit_log.flush()
    produce(store, 50)
    assert store.confirmed_offset == flushed < store.max_offset
    manifest = export_snapshot(ExportRequest(
        store.config.data_dir, tmp_path / "out", range_to=store.confirmed_offset,
        log_files=HeldLogFiles(store.commit_log.files)))
    assert manifest.range_to == flushed and manifest.message_count == 100
    assert exported_offsets(tmp_path / "out") == flushed_offsets


def test_a_record_reaching_past_the_end_is_not_exported(open_store: OpenStore,
                                                        tmp_path: Path) -> None:
    """An end inside a record (a slave acknowledged only part of it) leaves that record out:
    the snapshot ends at the last record that ends at or before it."""
    store = open_store(data_dir=tmp_path / "data", mapped_file_size_bytes=MIB)
    offsets = produce(store, 10)
    manifest = export_snapshot(ExportRequest(store.config.data_dir, tmp_path / "out",
                                             range_to=offsets[6] + 10))
    assert manifest.message_count == 6 and manifest.range_to == offsets[6]
    assert exported_offsets(tmp_path / "out") == offsets[:6]


class FakeReplication:
    """A SYNC_MASTER's replication guard whose acknowledged offset the test sets."""

    def __init__(self) -> None:
        self.replicated = -1

    def replication_completion(self, end_offset: int) -> PutCompletion:
        raise AssertionError("not used: the test puts nothing while it is set")

    @property
    def pending_count(self) -> int:
        return 0

    def replicated_offset(self) -> int:
        return self.replicated


def test_a_sync_master_confirms_the_lower_of_flushed_and_replicated(
        open_store: OpenStore) -> None:
    """On a SYNC_MASTER the confirmed offset is min(flushed, replicated); an offset once
    replicated stays confirmed when the slaves go away."""
    store = open_store(broker_role=BrokerRole.SYNC_MASTER, mapped_file_size_bytes=MIB)
    offsets = produce(store, 10)
    flushed = store.commit_log.flush()
    assert store.confirmed_offset == 0  # nothing acknowledged by a slave yet
    guard = FakeReplication()
    store.set_replication(guard)
    guard.replicated = offsets[4]
    assert store.confirmed_offset == offsets[4]
    guard.replicated = -1  # the slave disconnected
    assert store.confirmed_offset == offsets[4]
    guard.replicated = store.max_offset
    assert store.confirmed_offset == flushed == store.max_offset
    store.set_replication(None)


def _retention(store: MessageStore) -> RetentionService:
    return RetentionService(store.config, store.commit_log, store.queues, store.dispatch,
                            used_ratio=lambda _: 0.99)


def _sources(store: MessageStore) -> dict[str, LogFiles | None]:
    """The running store's own files, or the data dir's by path (None: the default, what
    `twinlog export` beside a running broker reads)."""
    return {"held": HeldLogFiles(store.commit_log.files), "directory": None}


@pytest.mark.parametrize("source_name", ["held", "directory"])
def test_retention_mid_export_ends_the_snapshot_early(open_store: OpenStore, tmp_path: Path,
                                                      source_name: str) -> None:
    """Retention that removes the files ahead of a running export (run from the progress
    hook, after its first window) ends the snapshot at the last file it read; the next
    snapshot starts at the log's new start and counts the bytes it skipped."""
    store = open_store(data_dir=tmp_path / "data")
    produce(store, 400, size=1500)
    first = store.commit_log.files.first_file()
    assert first is not None and len(store.commit_log.files.files) >= 4
    removed: list[int] = []

    def retention_after_first_window(done_bytes: int, total_bytes: int) -> None:
        if not removed:
            removed.append(_retention(store).delete_expired())

    source = _sources(store)[source_name]
    manifest = export_snapshot(ExportRequest(
        store.config.data_dir, tmp_path / "out", log_files=source,
        progress=retention_after_first_window))
    assert removed and removed[0] >= 3
    assert 0 < manifest.range_to <= first.end_offset
    assert "removed by retention" in manifest.extra["ended_early"]
    assert exported_offsets(tmp_path / "out")[-1] < first.end_offset
    assert not first.path.exists()  # released by the export, then unlinked
    following = export_snapshot(ExportRequest(store.config.data_dir, tmp_path / "out",
                                              log_files=source))
    assert following.range_from == store.min_offset
    assert following.skipped_before_bytes == store.min_offset - manifest.range_to > 0


class RetentionBeforeOpen:
    """A LogFiles that runs retention just before the export opens its first file."""

    def __init__(self, inner: LogFiles, retention: RetentionService) -> None:
        self._inner = inner
        self._retention: RetentionService | None = retention

    def list(self) -> list[LogFile]:
        return self._inner.list()

    def open(self, log_file: LogFile) -> AbstractContextManager[int | None]:
        if self._retention is not None:
            self._retention.delete_expired()
            self._retention = None
        return self._inner.open(log_file)


@pytest.mark.parametrize("source_name", ["held", "directory"])
def test_retention_before_the_first_file_is_read_is_a_clear_error(
        open_store: OpenStore, tmp_path: Path, source_name: str) -> None:
    """When retention removes the range's first file before a record of it is read, the
    export fails with SnapshotRangeRemoved, naming the file, and leaves nothing behind."""
    store = open_store(data_dir=tmp_path / "data")
    produce(store, 400, size=1500)
    wait_dispatched(store)  # retention removes dispatched files only, and unheld at once
    first = store.commit_log.files.first_file()
    assert first is not None
    inner = _sources(store)[source_name] or DirectoryLogFiles(store.paths.commit_log_dir)
    source = RetentionBeforeOpen(inner, _retention(store))
    with pytest.raises(SnapshotRangeRemoved, match=first.path.name):
        export_snapshot(ExportRequest(store.config.data_dir, tmp_path / "out",
                                      log_files=source))
    assert list((tmp_path / "out").iterdir()) == []



"""Export a commit-log range `[from, to)` as a Parquet snapshot (pyarrow), in bounded memory.

Layout of one snapshot directory (schema 3; schema 1 and 2 had no store_hour level):
  messages/topic=<topic>/store_hour=<YYYYMMDDHH>/part-NNNNN.parquet
                                              the records (body optional), by topic and by
                                              the UTC hour of their store timestamp
  metadata/<table>.parquet                    topics, groups, consumer and delay offsets
  replication/diff_samples.parquet            the diff samples kept since the last snapshot
  _manifest.json                              id, range, counts, schema version

By default a snapshot starts where the newest one under the root ended, so snapshots are
incremental and never overlap. It is written to `.tmp-...` and renamed when complete. A running
broker passes the end (its confirmed offset: flushed, and on a SYNC_MASTER replicated) and its
own files (`HeldLogFiles`); a file that retention removes before the export reaches it ends the
snapshot there (a shorter snapshot; the next one records the bytes it skipped), or, when not
one record was read yet, fails with SnapshotRangeRemoved.

The log is read a window (16 MiB) at a time, checked and decoded in bulk (log_reader.py,
columns.py) on the calling thread while a writer thread encodes the previous window's rows
to Parquet; no more than a few windows are held at once. A message's RocketMQ msg_id is not
stored: it is the hex of `store_host` then of the big-endian `commit_log_offset`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from store.snapshot.columns import (
    DECODED_SCHEMA,
    MESSAGE_SCHEMA,
    DecodedWindow,
    decode_window,
    materialize,
)
from store.snapshot.log_reader import LogFile, LogFileRemoved, iter_windows, log_range
from store.snapshot.manifest import (
    MANIFEST_NAME,
    TEMP_PREFIX,
    Manifest,
    find_snapshots,
    snapshot_dir_name,
)
from store.snapshot.sources import DirectoryLogFiles, LogFiles

log = logging.getLogger(__name__)

SAMPLE_SCHEMA = pa.schema([
    ("timestamp_ms", pa.int64()),
    ("slave", pa.string()),
    ("ack_offset", pa.int64()),
    ("diff_bytes", pa.int64()),
])
BATCH_ROWS_MIN = 4096  # a topic's rows are buffered until there are that many ...
BATCH_BYTES_MIN = 2 * 1024 * 1024  # ... or that many bytes of log
BUFFERED_BYTES_MAX = 32 * 1024 * 1024
OPEN_WRITERS_MAX = 64
MS_PER_HOUR = 3_600_000
WRITES_PENDING_MAX = 2  # decoded windows waiting for the writer thread, at most
# Columns whose values rarely repeat: no dictionary encoding (it would be tried, then dropped).
_UNIQUE_COLUMNS = ("commit_log_offset", "queue_offset", "body")
_PARQUET_OPTIONS: dict[str, Any] = {
    "use_dictionary": [name for name in MESSAGE_SCHEMA.names if name not in _UNIQUE_COLUMNS],
    "write_statistics": [name for name in MESSAGE_SCHEMA.names if name != "body"],
}

Progress = Callable[[int, int], None]


class SnapshotError(Exception):
    """The export cannot be made as asked (a bad range, nothing to export, ...)."""


class SnapshotRangeRemoved(SnapshotError):
    """Retention removed the start of the range during the export, before any record of it
    was read: nothing was written, and the next export starts at the log's new start."""


@dataclass
class ExportRequest:
    data_dir: Path
    out_root: Path
    broker_name: str = "broker"
    broker_role: str = "ASYNC_MASTER"
    broker_group: str | None = None
    range_from: int | None = None
    range_to: int | None = None
    include_bodies: bool = True
    metadata_rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    replication_samples: Sequence[dict[str, Any]] = ()
    # Called after each window (and at the end): also where a test runs retention mid-export.
    progress: Progress | None = None
    # Where the log's files come from; None: the files under data_dir, by path.
    log_files: LogFiles | None = None


def export_snapshot(request: ExportRequest) -> Manifest:
    source = request.log_files or DirectoryLogFiles(request.data_dir / "commitlog")
    files = source.list()
    log_min, log_end = log_range(files)
    range_from = request.range_from
    if range_from is None:
        previous = find_snapshots(request.out_root)
        range_from = previous[-1][1].range_to if previous else log_min
    skipped = 0
    if range_from < log_min:
        skipped = log_min - range_from  # retention removed it before it was exported
        log.warning("snapshot: %d bytes before %d were removed before export", skipped, log_min)
        range_from = log_min
    range_to = log_end if request.range_to is None else request.range_to
    if range_to < range_from:
        raise SnapshotError(f"empty or reversed range [{range_from}, {range_to})")
    request.out_root.mkdir(parents=True, exist_ok=True)
    temp = request.out_root / f"{TEMP_PREFIX}{uuid.uuid4().hex}"
    temp.mkdir()
    try:
        writer = _MessageWriter(temp / "messages")
        end, removed = _export_messages(files, source, range_from, range_to, request, writer)
        if writer.count == 0 and removed is not None:
            raise SnapshotRangeRemoved(
                f"{removed}, during the export of [{range_from}, {range_to}) and before any "
                "record was read; nothing was exported, the next export starts at the log's "
                "new start")
        if writer.count == 0:
            raise SnapshotError(f"no records to export from offset {range_from}")
        if removed is not None:
            log.warning("snapshot: %s; the snapshot ends at %d", removed, end)
        metadata_rows = _write_metadata(temp / "metadata", request.metadata_rows)
        _write_table(temp / "replication" / "diff_samples.parquet",
                     pa.Table.from_pylist(list(request.replication_samples), SAMPLE_SCHEMA))
        manifest = Manifest(
            snapshot_id=uuid.uuid4().hex,
            broker_name=request.broker_name,
            broker_role=request.broker_role,
            broker_group=request.broker_group,
            range_from=range_from,
            range_to=end,
            message_count=writer.count,
            body_bytes=writer.body_bytes,
            include_bodies=request.include_bodies,
            topics=dict(sorted(writer.topic_counts.items())),
            metadata_rows=metadata_rows,
            replication_samples=len(request.replication_samples),
            created_ms=int(time.time() * 1000),
            skipped_before_bytes=skipped,
            extra={"ended_early": removed} if removed is not None else {},
        )
        _write_file(temp / MANIFEST_NAME, manifest.to_json().encode())
        _fsync_dir(temp)
        final = request.out_root / snapshot_dir_name(range_from, end)
        if final.exists():
            raise SnapshotError(f"{final} exists already: that range was exported before")
        os.rename(temp, final)
        _fsync_dir(request.out_root)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    if request.progress is not None:
        request.progress(end - range_from, end - range_from)
    return manifest


def _export_messages(files: list[LogFile], source: LogFiles, range_from: int, range_to: int,
                     request: ExportRequest, writer: _MessageWriter) -> tuple[int, str | None]:
    """Read and decode the range a window at a time on this thread while a writer thread
    encodes the windows before it (pyarrow's Parquet writer runs without the GIL). Returns
    the offset after the last record exported, and why the export ended early when
    retention removed a file before it was read. At most WRITES_PENDING_MAX windows wait for
    the writer: memory stays bounded whatever the log's size."""
    end = range_from
    removed: str | None = None
    with (ThreadPoolExecutor(1, thread_name_prefix="snapshot-writer") as pool,
          closing(iter_windows(files, range_from, range_to, open_file=source.open)) as windows):
        pending: deque[Future[None]] = deque()
        try:
            for window in windows:
                decoded = decode_window(window, request.include_bodies)
                del window  # the decoded rows hold what they need of the mapping
                if len(pending) >= WRITES_PENDING_MAX:
                    pending.popleft().result()
                if decoded.count:
                    pending.append(pool.submit(writer.add, decoded))
                    end = decoded.end_offset
                if request.progress is not None:
                    request.progress(end - range_from, range_to - range_from)
                if not decoded.complete:
                    break  # an invalid record: nothing after it is exported
        except LogFileRemoved as error:
            removed = str(error)  # the records before that file are exported
        while pending:
            pending.popleft().result()
        pool.submit(writer.close).result()
    return end, removed


class _MessageWriter:
    """Decoded windows written a topic at a time. A topic's rows go straight to its Parquet
    file when there are BATCH_ROWS_MIN of them (or BATCH_BYTES_MIN of log), their bodies read
    from the mapped log as they are encoded; fewer are copied out and buffered
    (BUFFERED_BYTES_MAX in all) until there are enough. Memory stays bounded whatever the
    log's size."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._buffers: dict[str, _Buffered] = {}
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._parts: dict[str, int] = {}
        self._buffered_bytes = 0
        self.count = 0
        self.body_bytes = 0
        self.topic_counts: dict[str, int] = {}

    def add(self, window: DecodedWindow) -> None:
        for group in window.groups:
            rows = window.batch.slice(group.begin, group.end - group.begin)
            topic = group.topic
            self.topic_counts[topic] = self.topic_counts.get(topic, 0) + rows.num_rows
            for hour, hour_rows, log_bytes in _by_store_hour(rows, group.log_bytes):
                self._add_rows(f"topic={_escape(topic)}/store_hour={hour}", hour_rows,
                               log_bytes)
        self.count += window.count
        self.body_bytes += window.body_bytes
        if self._buffered_bytes >= BUFFERED_BYTES_MAX:
            for name in list(self._buffers):
                self._write(name, self._buffers.pop(name).batches)
            self._buffered_bytes = 0

    def _add_rows(self, partition: str, rows: pa.RecordBatch, log_bytes: int) -> None:
        """A partition's rows written, or buffered until it has enough."""
        buffered = self._buffers.pop(partition, None) or _Buffered()
        self._buffered_bytes -= buffered.log_bytes
        if (buffered.rows + rows.num_rows >= BATCH_ROWS_MIN
                or buffered.log_bytes + log_bytes >= BATCH_BYTES_MIN):
            self._write(partition, [*buffered.batches, rows])
            return
        buffered.batches.append(_compact(rows))  # a copy: nothing of the window is kept
        buffered.rows += rows.num_rows
        buffered.log_bytes += log_bytes
        self._buffers[partition] = buffered
        self._buffered_bytes += buffered.log_bytes

    def _write(self, partition: str, batches: list[pa.RecordBatch]) -> None:
        writer = self._writers.get(partition)
        if writer is None:
            if len(self._writers) >= OPEN_WRITERS_MAX:
                oldest = next(iter(self._writers))
                self._writers.pop(oldest).close()
            part = self._parts.get(partition, 0)
            self._parts[partition] = part + 1
            directory = self._directory / partition
            directory.mkdir(parents=True, exist_ok=True)
            # The bodies are binary views; without the Arrow schema in the file, readers
            # take the Parquet schema, which is MESSAGE_SCHEMA's (binary) exactly.
            writer = pq.ParquetWriter(directory / f"part-{part:05d}.parquet", DECODED_SCHEMA,
                                      store_schema=False, **_PARQUET_OPTIONS)
            self._writers[partition] = writer
        views = [batch if batch.schema.equals(DECODED_SCHEMA) else batch.cast(DECODED_SCHEMA)
                 for batch in batches]
        writer.write_table(pa.Table.from_batches(views, DECODED_SCHEMA))

    def close(self) -> None:
        for partition in list(self._buffers):
            self._write(partition, self._buffers.pop(partition).batches)
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


@dataclass
class _Buffered:
    """A topic's rows waiting for more: copies, `log_bytes` of log."""

    batches: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0
    log_bytes: int = 0


def _compact(rows: pa.RecordBatch) -> pa.RecordBatch:
    """The rows copied into arrays of their own (a slice shares its window's buffers)."""
    return materialize(rows).take(pa.array(np.arange(rows.num_rows)))


def store_hour(timestamp_ms: int) -> int:
    """The UTC hour of a store timestamp as YYYYMMDDHH: readable, and ordered like time."""
    moment = datetime.fromtimestamp(timestamp_ms // 1000, UTC)
    return int(moment.strftime("%Y%m%d%H"))


def _by_store_hour(rows: pa.RecordBatch,
                   log_bytes: int) -> Iterator[tuple[int, pa.RecordBatch, int]]:
    """A topic's rows split into runs of one store hour (slices: the bodies stay views), each
    with its log bytes. Store timestamps follow the log, so a window's rows almost always
    fall in one hour and are passed on whole; a clock set back only makes more runs."""
    hours = rows.column("store_timestamp_ms").to_numpy() // MS_PER_HOUR
    if (hours == hours[0]).all():
        yield store_hour(int(hours[0]) * MS_PER_HOUR), rows, log_bytes
        return
    sizes = rows.column("size_bytes").to_numpy()
    bounds = [0, *(np.flatnonzero(hours[1:] != hours[:-1]) + 1).tolist(), len(hours)]
    for begin, end in zip(bounds, bounds[1:], strict=False):
        yield (store_hour(int(hours[begin]) * MS_PER_HOUR), rows.slice(begin, end - begin),
               int(sizes[begin:end].sum()))


def _escape(topic: str) -> str:
    """Hive-style partition value: '%' is the only topic character readers unescape."""
    return topic.replace("%", "%25")


def _write_metadata(directory: Path, tables: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    counts = {}
    for name, rows in sorted(tables.items()):
        prepared = [{key: json.dumps(value) if isinstance(value, dict | list) else value
                     for key, value in row.items()} for row in rows]
        table = pa.Table.from_pylist(prepared) if prepared else pa.table({"empty": pa.array(
            [], pa.int8())})
        _write_table(directory / f"{name}.parquet", table)
        counts[name] = len(rows)
    return counts


def _write_table(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def metadata_rows(metadata: Any) -> dict[str, list[dict[str, Any]]]:
    """Every metadata table's rows as plain data (`metadata` is a MetadataStore)."""
    from store.metadata import MetadataTable

    return {table.value: list(metadata.export_table(table)["rows"]) for table in MetadataTable}

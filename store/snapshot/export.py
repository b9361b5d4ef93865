"""Export a commit-log range `[from, to)` as a Parquet snapshot (pyarrow), in bounded memory.

Layout of one snapshot directory:
  messages/topic=<topic>/part-NNNNN.parquet   the records (body optional), by topic
  metadata/<table>.parquet                    topics, groups, consumer and delay offsets
  replication/diff_samples.parquet            the diff samples kept since the last snapshot
  _manifest.json                              id, range, counts, schema version

By default a snapshot starts where the newest one under the root ended, so snapshots are
incremental and never overlap. It is written to `.tmp-...` and renamed when complete.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from store.record import StoredMessage
from store.snapshot.log_reader import iter_records, list_log_files, log_range
from store.snapshot.manifest import (
    MANIFEST_NAME,
    TEMP_PREFIX,
    Manifest,
    find_snapshots,
    snapshot_dir_name,
)

log = logging.getLogger(__name__)

MESSAGE_SCHEMA = pa.schema([
    ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()),
    ("commit_log_offset", pa.int64()),
    ("size_bytes", pa.int32()),
    ("born_timestamp_ms", pa.int64()),
    ("store_timestamp_ms", pa.int64()),
    ("msg_id", pa.string()),
    ("keys", pa.string()),
    ("tags", pa.string()),
    ("properties", pa.map_(pa.string(), pa.string())),
    ("body", pa.binary()),
])
SAMPLE_SCHEMA = pa.schema([
    ("timestamp_ms", pa.int64()),
    ("slave", pa.string()),
    ("ack_offset", pa.int64()),
    ("diff_bytes", pa.int64()),
])
BATCH_ROWS_MAX = 4096
BUFFERED_BYTES_MAX = 32 * 1024 * 1024
OPEN_WRITERS_MAX = 64

Progress = Callable[[int, int], None]


class SnapshotError(Exception):
    """The export cannot be made as asked (a bad range, nothing to export, ...)."""


@dataclass
class ExportRequest:
    data_dir: Path
    out_root: Path
    broker_name: str = "broker"
    broker_role: str = "ASYNC_MASTER"
    range_from: int | None = None
    range_to: int | None = None
    include_bodies: bool = True
    metadata_rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    replication_samples: Sequence[dict[str, Any]] = ()
    progress: Progress | None = None


def export_snapshot(request: ExportRequest) -> Manifest:
    files = list_log_files(request.data_dir / "commitlog")
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
        writer = _MessageWriter(temp / "messages", request.include_bodies)
        end = range_from
        for record in iter_records(files, range_from, range_to):
            writer.add(record)
            end = record.commit_log_offset + record.total_size
            if request.progress is not None and writer.count % 10_000 == 0:
                request.progress(end - range_from, range_to - range_from)
        writer.close()
        if writer.count == 0:
            raise SnapshotError(f"no records to export from offset {range_from}")
        metadata_rows = _write_metadata(temp / "metadata", request.metadata_rows)
        _write_table(temp / "replication" / "diff_samples.parquet",
                     pa.Table.from_pylist(list(request.replication_samples), SAMPLE_SCHEMA))
        manifest = Manifest(
            snapshot_id=uuid.uuid4().hex,
            broker_name=request.broker_name,
            broker_role=request.broker_role,
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


_COLUMNS = [name for name in MESSAGE_SCHEMA.names]


class _TopicBuffer:
    """One topic's rows, kept as columns (building Arrow arrays from lists is cheap)."""

    __slots__ = ("columns", "size_bytes")

    def __init__(self) -> None:
        self.columns: list[list[Any]] = [[] for _ in _COLUMNS]
        self.size_bytes = 0


class _MessageWriter:
    """Rows buffered per topic and written as record batches: memory stays bounded by
    BATCH_ROWS_MAX rows a topic and BUFFERED_BYTES_MAX in all, whatever the log's size."""

    def __init__(self, directory: Path, include_bodies: bool) -> None:
        self._directory = directory
        self._include_bodies = include_bodies
        self._buffers: dict[str, _TopicBuffer] = {}
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._parts: dict[str, int] = {}
        self._buffered_bytes = 0
        self.count = 0
        self.body_bytes = 0
        self.topic_counts: dict[str, int] = {}

    def add(self, record: StoredMessage) -> None:
        topic = record.topic
        buffer = self._buffers.get(topic)
        if buffer is None:
            buffer = self._buffers[topic] = _TopicBuffer()
        properties = record.properties
        values = (
            record.queue_id, record.queue_offset, record.commit_log_offset, record.total_size,
            record.born_timestamp_ms, record.store_timestamp_ms, record.msg_id,
            properties.get("KEYS"), properties.get("TAGS"), list(properties.items()),
            record.body if self._include_bodies else None,
        )
        for column, value in zip(buffer.columns, values, strict=True):
            column.append(value)
        buffer.size_bytes += record.total_size
        self.count += 1
        self.body_bytes += len(record.body)
        self.topic_counts[topic] = self.topic_counts.get(topic, 0) + 1
        self._buffered_bytes += record.total_size
        if len(buffer.columns[0]) >= BATCH_ROWS_MAX:
            self._flush(topic)
        elif self._buffered_bytes >= BUFFERED_BYTES_MAX:
            for name in list(self._buffers):
                self._flush(name)

    def _flush(self, topic: str) -> None:
        buffer = self._buffers.pop(topic, None)
        if buffer is None:
            return
        self._buffered_bytes -= buffer.size_bytes
        writer = self._writers.get(topic)
        if writer is None:
            if len(self._writers) >= OPEN_WRITERS_MAX:
                oldest = next(iter(self._writers))
                self._writers.pop(oldest).close()
            part = self._parts.get(topic, 0)
            self._parts[topic] = part + 1
            directory = self._directory / f"topic={_escape(topic)}"
            directory.mkdir(parents=True, exist_ok=True)
            writer = pq.ParquetWriter(directory / f"part-{part:05d}.parquet", MESSAGE_SCHEMA)
            self._writers[topic] = writer
        arrays = [pa.array(column, type=field.type)
                  for column, field in zip(buffer.columns, MESSAGE_SCHEMA, strict=True)]
        writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=MESSAGE_SCHEMA))

    def close(self) -> None:
        for topic in list(self._buffers):
            self._flush(topic)
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


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

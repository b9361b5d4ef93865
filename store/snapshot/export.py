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

The messages are written by messages.py (a window at a time, in bounded memory), paced by a
reading budget (`bytes_per_s`, throttle.py), on the calling thread or spread over worker
processes (`workers`, parallel.py). A message's RocketMQ msg_id is not stored: it is the hex
of `store_host` then of the big-endian `commit_log_offset`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from store.snapshot.errors import SnapshotError, SnapshotRangeRemoved
from store.snapshot.log_reader import LogFile, log_range
from store.snapshot.manifest import (
    MANIFEST_NAME,
    TEMP_PREFIX,
    Manifest,
    find_snapshots,
    snapshot_dir_name,
)
from store.snapshot.messages import MessageWriter, Progress, Totals, export_messages
from store.snapshot.parallel import export_parallel, plan
from store.snapshot.sources import DirectoryLogFiles, LogFiles
from store.snapshot.throttle import Clock, Sleep, Throttle

log = logging.getLogger(__name__)

SAMPLE_SCHEMA = pa.schema([
    ("timestamp_ms", pa.int64()),
    ("slave", pa.string()),
    ("ack_offset", pa.int64()),
    ("diff_bytes", pa.int64()),
    ("slave_id", pa.string()),  # the slave's stable id; null in samples that predate it
])
WORKERS_MAX = 16


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
    # Reading budget (0: none), and worker processes (1: on the calling thread; more: by
    # path, see parallel.py). Each worker gets its share of the budget.
    bytes_per_s: float = 0
    workers: int = 1
    clock: Clock = time.monotonic  # the budget's: tests drive a fake one
    sleep: Sleep = time.sleep


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
        written = _write_messages(files, source, range_from, range_to, request, temp)
        end, removed = written.end, written.removed
        if written.count == 0 and removed is not None:
            raise SnapshotRangeRemoved(
                f"{removed}, during the export of [{range_from}, {range_to}) and before any "
                "record was read; nothing was exported, the next export starts at the log's "
                "new start")
        if written.count == 0:
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
            message_count=written.count,
            body_bytes=written.body_bytes,
            include_bodies=request.include_bodies,
            topics=dict(sorted(written.topic_counts.items())),
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


def _write_messages(files: list[LogFile], source: LogFiles, range_from: int, range_to: int,
                    request: ExportRequest, temp: Path) -> Totals:
    """The range's messages under temp/messages: on this process, or spread over
    `request.workers` processes when the range has more than one segment."""
    directory = temp / "messages"
    segments = plan(files, range_from, range_to, directory, request.include_bodies,
                    request.bytes_per_s / max(1, request.workers))
    if request.workers > 1 and len(segments) > 1:
        return export_parallel(segments, min(request.workers, WORKERS_MAX), range_from,
                               range_to, request.progress)
    writer = MessageWriter(directory)
    throttle = Throttle(request.bytes_per_s, request.clock, request.sleep)
    written = export_messages(files, source.open, range_from, range_to, writer,
                              request.include_bodies, throttle, request.progress)
    return Totals(writer.count, writer.body_bytes, writer.topic_counts, written.end,
                  written.removed)


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

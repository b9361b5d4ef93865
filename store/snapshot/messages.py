"""A commit-log range's messages written as Parquet under a snapshot's messages/ directory,
partitioned by topic and store hour (messages/topic=<topic>/store_hour=<YYYYMMDDHH>/), in
bounded memory.

The log is read a window (16 MiB) at a time, checked and decoded in bulk (log_reader.py,
columns.py) on the calling thread while a writer thread encodes the previous window's rows
to Parquet; no more than a few windows are held at once. A budget (throttle.py) paces the
reading. `export_messages` stops at the first invalid record, at the range's end, at a
record that starts at or past `stop` (a segment's end, parallel.py), or before a file that
retention removed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
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
from store.snapshot.log_reader import (
    LogFile,
    LogFileRemoved,
    OpenLogFile,
    RecordWindow,
    iter_windows,
)
from store.snapshot.throttle import Throttle
from store.system_topics import is_system_topic

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


@dataclass(frozen=True)
class Written:
    """Where an export_messages call ended: the offset after its last record, why it ended
    early when retention removed a file, and whether it met an invalid record."""

    end: int
    removed: str | None = None
    invalid: bool = False


def export_messages(files: list[LogFile], open_file: OpenLogFile, range_from: int,
                    range_to: int, writer: MessageWriter, include_bodies: bool,
                    throttle: Throttle, progress: Progress | None = None,
                    stop: int | None = None) -> Written:
    """Read and decode the range a window at a time on this thread while a writer thread
    encodes the windows before it (pyarrow's Parquet writer runs without the GIL); records
    that start at or past `stop` are left out. At most WRITES_PENDING_MAX windows wait for
    the writer: memory stays bounded whatever the log's size."""
    end = range_from
    with (ThreadPoolExecutor(1, thread_name_prefix="snapshot-writer") as pool,
          closing(iter_windows(files, range_from, range_to, open_file=open_file)) as windows):
        pending: deque[Future[None]] = deque()
        written = Written(end)
        try:
            for whole in windows:
                window, cut = _before(whole, stop)
                del whole
                if window is None:
                    break
                decoded = decode_window(window, include_bodies)
                del window  # the decoded rows hold what they need of the mapping
                if len(pending) >= WRITES_PENDING_MAX:
                    pending.popleft().result()
                if decoded.count:
                    pending.append(pool.submit(writer.add, decoded))
                    throttle.spend(decoded.end_offset - end)
                    end = decoded.end_offset
                if progress is not None:
                    progress(end - range_from, range_to - range_from)
                if not decoded.complete:
                    written = Written(end, invalid=True)  # nothing after it is exported
                    break
                if cut:
                    break
            else:
                written = Written(end)
        except LogFileRemoved as error:
            written = Written(end, removed=str(error))  # the records before it are exported
        while pending:
            pending.popleft().result()
        pool.submit(writer.close).result()
    return Written(end, written.removed, written.invalid)


def _before(window: RecordWindow, stop: int | None) -> tuple[RecordWindow | None, bool]:
    """The window's records that start before `stop` (None: not one), and whether any
    was left out."""
    if stop is None:
        return window, False
    count = int(np.searchsorted(window.starts + window.base_offset, stop))
    if count == window.count:
        return window, False
    return (window.prefix(count) if count else None), True


class MessageWriter:
    """Decoded windows written a topic at a time. A topic's rows go straight to its Parquet
    file when there are BATCH_ROWS_MIN of them (or BATCH_BYTES_MIN of log), their bodies read
    from the mapped log as they are encoded; fewer are copied out and buffered
    (BUFFERED_BYTES_MAX in all) until there are enough. Memory stays bounded whatever the
    log's size."""

    def __init__(self, directory: Path, prefix: str = "part") -> None:
        self._directory = directory
        self._prefix = prefix  # of the part files' names: writers in parallel differ by it
        self.files: list[Path] = []
        self._buffers: dict[str, _Buffered] = {}
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._parts: dict[str, int] = {}
        self._buffered_bytes = 0
        self.count = 0
        self.body_bytes = 0
        self.topic_counts: dict[str, int] = {}

    def add(self, window: DecodedWindow) -> None:
        """A window's client messages; records of the broker's own topics (metadata changes,
        store/system_topics.py) are not messages and are left out."""
        count, body_bytes = window.count, window.body_bytes
        for group in window.groups:
            rows = window.batch.slice(group.begin, group.end - group.begin)
            topic = group.topic
            if is_system_topic(topic):
                count -= rows.num_rows
                # (few rows, and binary_view has no length kernel: read them)
                body_bytes -= sum(len(body) for body in rows.column("body").to_pylist())
                continue
            self.topic_counts[topic] = self.topic_counts.get(topic, 0) + rows.num_rows
            for hour, hour_rows, log_bytes in _by_store_hour(rows, group.log_bytes):
                self._add_rows(f"topic={_escape(topic)}/store_hour={hour}", hour_rows,
                               log_bytes)
        self.count += count
        self.body_bytes += body_bytes
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
            path = directory / f"{self._prefix}-{part:05d}.parquet"
            writer = pq.ParquetWriter(path, DECODED_SCHEMA, store_schema=False,
                                      **_PARQUET_OPTIONS)
            self.files.append(path)
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
    """The rows copied into arrays of their own (a slice shares its window's buffers). The
    bodies are copied once, out of the mapped log, by materialize's cast (a slice cast is a
    new array of the slice's values only); the other columns by a take."""
    cast = materialize(rows)
    indices = pa.array(np.arange(rows.num_rows))
    return pa.RecordBatch.from_arrays(
        [column if name == "body" else column.take(indices)
         for name, column in zip(cast.schema.names, cast.columns, strict=True)],
        schema=MESSAGE_SCHEMA)


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




@dataclass
class Totals:
    """What was written of a range: messages, body bytes, per-topic counts, the offset after
    the last record, and why it ended early when retention removed a file."""

    count: int = 0
    body_bytes: int = 0
    topic_counts: dict[str, int] = field(default_factory=dict)
    end: int = 0
    removed: str | None = None

    def add(self, other: Totals) -> None:
        self.count += other.count
        self.body_bytes += other.body_bytes
        for topic, count in other.topic_counts.items():
            self.topic_counts[topic] = self.topic_counts.get(topic, 0) + count
        self.end = other.end
        self.removed = other.removed

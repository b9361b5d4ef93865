"""A read-only view of a store's files for a process that does not append (a read worker).

It answers `MessageStore.get_encoded`'s reads with the store's own read code
(store/encoded_reads.py, store/reads.py) over the commit log's and consume queues' files,
opened read-only and mapped shared, bounded by what the appending process published
(store/shared_reads/ends_table.py): a queue's entries up to its published max, no record
below the published log start. A read of a queue that is not published, or not readable,
gets None: the caller leaves it to the appending process.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from store.commit_log import CommitLog
from store.encoded_reads import EncodedRead, EncodedRecords, Encoder
from store.index.consume_queue import ConsumeQueues
from store.index.queue_entries import ENTRY, ENTRY_SIZE
from store.paths import StorePaths, name_to_offset
from store.reads import READ_BYTES_MAX
from store.record import RecordError, StoredMessage, decode_record
from store.shared_reads.ends_table import EndsReader

# Files a view keeps mapped per directory before it unmaps the oldest.
MAPPED_FILES_MAX = 64


class _ReadOnlyFiles:
    """A directory of files named by start offset, mapped read-only as reads need them."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._maps: dict[int, mmap.mmap] = {}  # start offset -> mapping

    def find(self, offset: int) -> tuple[int, mmap.mmap] | None:
        """The file holding `offset` (its start and mapping), None when there is none."""
        for start, mapped in self._maps.items():
            if start <= offset < start + len(mapped):
                return start, mapped
        return self._open_for(offset)

    def _open_for(self, offset: int) -> tuple[int, mmap.mmap] | None:
        try:
            names = os.listdir(self._directory)
        except FileNotFoundError:
            return None
        starts = sorted(start for start in map(name_to_offset, names) if start is not None)
        below = [start for start in starts if start <= offset]
        if not below:
            return None
        start = below[-1]
        try:
            fd = os.open(self._directory / f"{start:020d}", os.O_RDONLY)
        except FileNotFoundError:
            return None  # removed meanwhile
        try:
            size = os.fstat(fd).st_size
            if not start <= offset < start + size:
                return None
            mapped = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        if len(self._maps) >= MAPPED_FILES_MAX:
            self._maps.pop(min(self._maps)).close()
        self._maps[start] = mapped
        return start, mapped

    def drop_below(self, offset: int) -> None:
        """Unmap the files that end at or below `offset` (retention removed them)."""
        for start in [start for start, mapped in self._maps.items()
                      if start + len(mapped) <= offset]:
            self._maps.pop(start).close()

    def close(self) -> None:
        for mapped in self._maps.values():
            mapped.close()
        self._maps.clear()


class _ReadOnlyQueue:
    """One consume queue as store/reads.py reads it: its ends and its entries."""

    def __init__(self, directory: Path) -> None:
        self.files = _ReadOnlyFiles(directory)
        self.min_queue_offset = 0
        self.max_queue_offset = 0

    def entries(self, start: int, count: int) -> list[tuple[int, int, int] | None]:
        """ConsumeQueue.entries: from `start`, at most `count`, none past the max."""
        found: list[tuple[int, int, int] | None] = []
        offset = start
        end = min(start + count, self.max_queue_offset)
        while offset < end:
            held = self.files.find(offset * ENTRY_SIZE)
            if held is None:
                found.append(None)
                offset += 1
                continue
            file_start, mapped = held
            last = min(end, (file_start + len(mapped)) // ENTRY_SIZE)
            position = offset * ENTRY_SIZE - file_start
            raw = mapped[position:position + (last - offset) * ENTRY_SIZE]
            found += [entry if entry[0] >= 0 and entry[1] > 0 else None
                      for entry in ENTRY.iter_unpack(raw)]
            offset = last
        return found


class _ReadOnlyQueues:
    """ConsumeQueues as store/reads.py's `place_read` uses them: `get` by topic and queue."""

    def __init__(self, paths: StorePaths) -> None:
        self._paths = paths
        self._queues: dict[tuple[str, int], _ReadOnlyQueue] = {}

    def get(self, topic: str, queue_id: int) -> _ReadOnlyQueue | None:
        return self._queues.get((topic, queue_id))

    def placed(self, topic: str, queue_id: int, low: int, high: int) -> None:
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            queue = self._queues[(topic, queue_id)] = _ReadOnlyQueue(
                self._paths.consume_queue_for(topic, queue_id))
        queue.min_queue_offset, queue.max_queue_offset = low, high

    def close(self) -> None:
        for queue in self._queues.values():
            queue.files.close()
        self._queues.clear()


class _ReadOnlyLog:
    """The commit log as store/encoded_reads.py reads it: records by offset, its start."""

    def __init__(self, directory: Path, ends: EndsReader) -> None:
        self.files = _ReadOnlyFiles(directory)
        self._ends = ends
        self.min_offset = 0
        self.generation = 0

    def read_records(self, offsets: Sequence[int]) -> list[StoredMessage | None]:
        found: list[StoredMessage | None] = []
        for offset in offsets:
            held = self.files.find(offset) if offset >= self.min_offset else None
            if held is None:
                found.append(None)
                continue
            start, mapped = held
            with memoryview(mapped) as view:
                try:
                    found.append(decode_record(view, offset - start))
                except RecordError:
                    found.append(None)  # (the error, and the view its traceback holds, end here)
        return found


class StoreReadView:
    """`get_encoded` reads of a store another process appends to."""

    def __init__(self, store_dir: Path, ends_path: Path, cache_bytes_max: int) -> None:
        paths = StorePaths(store_dir)
        self.ends = EndsReader(ends_path)
        self._log = _ReadOnlyLog(paths.commit_log_dir, self.ends)
        self._queues = _ReadOnlyQueues(paths)
        self._encoded = EncodedRecords(cast(CommitLog, self._log), cache_bytes_max)
        self._change_sequence = self.ends.change_sequence()

    def get_encoded(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
                    encoder: Encoder, misses_max: int,
                    max_bytes: int = READ_BYTES_MAX) -> EncodedRead | None:
        """MessageStore.get_encoded's read; None when the queue is not published readable
        (the appending process answers it)."""
        change_sequence = self.ends.change_sequence()
        if change_sequence != self._change_sequence:
            # a topic deleted (its files may be new ones now), a truncation, retention: the
            # mappings of the queues are dropped, the log's below its start
            self._change_sequence = change_sequence
            self._queues.close()
        ends = self.ends.ends(topic, queue_id)
        if ends is None or not ends.readable:
            return None
        self._queues.placed(topic, queue_id, ends.min_queue_offset, ends.max_queue_offset)
        log = self._log
        log_min_offset = self.ends.log_min_offset()
        if log_min_offset != log.min_offset:
            log.min_offset = log_min_offset
            log.files.drop_below(log_min_offset)
        log.generation = change_sequence // 2
        return self._encoded.read(cast(ConsumeQueues, self._queues), topic, queue_id,
                                  queue_offset, max_count, encoder, misses_max, max_bytes)

    def close(self) -> None:
        self._queues.close()
        self._log.files.close()
        self.ends.close()

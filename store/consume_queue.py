"""Consume queues: per topic and queue, 20-byte entries (commit-log offset, size, tags code).

Entry `i` of a queue lives at byte `i * 20` of its log of files, so queue offsets and file
names agree. Entries are written only by dispatch, in queue-offset order.
"""

from __future__ import annotations

import logging
import shutil
import struct
import threading
from pathlib import Path

from store.config import CONSUME_QUEUE_ENTRY_SIZE_BYTES, StoreConfig
from store.disk import REAL_DISK, Disk
from store.errors import StoreCorruptError
from store.mapped_file_queue import MappedFileQueue
from store.topic import is_valid_topic

log = logging.getLogger(__name__)

ENTRY = struct.Struct(">qiq")
ENTRY_SIZE = CONSUME_QUEUE_ENTRY_SIZE_BYTES
assert ENTRY.size == ENTRY_SIZE
_ZERO_ENTRY = bytes(ENTRY_SIZE)

# (queue offset, commit-log offset, size, tags code), as dispatch collects them.
Entry = tuple[int, int, int, int]


class ConsumeQueue:
    def __init__(self, directory: Path, topic: str, queue_id: int, file_size_bytes: int,
                 disk: Disk = REAL_DISK) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self._files = MappedFileQueue(directory, file_size_bytes, disk)

    def load(self) -> None:
        """Map the files and find where the last file's written entries end.

        Entries are written in order, so the written ones form a prefix: binary search for the
        first all-zero entry (a gap filler is (-1, 0, 0), never all zeros).
        """
        self._files.load()
        last = self._files.last_file()
        if last is None:
            return
        low, high = 0, last.size_bytes // ENTRY_SIZE
        while low < high:
            middle = (low + high) // 2
            if last.view(middle * ENTRY_SIZE, ENTRY_SIZE) == _ZERO_ENTRY:
                high = middle
            else:
                low = middle + 1
        last.write_position = low * ENTRY_SIZE
        last.flushed_position = last.write_position

    @property
    def min_queue_offset(self) -> int:
        return self._files.min_offset // ENTRY_SIZE

    @property
    def max_queue_offset(self) -> int:
        """The next queue offset to be written (one past the last entry)."""
        return self._files.max_offset // ENTRY_SIZE

    def put(self, queue_offset: int, commit_log_offset: int, size: int, tags_code: int) -> bool:
        """Write the entry for `queue_offset`; an entry already there is left as it is."""
        expected = self.max_queue_offset
        if queue_offset < expected:
            return False  # redispatch after recovery: the entry was flushed before the crash
        if queue_offset > expected:
            if expected != 0 or self._files.last_file() is not None:
                log.error(
                    "consume queue %s/%d: entry %d arrives while %d is expected; filling the gap",
                    self.topic, self.queue_id, queue_offset, expected,
                )
            self._fill_gap(expected, queue_offset)
        byte_offset = queue_offset * ENTRY_SIZE
        mapped = self._files.writable_file(
            start_if_empty=byte_offset - byte_offset % self._files.file_size_bytes
        )
        if mapped.write_offset < byte_offset:
            mapped.write_position = byte_offset - mapped.start_offset
        mapped.append(ENTRY.pack(commit_log_offset, size, tags_code))
        return True

    def put_many(self, entries: list[Entry]) -> None:
        """Entries in queue-offset order: runs of consecutive ones are written at once."""
        index = 0
        while index < len(entries):
            queue_offset = entries[index][0]
            expected = self.max_queue_offset
            if queue_offset != expected:
                self.put(*entries[index])  # a present entry or a gap: the careful path
                index += 1
                continue
            byte_offset = queue_offset * ENTRY_SIZE
            mapped = self._files.writable_file(
                start_if_empty=byte_offset - byte_offset % self._files.file_size_bytes
            )
            run = entries[index : index + mapped.remaining_bytes // ENTRY_SIZE]
            if run[-1][0] != queue_offset + len(run) - 1:
                self.put(*entries[index])  # not consecutive: one at a time
                index += 1
                continue
            pack = ENTRY.pack
            mapped.append(b"".join([pack(entry[1], entry[2], entry[3]) for entry in run]))
            index += len(run)

    def _fill_gap(self, start: int, end: int) -> None:
        """Invalid entries (size 0) stand for records this queue will never have."""
        for queue_offset in range(start, end):
            byte_offset = queue_offset * ENTRY_SIZE
            mapped = self._files.writable_file(
                start_if_empty=byte_offset - byte_offset % self._files.file_size_bytes
            )
            if mapped.write_offset < byte_offset:
                mapped.write_position = byte_offset - mapped.start_offset
            mapped.append(ENTRY.pack(-1, 0, 0))

    def get(self, queue_offset: int) -> tuple[int, int, int] | None:
        """(commit-log offset, size, tags code) of an entry, or None when not held/invalid."""
        if not self.min_queue_offset <= queue_offset < self.max_queue_offset:
            return None
        mapped = self._files.hold_file(queue_offset * ENTRY_SIZE)
        if mapped is None:  # removed by retention meanwhile
            return None
        try:
            position = queue_offset * ENTRY_SIZE - mapped.start_offset
            entry = ENTRY.unpack_from(mapped.buffer, position)
        finally:
            mapped.release()
        if entry[0] < 0 or entry[1] <= 0:
            return None
        return entry

    def truncate_physical(self, commit_log_end: int) -> None:
        """Drop entries whose record reaches past `commit_log_end` (after a torn tail)."""
        low, high = self.min_queue_offset, self.max_queue_offset
        while low < high:  # first entry whose record end is past the commit-log end
            middle = (low + high) // 2
            entry = self._raw_entry(middle)
            if entry[0] >= 0 and entry[0] + entry[1] > commit_log_end:
                high = middle
            else:
                low = middle + 1
        if low < self.max_queue_offset:
            log.warning("consume queue %s/%d: truncating at entry %d", self.topic, self.queue_id,
                        low)
            self._files.truncate(low * ENTRY_SIZE)

    def _raw_entry(self, queue_offset: int) -> tuple[int, int, int]:
        mapped = self._files.find_file(queue_offset * ENTRY_SIZE)
        assert mapped is not None
        return ENTRY.unpack_from(
            mapped.view(queue_offset * ENTRY_SIZE - mapped.start_offset, ENTRY_SIZE)
        )

    def delete_files_below(self, commit_log_min_offset: int) -> int:
        """Remove whole files whose every entry points below the commit log's min offset."""
        files = self._files.files
        removable = 0
        for mapped in files[:-1]:
            last = ENTRY.unpack_from(mapped.view(mapped.size_bytes - ENTRY_SIZE, ENTRY_SIZE))
            if last[0] + last[1] <= commit_log_min_offset:
                removable += 1
            else:
                break
        return len(self._files.delete_first(removable))

    def flush(self) -> None:
        self._files.flush()

    def close(self) -> None:
        self._files.close()


class ConsumeQueues:
    """Every consume queue of the store, created on first use."""

    def __init__(self, config: StoreConfig, disk: Disk = REAL_DISK) -> None:
        self._root = config.data_dir / "consumequeue"
        self._file_size_bytes = config.consume_queue_file_size_bytes
        self._disk = disk
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()

    def load(self) -> int:
        """Load every queue; a queue whose files are broken is removed to be rebuilt by
        redispatch (it is derived data). Return how many were removed."""
        self._root.mkdir(parents=True, exist_ok=True)
        removed = 0
        for topic_dir in sorted(self._root.iterdir()):
            if not topic_dir.is_dir() or not is_valid_topic(topic_dir.name):
                log.warning("consume queues: ignoring %s, not a topic directory", topic_dir)
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if not queue_dir.name.isdigit():
                    log.warning("consume queues: ignoring %s, not a queue directory", queue_dir)
                    continue
                queue = self.get_or_create(topic_dir.name, int(queue_dir.name))
                try:
                    queue.load()
                except StoreCorruptError as error:
                    log.warning("consume queue %s is broken (%s); rebuilding it", queue_dir, error)
                    queue.close()
                    shutil.rmtree(queue_dir)
                    del self._queues[(topic_dir.name, int(queue_dir.name))]
                    removed += 1
        return removed

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            with self._lock:
                queue = self._queues.get((topic, queue_id))
                if queue is None:
                    directory = self._root / topic / str(queue_id)
                    queue = ConsumeQueue(directory, topic, queue_id, self._file_size_bytes,
                                         self._disk)
                    self._queues[(topic, queue_id)] = queue
        return queue

    def all(self) -> list[ConsumeQueue]:
        with self._lock:
            return list(self._queues.values())

    def topics(self) -> dict[str, list[int]]:
        result: dict[str, list[int]] = {}
        for queue in self.all():
            result.setdefault(queue.topic, []).append(queue.queue_id)
        return {topic: sorted(ids) for topic, ids in sorted(result.items())}

    def count_with_entries(self) -> int:
        return sum(1 for q in self.all() if q.max_queue_offset > q.min_queue_offset)

    def queue_offsets(self) -> dict[tuple[str, int], int]:
        return {(q.topic, q.queue_id): q.max_queue_offset for q in self.all()}

    def flush(self) -> None:
        for queue in self.all():
            queue.flush()

    def truncate_physical(self, commit_log_end: int) -> None:
        for queue in self.all():
            queue.truncate_physical(commit_log_end)

    def close(self) -> None:
        for queue in self.all():
            queue.close()

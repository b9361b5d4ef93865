"""Consume queues: per topic and queue, 20-byte entries (commit-log offset, size, tags code).

Entry `i` of a queue lives at byte `i * 20` of its log of files, so queue offsets and file
names agree. Entries are written only by dispatch, in queue-offset order.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from store.config import StoreConfig
from store.errors import StoreCorruptError
from store.files.disk import REAL_DISK, Disk
from store.files.mapped_file_queue import MappedFileQueue
from store.files.open_files import OpenFiles
from store.index.queue_entries import (
    ENTRY,
    ENTRY_SIZE,
    entries_in,
    file_for,
    raw_entry,
    written_end,
)
from store.system_topics import is_system_topic
from store.timers.names import has_queue_starts
from store.topic import is_valid_topic

log = logging.getLogger(__name__)

# A default for queues built outside a store (tests); the store passes its setting.
DEFAULT_RESERVE_STEP_BYTES = 16 * 1024
_GAP_ENTRY = (-1, 0, 0)  # stands for a record the queue will never have (see _fill_gap)

# (queue offset, commit-log offset, size, tags code), as dispatch collects them.
Entry = tuple[int, int, int, int]
# Whether (topic, queue id, queue offset, (commit-log offset, size, tags code)) is the entry
# of the record it points at (recovery checks entries against the commit log).
EntryCheck = Callable[[str, int, int, tuple[int, int, int]], bool]


class ConsumeQueue:
    """One queue's files, mapped only while the queue is in use.

    Every use of the files runs under the queue's lock through `_opened()`, which maps them
    when they are closed and reports the use to `OpenFiles`; `OpenFiles` closes idle queues
    past its bound. The offsets (`min_queue_offset`, `max_queue_offset`) and the file count
    are kept here, so that listing queues, the checkpoint and reads of an empty range never
    open a file.
    """

    def __init__(self, directory: Path, topic: str, queue_id: int, file_size_bytes: int,
                 open_files: OpenFiles, disk: Disk = REAL_DISK,
                 reserve_step_bytes: int = DEFAULT_RESERVE_STEP_BYTES) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self._directory = directory
        self._file_size_bytes = file_size_bytes
        self._reserve_step_bytes = reserve_step_bytes
        self._open_files = open_files
        self._disk = disk
        self._files: MappedFileQueue | None = None
        self._lock = threading.RLock()
        self._min_offset_bytes = 0
        self._max_offset_bytes = 0
        self._file_count = 0
        # The last entry, so that recovery passes over a queue with nothing to check without
        # opening it (a start with many topics would otherwise map every queue three times).
        self._last_entry: tuple[int, int, int] | None = None
        self._end_found = False  # whether load() found where the written entries end

    @contextmanager
    def _opened(self) -> Iterator[MappedFileQueue]:
        with self._lock:
            files = self._files if self._files is not None else self._open()
            try:
                yield files
            finally:
                self._min_offset_bytes = files.min_offset
                self._max_offset_bytes = files.max_offset
                self._file_count = len(files.files)
                self._last_entry = (raw_entry(files, self.max_queue_offset - 1)
                                    if self._max_offset_bytes > self._min_offset_bytes else None)
                # Under the lock: a queue with open files is always listed as open, which
                # is what lets ConsumeQueues.flush visit only the open ones.
                self._open_files.used(self, self._file_count)

    def _open(self) -> MappedFileQueue:
        files = MappedFileQueue(self._directory, self._file_size_bytes, self._disk,
                                random_access=True, reserve_step_bytes=self._reserve_step_bytes)
        if self._directory.is_dir():
            try:
                files.load()
            except BaseException:
                files.close()
                raise
        last = files.last_file()
        if last is not None:
            if self._end_found:  # reopened: the end is known
                end_position = self._max_offset_bytes - last.start_offset
            else:
                end_position = written_end(last)
                self._end_found = True
            last.write_position = end_position
            last.flushed_position = end_position
            # What lies past the entries may be a hole: reserved again before it is written.
            last.reserved_position = end_position
        self._files = files
        return files

    def close_if_idle(self) -> bool:
        """Unmap the files unless another thread uses them; the files closed with unflushed
        entries go to OpenFiles, which syncs them before the next checkpoint."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            files = self._files
            if files is None:
                return True
            unflushed = [mapped.path for mapped in files.files
                         if mapped.write_position > mapped.flushed_position]
            files.close()
            self._files = None
            self._open_files.closed(self, unflushed)
            return True
        finally:
            self._lock.release()

    def load(self) -> None:
        """Find where the written entries end (then the files may be closed again)."""
        with self._opened():
            pass

    @property
    def min_queue_offset(self) -> int:
        return self._min_offset_bytes // ENTRY_SIZE

    @property
    def max_queue_offset(self) -> int:
        """The next queue offset to be written (one past the last entry)."""
        return self._max_offset_bytes // ENTRY_SIZE

    def reserve_for(self, queue_offset: int) -> int:
        """Allocate the blocks of entry `queue_offset` before dispatch writes it (a put is
        about to be acknowledged: a full disk must refuse the put, not the entry later).
        Returns the queue offset below which every entry's blocks are reserved. An entry that
        lies in a file after the last, which dispatch has not filled yet, cannot be reserved
        early: the answer then covers only that entry, so the next put asks again. Raises
        OSError (ENOSPC...) when the blocks cannot be had."""
        byte_offset = queue_offset * ENTRY_SIZE
        with self._opened() as files:
            last = files.last_file()
            if last is None or (last.is_full and byte_offset == last.end_offset):
                last = file_for(files, queue_offset)
            if not last.start_offset <= byte_offset < last.end_offset:
                return queue_offset + 1
            files.reserve(last, byte_offset - last.start_offset + ENTRY_SIZE)
            return (last.start_offset + last.reserved_position) // ENTRY_SIZE

    def put(self, queue_offset: int, commit_log_offset: int, size: int, tags_code: int) -> bool:
        """Write the entry for `queue_offset`; an entry already there is left as it is."""
        with self._opened() as files:
            return self._put(files, (queue_offset, commit_log_offset, size, tags_code))

    def _put(self, files: MappedFileQueue, entry: Entry) -> bool:
        queue_offset = entry[0]
        expected = files.max_offset // ENTRY_SIZE
        if queue_offset < expected:
            return False  # redispatch after recovery: the entry was flushed before the crash
        if queue_offset > expected:
            if expected != 0 or files.last_file() is not None:
                log.error(
                    "consume queue %s/%d: entry %d arrives while %d is expected; filling the gap",
                    self.topic, self.queue_id, queue_offset, expected,
                )
            self._fill_gap(files, expected, queue_offset)
        mapped = file_for(files, queue_offset)
        byte_offset = queue_offset * ENTRY_SIZE
        if mapped.write_offset < byte_offset:
            mapped.write_position = byte_offset - mapped.start_offset
        mapped.append(ENTRY.pack(entry[1], entry[2], entry[3]))
        return True

    def put_many(self, entries: list[Entry]) -> None:
        """Entries in queue-offset order: runs of consecutive ones are written at once."""
        with self._opened() as files:
            index = 0
            while index < len(entries):
                queue_offset = entries[index][0]
                if queue_offset != files.max_offset // ENTRY_SIZE:
                    self._put(files, entries[index])  # a present entry or a gap: careful path
                    index += 1
                    continue
                mapped = file_for(files, queue_offset)
                run = entries[index : index + mapped.remaining_bytes // ENTRY_SIZE]
                if run[-1][0] != queue_offset + len(run) - 1:
                    self._put(files, entries[index])  # not consecutive: one at a time
                    index += 1
                    continue
                pack = ENTRY.pack
                files.reserve(mapped, mapped.write_position + len(run) * ENTRY_SIZE)
                mapped.append(b"".join([pack(entry[1], entry[2], entry[3]) for entry in run]))
                index += len(run)

    def start_at(self, queue_offset: int) -> bool:
        """An empty queue starts at `queue_offset` (a metadata snapshot's queue start, on a
        replica whose log begins past the queue's last record): its next entry is that one.
        Gap entries fill its file from the file's start up to it (recovery then finds the
        same end; reads there answer nothing). A queue started already and still without a
        record (its last entry a gap: gaps only come before a record) moves on to a later
        start, by more gaps: a slave's bootstrap starts it at its master's next offset where
        the master's log then began, and the snapshot in the log it then streams (retention
        moved on meanwhile) says where it stands there. A queue with records, or past
        `queue_offset`, stays as it is. True when started or moved."""
        with self._opened() as files:
            end = files.max_offset // ENTRY_SIZE
            if end >= queue_offset:
                return False
            if files.max_offset > files.min_offset:
                if raw_entry(files, end - 1) != _GAP_ENTRY:
                    return False
                self._fill_gap(files, end, queue_offset)
                return True
            per_file = self._file_size_bytes // ENTRY_SIZE
            start = queue_offset - queue_offset % per_file
            if files.last_file() is not None and end > start:
                start = end
            file_for(files, start)
            self._fill_gap(files, start, queue_offset)
            return True

    def next_offset_at(self, commit_log_offset: int) -> int:
        """The queue offset of the first entry at or past `commit_log_offset` (the queue's
        next offset when every entry lies below it): where the queue stands at that offset
        of the log. Gap entries count as below."""
        low, high = self.min_queue_offset, self.max_queue_offset
        while low < high:
            middle = (low + high) // 2
            entry = self.get(middle)
            if entry is not None and entry[0] >= commit_log_offset:
                high = middle
            else:
                low = middle + 1
        return low

    def _fill_gap(self, files: MappedFileQueue, start: int, end: int) -> None:
        """Invalid entries (size 0) stand for records this queue will never have."""
        for queue_offset in range(start, end):
            mapped = file_for(files, queue_offset)
            byte_offset = queue_offset * ENTRY_SIZE
            if mapped.write_offset < byte_offset:
                mapped.write_position = byte_offset - mapped.start_offset
            mapped.append(ENTRY.pack(*_GAP_ENTRY))

    def get(self, queue_offset: int) -> tuple[int, int, int] | None:
        """(commit-log offset, size, tags code) of an entry, or None when not held/invalid."""
        if not self.min_queue_offset <= queue_offset < self.max_queue_offset:
            return None
        with self._opened() as files:
            if queue_offset * ENTRY_SIZE >= files.max_offset:
                return None
            mapped = files.hold_file(queue_offset * ENTRY_SIZE)
            if mapped is None:  # removed by retention meanwhile
                return None
            try:
                position = queue_offset * ENTRY_SIZE - mapped.start_offset
                entry: tuple[int, int, int] = ENTRY.unpack_from(mapped.buffer, position)
            finally:
                mapped.release()
        if entry[0] < 0 or entry[1] <= 0:
            return None
        return entry

    def entries(self, start: int, count: int) -> list[tuple[int, int, int] | None]:
        """The entries from `start` on, at most `count` and none past the queue's end, in
        one pass (one lock hold, each file held once): a read of many entries costs about
        what `get` of one does. Each is as `get` gives it: None when invalid or removed."""
        if count <= 0 or start < self.min_queue_offset or start >= self.max_queue_offset:
            return []
        with self._lock:
            files = self._files
            if files is not None:
                # Mapped already: a read changes none of what `_opened` keeps up to date
                # after a use, so only the use is reported (a consume read's hot path).
                found = entries_in(files, start, count)
                self._open_files.used(self, self._file_count)
                return found
        with self._opened() as files:
            return entries_in(files, start, count)

    def get_many(self, queue_offset: int,
                 count_max: int) -> tuple[list[tuple[int, int, int]], int]:
        """`entries` up to the end of `queue_offset`'s file, as (queue offset, commit-log
        offset, size) of each valid one (gaps and entries retention removed meanwhile left
        out), and the queue offset the read stopped at."""
        entries_per_file = self._file_size_bytes // ENTRY_SIZE
        count_max = min(count_max, entries_per_file - queue_offset % entries_per_file)
        entries = self.entries(queue_offset, count_max)
        found = [(queue_offset + index, entry[0], entry[1])
                 for index, entry in enumerate(entries) if entry is not None]
        return found, queue_offset + len(entries)

    def truncate_physical(self, commit_log_end: int) -> None:
        """Drop entries whose record reaches past `commit_log_end` (after a torn tail)."""
        last = self._last_entry
        if self._end_found and (last is None
                                or last[0] >= 0 and last[0] + last[1] <= commit_log_end):
            return  # entries point at increasing offsets: the last one decides
        with self._opened() as files:
            low, high = files.min_offset // ENTRY_SIZE, files.max_offset // ENTRY_SIZE
            end = high
            while low < high:  # first entry whose record end is past the commit-log end
                middle = (low + high) // 2
                entry = raw_entry(files, middle)
                if entry[0] >= 0 and entry[0] + entry[1] > commit_log_end:
                    high = middle
                else:
                    low = middle + 1
            if low < end:
                log.warning("consume queue %s/%d: truncating at entry %d", self.topic,
                            self.queue_id, low)
                files.truncate(low * ENTRY_SIZE)

    def truncate_at_first_bad(self, redispatch_start: int, matches: EntryCheck) -> int | None:
        """Truncate at the first hole (an all-zero entry) or entry that `matches` rejects,
        among the entries redispatch from `redispatch_start` will write again; return the
        queue offset truncated at, or None when every entry is sound.

        Entries are checked from the end back to the first sound one pointing below
        `redispatch_start`: that one and all before it were flushed before the checkpoint
        that named the start, so a power loss cannot have left a hole there."""
        last = self._last_entry
        if self._end_found and (last is None or 0 <= last[0] < redispatch_start):
            return None  # no entry redispatch writes again
        with self._opened() as files:
            first_bad: int | None = None
            queue_offset = files.max_offset // ENTRY_SIZE - 1
            while queue_offset >= files.min_offset // ENTRY_SIZE:
                entry = raw_entry(files, queue_offset)
                if entry != _GAP_ENTRY:
                    if entry[1] <= 0 or not matches(self.topic, self.queue_id, queue_offset,
                                                    entry):
                        first_bad = queue_offset
                    elif entry[0] < redispatch_start:
                        break
                queue_offset -= 1
            if first_bad is not None:
                log.warning("consume queue %s/%d: entry %d is a hole or does not match the "
                            "commit log; truncating there for redispatch", self.topic,
                            self.queue_id, first_bad)
                files.truncate(first_bad * ENTRY_SIZE)
            return first_bad

    def sync_entries_from(self, commit_log_offset: int) -> None:
        """Make durable the files that may hold entries of records at or after
        `commit_log_offset`: recovery found them, maybe only in the page cache (a killed
        process leaves them there), and the checkpoint will claim them. Older entries were
        covered by an earlier checkpoint."""
        last = self._last_entry
        if self._end_found and (last is None or 0 <= last[0] < commit_log_offset):
            return  # no entry of a scanned record: nothing to open
        with self._opened() as files:
            for mapped in reversed(files.files):
                if mapped.write_position == 0:
                    continue
                end_entry = ENTRY.unpack_from(mapped.buffer, mapped.write_position - ENTRY_SIZE)
                if 0 <= end_entry[0] < commit_log_offset:
                    return
                mapped.sync_written(self._disk)
                first = ENTRY.unpack_from(mapped.buffer, 0)
                if 0 <= first[0] < commit_log_offset:
                    return

    def delete_files_below(self, commit_log_min_offset: int) -> int:
        """Remove whole files whose every entry points below the commit log's min offset."""
        if self._file_count <= 1:
            return 0  # the last file always stays: nothing to open the queue for
        with self._opened() as files:
            removable = 0
            for mapped in files.files[:-1]:
                last = ENTRY.unpack_from(mapped.view(mapped.size_bytes - ENTRY_SIZE, ENTRY_SIZE))
                if last[0] + last[1] <= commit_log_min_offset:
                    removable += 1
                else:
                    break
            return len(files.delete_first(removable))

    def flush(self) -> None:
        """msync the entries written since the last flush, when the files are open (closed
        ones are synced by OpenFiles.sync_closed)."""
        with self._lock:
            if self._files is not None:
                self._files.flush()

    def close(self) -> None:
        with self._lock:
            if self._files is not None:
                self._files.close()
                self._files = None
                self._open_files.closed(self, [])


class ConsumeQueues:
    """Every consume queue of the store, created on first use."""

    def __init__(self, config: StoreConfig, disk: Disk = REAL_DISK) -> None:
        self._root = config.data_dir / "consumequeue"
        self._file_size_bytes = config.consume_queue_file_size_bytes
        self._reserve_step_bytes = config.consume_queue_reserve_step_bytes
        self._disk = disk
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()
        self.open_files = OpenFiles(self._root, config.consume_queue_open_files_max)

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
                                         self.open_files, self._disk,
                                         self._reserve_step_bytes)
                    self._queues[(topic, queue_id)] = queue
        return queue

    def reserve_for(self, topic: str, queue_id: int, queue_offset: int) -> int:
        """ConsumeQueue.reserve_for, for the commit log's put path (the queue is made)."""
        return self.get_or_create(topic, queue_id).reserve_for(queue_offset)

    def start_at(self, topic: str, queue_id: int, queue_offset: int) -> bool:
        """ConsumeQueue.start_at, the queue made when absent."""
        if queue_offset <= 0:
            return False
        queue = self._queues.get((topic, queue_id))
        if queue is not None and queue.max_queue_offset >= queue_offset:
            return False  # past it: known without opening its files
        return self.get_or_create(topic, queue_id).start_at(queue_offset)

    def starts_at(self, commit_log_offset: int) -> list[tuple[str, int, int]]:
        """(topic, queue id, next queue offset at `commit_log_offset`) of every user queue and
        lane: where an empty replica whose log begins there must start them."""
        return [(queue.topic, queue.queue_id, queue.next_offset_at(commit_log_offset))
                for queue in self.all() if has_queue_starts(queue.topic)]

    def remove_topic(self, topic: str) -> int:
        """Close and delete every queue of `topic` (a deleted topic); return how many. The
        caller holds dispatch still."""
        with self._lock:
            removed = [self._queues.pop(key) for key in list(self._queues) if key[0] == topic]
        for queue in removed:
            queue.close()
        shutil.rmtree(self._root / topic, ignore_errors=True)
        self._disk.fsync_directory(self._root)
        return len(removed)

    def all(self) -> list[ConsumeQueue]:
        with self._lock:
            return list(self._queues.values())

    def topics(self) -> dict[str, list[int]]:
        """The queue ids of every client topic (the broker's own system topics left out)."""
        result: dict[str, list[int]] = {}
        for queue in self.all():
            if not is_system_topic(queue.topic):
                result.setdefault(queue.topic, []).append(queue.queue_id)
        return {topic: sorted(ids) for topic, ids in sorted(result.items())}

    def count_with_entries(self) -> int:
        return sum(1 for q in self.all() if q.max_queue_offset > q.min_queue_offset)

    def queue_offsets(self) -> dict[tuple[str, int], int]:
        return {(q.topic, q.queue_id): q.max_queue_offset for q in self.all()}

    def flush(self) -> None:
        """Make every entry written so far durable: the open queues' files by msync, then
        the files closed since the last flush. A queue is listed open for as long as its
        files are, and reports its unflushed files before it leaves the list, both under
        its lock: no entry written before this call escapes both steps."""
        for queue in self.open_files.open_queues():
            queue.flush()
        self.open_files.sync_closed()

    def close_idle(self) -> None:
        """Unmap every queue not in use now (shutdown frees descriptors before the
        checkpoint, so a shortage elsewhere cannot stop it being written)."""
        self.open_files.close_all()

    def truncate_physical(self, commit_log_end: int) -> None:
        for queue in self.all():
            queue.truncate_physical(commit_log_end)

    def truncate_at_holes(self, redispatch_start: int, matches: EntryCheck) -> int:
        """Truncate every queue at its first hole or mismatch above `redispatch_start`;
        return how many queues were cut."""
        return sum(queue.truncate_at_first_bad(redispatch_start, matches) is not None
                   for queue in self.all())

    def sync_entries_from(self, commit_log_offset: int) -> None:
        for queue in self.all():
            queue.sync_entries_from(commit_log_offset)

    def close(self) -> None:
        for queue in self.all():
            queue.close()
        self.open_files.close()

"""One key-index file, RocketMQ's IndexFile idea: a header, hash slots, linked entries.

Layout (big-endian), sizes fixed when the file is made:

    header   64 bytes: magic, slot count, entries max, entry count (durable), begin offset
             (the commit-log offset of the first record the file may hold), covered end (every
             record below it was handed to the index when the header was written), first and
             last store timestamp (ms)
    slots    slot_count x 4 bytes: 1 + the newest entry whose key hash falls in the slot
             (0: none)
    entries  entries_max x 24 bytes: key hash, 1 + the previous entry of the same slot (0:
             none), commit-log offset, store timestamp (ms)

Entries are appended in commit-log order (a record with two keys has two entries). The
header's entry count and covered end are written only by `flush`, after the entries and
slots are msynced: entries below the count are durable, anything past it is ignored at
load. Slots are rebuilt from the durable entries at load (a slot may have reached the disk
pointing at an entry that did not), and every loaded entry is checked (prev pointers back,
offsets not decreasing): a file that fails is not trusted, the caller deletes it and the
index is rebuilt from the commit log.

numpy checks and rebuilds the entries of a file that holds some; it loads then, not with the
module: a broker whose index files are empty (a new one) never loads it (about 12 MB).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from store.files.disk import REAL_DISK, Disk

if TYPE_CHECKING:
    import numpy as np

MAGIC = 0x4B494458  # "KIDX"
HEADER = struct.Struct(">IIIIqqqq")
HEADER_SIZE = 64
SLOT = struct.Struct(">I")
ENTRY = struct.Struct(">IIqq")


@cache
def _entry_dtype() -> np.dtype:
    import numpy as np

    dtype = np.dtype([("hash", ">u4"), ("prev", ">u4"), ("offset", ">i8"),
                      ("timestamp", ">i8")])
    assert dtype.itemsize == ENTRY.size
    return dtype


class IndexCorruptError(ValueError):
    """A key-index file that cannot be trusted (the message says why)."""


def file_size_bytes(slot_count: int, entries_max: int) -> int:
    return HEADER_SIZE + slot_count * SLOT.size + entries_max * ENTRY.size


class IndexFile:
    def __init__(self, path: Path, fd: int, mapping: mmap.mmap, slot_count: int,
                 entries_max: int, begin_offset: int, disk: Disk) -> None:
        self.path = path
        self._fd = fd
        self._map = mapping
        self.slot_count = slot_count
        self.entries_max = entries_max
        self.begin_offset = begin_offset
        self._disk = disk
        self.entry_count = 0
        self.last_offset = -1
        self.first_timestamp_ms = 0
        self.last_timestamp_ms = 0
        self._entries_start = HEADER_SIZE + slot_count * SLOT.size
        self._flushed_count = 0

    # -- making and opening --------------------------------------------------------------

    @classmethod
    def create(cls, path: Path, begin_offset: int, slot_count: int, entries_max: int,
               disk: Disk = REAL_DISK) -> IndexFile:
        size_bytes = file_size_bytes(slot_count, entries_max)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            disk.allocate(fd, size_bytes)  # reserved now: no SIGBUS on a full disk later
            mapping = mmap.mmap(fd, size_bytes)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        index_file = cls(path, fd, mapping, slot_count, entries_max, begin_offset, disk)
        index_file._write_header(covered_end_offset=begin_offset)
        return index_file

    @classmethod
    def open(cls, path: Path, begin_offset: int, disk: Disk = REAL_DISK) -> IndexFile:
        """Map and check an existing file; IndexCorruptError when it cannot be trusted."""
        fd = os.open(path, os.O_RDWR)
        try:
            size_bytes = os.fstat(fd).st_size
            if size_bytes < HEADER_SIZE:
                raise IndexCorruptError(f"{path}: {size_bytes} bytes, shorter than a header")
            mapping = mmap.mmap(fd, size_bytes)
        except BaseException:
            os.close(fd)
            raise
        magic, slot_count, entries_max, count, begin, _, _, _ = HEADER.unpack_from(mapping, 0)
        index_file = cls(path, fd, mapping, slot_count, entries_max, begin_offset, disk)
        try:
            if magic != MAGIC or begin != begin_offset or slot_count == 0 \
                    or size_bytes != file_size_bytes(slot_count, entries_max) \
                    or count > entries_max:
                raise IndexCorruptError(f"{path}: header does not match the file")
            index_file._load_entries(count)
        except BaseException:
            index_file.close()
            raise
        return index_file

    @property
    def covered_end_offset(self) -> int:
        """Every record below this offset was indexed when the header was last written."""
        covered: int = HEADER.unpack_from(self._map, 0)[5]
        return covered

    def _entries(self, count: int) -> np.ndarray:
        """A copy of the first `count` entries (an array over the mapping itself would keep
        it from closing for as long as the array lives)."""
        import numpy as np

        end = self._entries_start + count * ENTRY.size
        return np.frombuffer(self._map[self._entries_start:end], dtype=_entry_dtype())

    def _load_entries(self, count: int) -> None:
        if count == 0:
            self._set_count(0)
            return
        import numpy as np

        entries = self._entries(count)
        numbers = np.arange(1, count + 1, dtype=np.int64)
        offsets = entries["offset"].astype(np.int64)
        if count and (np.any(entries["prev"].astype(np.int64) >= numbers)
                      or np.any(np.diff(offsets) < 0) or offsets[0] < self.begin_offset):
            raise IndexCorruptError(f"{self.path}: entries out of order or pointing forward")
        self._set_count(count)

    def _set_count(self, count: int) -> None:
        """Keep the first `count` entries and rebuild the slots from them."""
        self.entry_count = self._flushed_count = count
        if count == 0:
            self._map[HEADER_SIZE:self._entries_start] = bytes(self.slot_count * SLOT.size)
            self.last_offset, self.first_timestamp_ms, self.last_timestamp_ms = -1, 0, 0
            return
        import numpy as np

        entries = self._entries(count)
        slots = np.zeros(self.slot_count, dtype=">u4")
        positions = (entries["hash"].astype(np.int64) % self.slot_count)[::-1]
        slot_ids, last_from_end = np.unique(positions, return_index=True)
        slots[slot_ids] = count - last_from_end  # 1 + the newest entry of each slot
        self._map[HEADER_SIZE:self._entries_start] = slots.tobytes()
        self.last_offset = int(entries["offset"][-1])
        self.first_timestamp_ms = int(entries["timestamp"][0])
        self.last_timestamp_ms = int(entries["timestamp"][-1])

    def truncate(self, end_offset: int) -> None:
        """Drop the entries of records at or past `end_offset` (a cut commit log)."""
        import numpy as np

        offsets = self._entries(self.entry_count)["offset"].astype(np.int64)
        self._set_count(int(np.searchsorted(offsets, end_offset)))
        self._write_header(covered_end_offset=min(self.covered_end_offset, end_offset))

    # -- writing and reading -------------------------------------------------------------

    @property
    def is_full(self) -> bool:
        return self.entry_count >= self.entries_max

    def add(self, key_hash: int, commit_log_offset: int, store_timestamp_ms: int) -> None:
        """Append an entry (the entry before the slot, so a reader never follows a slot to
        an unwritten entry)."""
        assert not self.is_full and commit_log_offset >= self.last_offset
        slot_position = HEADER_SIZE + (key_hash % self.slot_count) * SLOT.size
        (previous,) = SLOT.unpack_from(self._map, slot_position)
        ENTRY.pack_into(self._map, self._entries_start + self.entry_count * ENTRY.size,
                        key_hash, previous, commit_log_offset, store_timestamp_ms)
        self.entry_count += 1
        SLOT.pack_into(self._map, slot_position, self.entry_count)
        self.last_offset = commit_log_offset
        if self.entry_count == 1:
            self.first_timestamp_ms = store_timestamp_ms
        self.last_timestamp_ms = store_timestamp_ms

    def chain(self, key_hash: int, steps_max: int) -> Iterator[tuple[int, int]]:
        """(commit-log offset, store timestamp) of the entries with `key_hash`, newest first,
        following at most `steps_max` links."""
        (number,) = SLOT.unpack_from(self._map, HEADER_SIZE
                                     + (key_hash % self.slot_count) * SLOT.size)
        count = self.entry_count
        for _ in range(steps_max):
            if number == 0 or number > count:
                return
            entry_hash, previous, offset, timestamp_ms = ENTRY.unpack_from(
                self._map, self._entries_start + (number - 1) * ENTRY.size)
            if entry_hash == key_hash:
                yield offset, timestamp_ms
            if previous >= number:
                return  # never from a checked file; a bound against a loop all the same
            number = previous

    def flush(self, covered_end_offset: int) -> None:
        """msync slots and entries, then the header that makes them count."""
        if self.entry_count != self._flushed_count:
            self._msync(HEADER_SIZE, self._entries_start - HEADER_SIZE)
            start = self._entries_start + self._flushed_count * ENTRY.size
            self._msync(start, (self.entry_count - self._flushed_count) * ENTRY.size)
            self._flushed_count = self.entry_count
        self._write_header(covered_end_offset)
        self._msync(0, HEADER_SIZE)

    def _msync(self, start: int, size_bytes: int) -> None:
        aligned = start - start % mmap.PAGESIZE  # msync takes page-aligned starts
        self._disk.msync(self._map, aligned, size_bytes + start - aligned)

    def _write_header(self, covered_end_offset: int) -> None:
        HEADER.pack_into(self._map, 0, MAGIC, self.slot_count, self.entries_max,
                         self._flushed_count, self.begin_offset, covered_end_offset,
                         self.first_timestamp_ms, self.last_timestamp_ms)

    def close(self) -> None:
        if not self._map.closed:
            self._map.close()
            os.close(self._fd)

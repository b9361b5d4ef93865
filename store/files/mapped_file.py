"""One fixed-size file mapped into memory, written at its write position, flushed by range."""

from __future__ import annotations

import errno
import logging
import mmap
import os
from pathlib import Path

from store.files import durability
from store.files.disk import REAL_DISK, Disk
from store.files.reference import ReferenceCounted
from store.record import OFFSETS, QUEUE_OFFSET_POSITION

log = logging.getLogger(__name__)

PAGE_SIZE_BYTES = mmap.PAGESIZE


class MappedFile(ReferenceCounted):
    """A file of `size_bytes` whose name is its start offset in the log it belongs to.

    Positions are relative to the file; offsets are global (`start_offset + position`).
    `write_position` is what has been written, `flushed_position` what has been made durable.

    Reference counted: a reader that may run beside retention (or shutdown) takes `hold()`
    before it uses the mapping or the fd and releases in a `finally`; `close()` and
    `destroy()` retire the file, and the last holder unmaps, closes (and unlinks) it.
    """

    __slots__ = ("path", "start_offset", "size_bytes", "write_position", "flushed_position",
                 "reserved_position", "_fd", "_map", "_unlink_on_cleanup")

    def __init__(self, path: Path, start_offset: int, size_bytes: int, *, create: bool) -> None:
        assert size_bytes > 0, size_bytes
        super().__init__()
        self._unlink_on_cleanup = False
        self.path = path
        self.start_offset = start_offset
        self.size_bytes = size_bytes
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self._fd = os.open(path, flags, 0o644)
        try:
            if create:
                os.ftruncate(self._fd, size_bytes)
            actual = os.fstat(self._fd).st_size
            if actual != size_bytes:
                raise ValueError(f"{path} has {actual} bytes, expected {size_bytes}")
            self._map = mmap.mmap(self._fd, size_bytes)
        except BaseException:
            os.close(self._fd)
            if create:
                path.unlink(missing_ok=True)
            raise
        self.write_position = 0
        self.flushed_position = 0
        # The blocks of [0, reserved_position) are allocated: writes there cannot meet a full
        # disk. Whole files are reserved at creation; consume queues' in steps (`reserve`).
        self.reserved_position = size_bytes

    @property
    def fd(self) -> int:
        """The file's descriptor: valid only while the caller holds the file."""
        return self._fd

    @property
    def buffer(self) -> mmap.mmap:
        """The mapping itself, for hot readers (dispatch); only below write_position."""
        return self._map

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.size_bytes

    @property
    def write_offset(self) -> int:
        return self.start_offset + self.write_position

    @property
    def remaining_bytes(self) -> int:
        return self.size_bytes - self.write_position

    @property
    def is_full(self) -> bool:
        return self.write_position == self.size_bytes

    def reserve(self, end_position: int, step_bytes: int, disk: Disk = REAL_DISK) -> None:
        """Allocate the blocks up to `end_position`, rounded up to a whole step (and cut at
        the file's end); raises OSError (ENOSPC...) and reserves nothing more on failure."""
        if end_position <= self.reserved_position:
            return
        end = min(self.size_bytes, -(-end_position // step_bytes) * step_bytes)
        disk.allocate(self._fd, end - self.reserved_position, self.reserved_position)
        self.reserved_position = end

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write at the write position and return the position written at."""
        position = self.write_position
        end = position + len(data)
        assert end <= self.size_bytes, (position, len(data), self.size_bytes)
        self._map[position:end] = data
        self.write_position = end
        return position

    def append_record(self, record: bytes, queue_offset: int) -> int:
        """Append a commit-log record and stamp its queue and physical offsets in place;
        return the physical offset it was written at."""
        position = self.write_position
        end = position + len(record)
        assert end <= self.size_bytes, (position, len(record), self.size_bytes)
        mapping = self._map
        mapping[position:end] = record
        offset = self.start_offset + position
        OFFSETS.pack_into(mapping, position + QUEUE_OFFSET_POSITION, queue_offset, offset)
        self.write_position = end
        return offset

    def write_at(self, position: int, data: bytes | bytearray) -> None:
        """Overwrite bytes below the write position (consume-queue repair only)."""
        assert position >= 0 and position + len(data) <= self.size_bytes
        self._map[position : position + len(data)] = data

    def view(self, position: int, size_bytes: int) -> memoryview:
        """A zero-copy view; the caller must not keep it past the file's life."""
        assert position >= 0 and position + size_bytes <= self.size_bytes
        return memoryview(self._map)[position : position + size_bytes]

    def read(self, position: int, size_bytes: int) -> bytes:
        assert position >= 0 and position + size_bytes <= self.size_bytes
        return self._map[position : position + size_bytes]

    def flush(self, disk: Disk = REAL_DISK, target_position: int | None = None) -> int:
        """Make [flushed_position, target_position) durable; return the new flushed position.

        The target is the write position read BEFORE the msync (by the caller when given):
        bytes appended while the msync runs may be missed by it, so they must not count.
        """
        target = self.write_position if target_position is None else target_position
        if target > self.flushed_position:
            start = self.flushed_position - self.flushed_position % PAGE_SIZE_BYTES
            self._msync(start, target - start, disk)
            self.flushed_position = target
        return self.flushed_position

    def sync_written(self, disk: Disk = REAL_DISK) -> None:
        """Make [0, write_position) durable whatever `flushed_position` says: what loading
        found after a crash may be only in the page cache (a killed process leaves it)."""
        if self.write_position > 0:
            self._msync(0, self.write_position, disk)
        self.flushed_position = self.write_position

    def _msync(self, position: int, size_bytes: int, disk: Disk = REAL_DISK) -> None:
        """msync [position, position + size_bytes) and tell the durability listeners."""
        disk.msync(self._map, position, size_bytes)
        if durability.listeners:
            data = self._map[position : position + size_bytes]
            for listener in durability.listeners:
                listener.synced(self.path, position, data)

    def truncate_to(self, position: int) -> int:
        """Zero [position, write_position) so a later scan cannot find old records there;
        return how many bytes were not already zero (at 1 MiB granularity).

        Only the file's data regions are visited (SEEK_DATA/SEEK_HOLE), and chunks are
        compared before they are zeroed: reading or writing the holes of a mostly empty 1 GiB
        file would cost a second and allocate every page of it.
        """
        assert 0 <= position <= self.size_bytes
        cleared_bytes = 0
        for start, end in self._data_regions(position, max(self.write_position, position)):
            cleared_bytes += self._zero_range(start, end)
        self.write_position = position
        self.flushed_position = min(self.flushed_position, position)
        self._msync(0, self.size_bytes)
        return cleared_bytes

    def data_regions(self, start: int, end: int) -> list[tuple[int, int]]:
        """[start, end) cut down to the parts the file system holds data for (all of it
        where SEEK_DATA is not supported)."""
        return self._data_regions(start, end)

    def _data_regions(self, start: int, end: int) -> list[tuple[int, int]]:
        """[start, end) cut down to the parts the file system holds data for."""
        regions: list[tuple[int, int]] = []
        try:
            while start < end:
                try:
                    data = os.lseek(self._fd, start, os.SEEK_DATA)
                except OSError as error:
                    if error.errno == errno.ENXIO:  # no data after `start`
                        break
                    raise
                if data >= end:
                    break
                hole = min(os.lseek(self._fd, data, os.SEEK_HOLE), end)
                regions.append((data, hole))
                start = hole
        except OSError:  # no SEEK_DATA on this file system: visit everything
            return [(start, end)]
        return regions

    def _zero_range(self, start: int, end: int) -> int:
        chunk_bytes = 1 << 20
        zeros = bytes(chunk_bytes)
        cleared_bytes = 0
        for chunk_start in range(start, end, chunk_bytes):
            chunk_end = min(chunk_start + chunk_bytes, end)
            size = chunk_end - chunk_start
            if self._map[chunk_start:chunk_end] != zeros[:size]:
                self._map[chunk_start:chunk_end] = zeros[:size]
                cleared_bytes += size
        return cleared_bytes

    def close(self) -> None:
        """Retire the file: unmapped and closed now, or by its last holder."""
        self.retire()

    def destroy(self, *, unlink_now: bool = False) -> None:
        """Retire the file and remove it from disk. Retention lets the last holder unlink it;
        truncation (`unlink_now`) frees the name at once, for a new file of that name."""
        if unlink_now:
            self.path.unlink(missing_ok=True)
        else:
            self._unlink_on_cleanup = True
        if not self.retire() and self.reference_count == 0 and not unlink_now:
            self.path.unlink(missing_ok=True)  # closed before (shutdown): nothing holds it

    def _cleanup(self) -> None:
        """Unmap, close and (when destroyed) unlink: the last reference is gone."""
        try:
            self._map.close()
        except BufferError:
            # A view outlived its hold (a bug in a reader): the mapping goes with that view
            # (it has its own fd), and our fd and the file go now, so nothing leaks for long.
            log.error("%s: a view of the mapping outlived its hold", self.path)
        if self._unlink_on_cleanup:
            self._unlink_if_ours()
        os.close(self._fd)

    def _unlink_if_ours(self) -> None:
        """Unlink the path only if it is still this file: a later file may have its name."""
        ours = os.fstat(self._fd)
        try:
            current = os.stat(self.path)
        except FileNotFoundError:
            return
        if (current.st_dev, current.st_ino) == (ours.st_dev, ours.st_ino):
            self.path.unlink(missing_ok=True)

"""An ordered set of equal-size mapped files that form one contiguous log of bytes."""

from __future__ import annotations

import bisect
import errno
import logging
import mmap
import os
import threading
from collections.abc import Callable
from pathlib import Path

from store.errors import StoreCorruptError
from store.files.allocate import allocate_file, publish_file, warm_first_pages
from store.files.disk import REAL_DISK, Disk
from store.files.mapped_file import MappedFile
from store.paths import TEMP_SUFFIX, name_to_offset, offset_to_name

log = logging.getLogger(__name__)

# The flush's seam (tests only): called with each file right after its msync, before the
# flushed offset is computed from it, so a test can roll files exactly there.
FlushStepHook = Callable[[MappedFile], None]


class MappedFileQueue:
    """Files named by 20-digit start offset; offset `o` lives in the file starting at
    `o - o % file_size_bytes`. The last file is the only one written."""

    def __init__(self, directory: Path, file_size_bytes: int, disk: Disk = REAL_DISK, *,
                 random_access: bool = False, reserve_step_bytes: int | None = None,
                 free_bytes_kept: int = 0) -> None:
        self.directory = directory
        self.file_size_bytes = file_size_bytes
        self._disk = disk
        # New files reserve their first step only (None: the whole file); see MappedFile.reserve.
        self.reserve_step_bytes = reserve_step_bytes
        # A new file is refused (ENOSPC) when it would leave less than this free on the disk:
        # the commit log keeps room for the consume queues of what it acknowledged.
        self.free_bytes_kept = free_bytes_kept
        # Consume queues are read and written a few entries at a time: without MADV_RANDOM
        # the first write into a new sparse file reads ahead megabytes of holes (about 15 ms
        # per 6 MB file on ext4, against 0.4 ms with it).
        self._random_access = random_access
        self._files: list[MappedFile] = []
        self._starts: list[int] = []
        # Guards the file list (roll, retention, truncate) against readers looking up files.
        self._files_lock = threading.Lock()
        # The end of the contiguous msynced prefix of the whole log, as the last flush() found
        # it (each file keeps its own msynced position: see flush()).
        self._flushed_offset = 0
        self._flush_lock = threading.Lock()
        self.flush_step_hook: FlushStepHook | None = None
        # Files whose end is at or below this have durable names (their directory was fsynced
        # after they were created or renamed); directories made for this log since the last
        # directory fsync, whose own names need their parent fsynced.
        self._names_durable_end = 0
        self._new_directories: list[Path] = []
        # The next file, allocated ahead of need (commit log only: see store/files/allocate.py).
        self._prepared: MappedFile | None = None
        self._allocate_lock = threading.Lock()
        self.on_new_file: Callable[[], None] | None = None

    # -- loading -------------------------------------------------------------------------

    def load(self) -> None:
        """Map every file, after checking the set is whole: equal sizes, contiguous names."""
        assert not self._files
        self._ensure_directory()
        for temp in self.directory.glob(f"*{TEMP_SUFFIX}"):
            temp.unlink()
        entries: list[tuple[int, Path]] = []
        for path in sorted(self.directory.iterdir()):
            start = name_to_offset(path.name)
            if start is None or not path.is_file():
                raise StoreCorruptError(f"{path}: not a log file name (20-digit start offset)")
            entries.append((start, path))
        entries.sort()
        previous_start: int | None = None
        for index, (start, path) in enumerate(entries):
            size = path.stat().st_size
            if size < self.file_size_bytes and index == len(entries) - 1:
                # A short last file is a torn tail (its end never reached the disk): give it
                # its size back, zero-filled, and let recovery find where the records end.
                log.warning("%s: %d bytes, extending to %d", path, size, self.file_size_bytes)
                os.truncate(path, self.file_size_bytes)
            elif size != self.file_size_bytes:
                raise StoreCorruptError(
                    f"{path}: size {size} bytes, every file of this log must have "
                    f"{self.file_size_bytes} bytes"
                )
            if start % self.file_size_bytes != 0:
                raise StoreCorruptError(f"{path}: start offset is not a multiple of the file size")
            if previous_start is not None and start != previous_start + self.file_size_bytes:
                missing = offset_to_name(previous_start + self.file_size_bytes)
                raise StoreCorruptError(
                    f"{path}: files are not contiguous, {self.directory / missing} is missing"
                )
            previous_start = start
        for start, path in entries:
            mapped = MappedFile(path, start, self.file_size_bytes, create=False)
            self._advise(mapped)
            mapped.write_position = self.file_size_bytes
            mapped.flushed_position = self.file_size_bytes
            self._files.append(mapped)
            self._starts.append(start)
        # What was on disk at start counts as durable (recovery decides what of it is valid).
        self._flushed_offset = self.max_offset
        self._names_durable_end = self.max_offset

    def _advise(self, mapped: MappedFile) -> None:
        if self._random_access and hasattr(mmap, "MADV_RANDOM"):
            mapped.buffer.madvise(mmap.MADV_RANDOM)

    # -- lookups -------------------------------------------------------------------------

    @property
    def files(self) -> list[MappedFile]:
        with self._files_lock:
            return list(self._files)

    def first_file(self) -> MappedFile | None:
        files = self._files
        return files[0] if files else None

    def last_file(self) -> MappedFile | None:
        files = self._files
        return files[-1] if files else None

    def find_file(self, offset: int) -> MappedFile | None:
        """The file holding byte `offset`, or None when no retained file does."""
        with self._files_lock:
            index = bisect.bisect_right(self._starts, offset) - 1
            if index < 0:
                return None
            mapped = self._files[index]
        return mapped if offset < mapped.end_offset else None

    def hold_file(self, offset: int) -> MappedFile | None:
        """The file holding byte `offset`, held (the caller releases it in a `finally`), or
        None when no retained file does: retention may retire it at any time otherwise."""
        mapped = self.find_file(offset)
        return mapped if mapped is not None and mapped.hold() else None

    @property
    def min_offset(self) -> int:
        first = self.first_file()
        return first.start_offset if first is not None else 0

    @property
    def max_offset(self) -> int:
        last = self.last_file()
        return last.write_offset if last is not None else 0

    @property
    def flushed_offset(self) -> int:
        """The end of the contiguous msynced prefix of the log, as the last flush() left it."""
        return self._flushed_offset

    # -- changes -------------------------------------------------------------------------

    def writable_file(self, start_if_empty: int = 0) -> MappedFile:
        """The last file, or a new one when there is none or the last is full.

        Raises OSError (ENOSPC...) when a new file cannot be allocated; nothing is left then.
        """
        last = self.last_file()
        if last is not None and not last.is_full:
            return last
        start = last.end_offset if last is not None else start_if_empty
        assert start % self.file_size_bytes == 0, start
        # The allocation lock is held until the file is in the list, so the allocator never
        # sees a last file whose successor is being published (it would prepare it twice).
        with self._allocate_lock:
            allocated = self._take_prepared_locked(start) or self._allocate_locked(start)
            try:
                mapped = publish_file(allocated, self.directory)
            except BaseException:
                allocated.destroy()
                raise
            self._advise(mapped)
            with self._files_lock:
                self._files.append(mapped)
                self._starts.append(start)
        if self.on_new_file is not None:
            self.on_new_file()
        return mapped

    def prepare_next(self) -> None:
        """Allocate the file after the last one, unless it is ready (AllocateService)."""
        with self._allocate_lock:
            last = self.last_file()
            if last is None:
                return
            prepared = self._prepared
            if prepared is not None and prepared.start_offset == last.end_offset:
                return
            self._prepared = None
            if prepared is not None:  # the log was truncated since: not the next file any more
                prepared.destroy()
            self._prepared = warm_first_pages(self._allocate_locked(last.end_offset))

    def _take_prepared_locked(self, start: int) -> MappedFile | None:
        prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared.start_offset != start:
            prepared.destroy()
            return None
        return prepared

    def _allocate_locked(self, start: int) -> MappedFile:
        self._ensure_directory()
        if self.free_bytes_kept:
            free_bytes = self._disk.free_bytes(self.directory)
            if free_bytes - self.file_size_bytes < self.free_bytes_kept:
                raise OSError(errno.ENOSPC, (
                    f"{free_bytes} bytes free: a new {self.file_size_bytes}-byte file would "
                    f"leave less than the {self.free_bytes_kept} bytes kept for consume queues "
                    "and indexes (disk_reserve_bytes)"))
        return allocate_file(self.directory, start, self.file_size_bytes, self._disk,
                             self.reserve_step_bytes)

    def reserve(self, mapped: MappedFile, end_position: int) -> None:
        """Allocate `mapped`'s blocks up to `end_position` before they are written (files
        reserved in steps only; whole files have them all). OSError (ENOSPC...) on failure."""
        if self.reserve_step_bytes is not None:
            mapped.reserve(end_position, self.reserve_step_bytes, self._disk)

    def _ensure_directory(self) -> None:
        """Create the log's directory (and missing parents), remembering each new one: its
        name is durable only once its parent is fsynced, which flush() does."""
        missing: list[Path] = []
        directory = self.directory
        while not directory.is_dir():
            missing.append(directory)
            directory = directory.parent
        for directory in reversed(missing):
            directory.mkdir(exist_ok=True)
            self._new_directories.append(directory)

    def flush(self) -> int:
        """Msync every file that received bytes since the last flush, oldest first, and return
        the end of the contiguous msynced prefix of the log (the flushed offset).

        Each file's write position is read before its msync and only that much counts, so a
        file rolled or bytes appended meanwhile are never counted as flushed. The directory is
        fsynced first when the log has files whose names are not durable yet. Raises OSError
        when an msync or fsync fails; the flushed offset then stays where it was.
        """
        with self._flush_lock:
            files = self.files
            if not files:
                return self._flushed_offset
            self._sync_names(files[-1].end_offset)
            offset = files[0].start_offset
            for mapped in files:
                if not mapped.hold():
                    continue  # retired meanwhile (retention): no longer part of the log
                try:
                    # Read the write position once, before the msync: only that much counts.
                    position = mapped.flush(self._disk, mapped.write_position)
                finally:
                    mapped.release()
                if self.flush_step_hook is not None:
                    self.flush_step_hook(mapped)
                offset = mapped.start_offset + position
                if position < mapped.size_bytes:
                    break  # the prefix ends in this file; later ones (if any) are not counted
            self._flushed_offset = offset
            return offset

    def _sync_names(self, end_offset: int) -> None:
        """fsync the new directories' parents and the log's directory, once per new file."""
        if end_offset <= self._names_durable_end:
            return
        # Writers only append to the list; the synced prefix is removed after success.
        new_directories = self._new_directories[:]
        for directory in new_directories:
            self._disk.fsync_directory(directory.parent)
        self._disk.fsync_directory(self.directory)
        del self._new_directories[: len(new_directories)]
        self._names_durable_end = end_offset

    def sync_written_from(self, offset: int) -> None:
        """Make durable every written byte of the files that end after `offset` (recovery:
        see MappedFile.sync_written)."""
        for mapped in self.files:
            if mapped.end_offset > offset:
                mapped.sync_written(self._disk)

    def truncate(self, offset: int) -> int:
        """Drop everything at or after `offset`: later files go, the holder is zeroed there.
        Return roughly how many written bytes were dropped."""
        with self._files_lock:
            keep = [f for f in self._files if f.start_offset <= offset]
            drop = [f for f in self._files if f.start_offset > offset]
            if keep and keep[-1].start_offset == offset and len(keep) > 1:
                # The holder would be empty: keep it only when it is the first file.
                drop.insert(0, keep.pop())
            self._files = keep
            self._starts = [f.start_offset for f in keep]
            self._flushed_offset = min(self._flushed_offset, offset)
            # Removed names must be made durable too: the next flush fsyncs the directory.
            self._names_durable_end = min(self._names_durable_end, offset)
        cleared_bytes = 0
        for mapped in drop:
            log.warning("truncate: deleting %s", mapped.path)
            cleared_bytes += mapped.write_position
            mapped.destroy(unlink_now=True)  # appends recreate that name next
        if keep:
            holder = keep[-1]
            position = min(offset - holder.start_offset, holder.size_bytes)
            cleared_bytes += holder.truncate_to(position)
        return cleared_bytes

    def delete_all(self) -> int:
        """Drop every file (a DLedger follower restarting from its leader's base); return
        roughly how many written bytes went. The next write names its own start."""
        with self._files_lock:
            drop, self._files, self._starts = self._files, [], []
            self._flushed_offset = 0
            self._names_durable_end = 0
        cleared_bytes = 0
        for mapped in drop:
            cleared_bytes += mapped.write_position
            mapped.destroy(unlink_now=True)
        return cleared_bytes

    def delete_first(self, count: int) -> list[MappedFile]:
        """Remove the first `count` files (never the last one); return what was removed.
        A file a reader holds stays on disk until that reader releases it."""
        with self._files_lock:
            count = min(count, len(self._files) - 1)
            if count <= 0:
                return []
            removed = self._files[:count]
            self._files = self._files[count:]
            self._starts = self._starts[count:]
        for mapped in removed:
            mapped.destroy()
        return removed

    def close(self) -> None:
        with self._allocate_lock:
            if self._prepared is not None:
                self._prepared.destroy()  # an allocated file never used: not part of the log
                self._prepared = None
        with self._files_lock:
            for mapped in self._files:
                mapped.close()
            self._files = []
            self._starts = []

"""An ordered set of equal-size mapped files that form one contiguous log of bytes."""

from __future__ import annotations

import bisect
import logging
import os
import threading
from pathlib import Path

from store.errors import StoreCorruptError
from store.mapped_file import MappedFile
from store.paths import TEMP_SUFFIX, name_to_offset, offset_to_name

log = logging.getLogger(__name__)


class MappedFileQueue:
    """Files named by 20-digit start offset; offset `o` lives in the file starting at
    `o - o % file_size_bytes`. The last file is the only one written."""

    def __init__(self, directory: Path, file_size_bytes: int) -> None:
        self.directory = directory
        self.file_size_bytes = file_size_bytes
        self._files: list[MappedFile] = []
        self._starts: list[int] = []
        # Guards the file list (roll, retention, truncate) against readers looking up files.
        self._files_lock = threading.Lock()

    # -- loading -------------------------------------------------------------------------

    def load(self) -> None:
        """Map every file, after checking the set is whole: equal sizes, contiguous names."""
        assert not self._files
        self.directory.mkdir(parents=True, exist_ok=True)
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
            mapped.write_position = self.file_size_bytes
            mapped.flushed_position = self.file_size_bytes
            self._files.append(mapped)
            self._starts.append(start)

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
        last = self.last_file()
        return last.start_offset + last.flushed_position if last is not None else 0

    # -- changes -------------------------------------------------------------------------

    def writable_file(self, start_if_empty: int = 0) -> MappedFile:
        """The last file, or a new one when there is none or the last is full."""
        last = self.last_file()
        if last is not None and not last.is_full:
            return last
        start = last.end_offset if last is not None else start_if_empty
        assert start % self.file_size_bytes == 0, start
        self.directory.mkdir(parents=True, exist_ok=True)
        mapped = MappedFile(
            self.directory / offset_to_name(start), start, self.file_size_bytes, create=True
        )
        with self._files_lock:
            self._files.append(mapped)
            self._starts.append(start)
        return mapped

    def flush(self) -> int:
        """Flush every file with unflushed bytes (a roll may leave two); return the offset."""
        for mapped in self.files[-2:]:
            mapped.flush()
        return self.flushed_offset

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
        with self._files_lock:
            for mapped in self._files:
                mapped.close()
            self._files = []
            self._starts = []

"""A file layer for tests: records every durability call in order, and fails chosen ones."""

from __future__ import annotations

import mmap
import threading
from pathlib import Path

from store.files.disk import Disk


class RecordingDisk(Disk):
    """Does every call for real unless told to fail it, and keeps (name, target, start, size).

    `target` is the mmap object for msync, the fd for fsync/allocate, the directory for
    fsync_directory. `failures[name] = error` makes that call raise `error` (once or always).
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, object, int, int]] = []
        self.failures: dict[str, OSError] = {}
        self.fail_once: set[str] = set()
        self._lock = threading.Lock()

    def _enter(self, name: str, target: object, start: int = 0, size_bytes: int = 0) -> None:
        with self._lock:
            self.calls.append((name, target, start, size_bytes))
            error = self.failures.get(name)
            if error is not None and name in self.fail_once:
                del self.failures[name]
        if error is not None:
            raise error

    def msync(self, mapping: mmap.mmap, start: int, size_bytes: int) -> None:
        self._enter("msync", mapping, start, size_bytes)
        super().msync(mapping, start, size_bytes)

    def fsync(self, fd: int) -> None:
        self._enter("fsync", fd)
        super().fsync(fd)

    def fsync_directory(self, directory: Path) -> None:
        self._enter("fsync_directory", directory)
        super().fsync_directory(directory)

    def allocate(self, fd: int, size_bytes: int) -> None:
        self._enter("allocate", fd, 0, size_bytes)
        super().allocate(fd, size_bytes)

    def msynced_end(self, mapping: mmap.mmap) -> int:
        """How far from the start of a mapping msync calls have covered it (they start at or
        below the previous end, so the covered part is one prefix)."""
        end = 0
        for name, target, start, size_bytes in list(self.calls):
            if name == "msync" and target is mapping and start <= end:
                end = max(end, start + size_bytes)
        return end

    def directory_fsyncs(self) -> list[Path]:
        return [target for name, target, _, _ in list(self.calls)
                if name == "fsync_directory" and isinstance(target, Path)]

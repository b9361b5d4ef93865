"""A bound on the consume-queue files mapped at once, least recently used closed first.

Each mapped file costs two file descriptors (Python's mmap keeps a duplicate), so without a
bound the descriptor count grows with the number of topics until `open()` fails everywhere.
A queue maps its files when it is used and reports itself here; past `files_max`, the least
recently used idle queues are closed. A queue busy in another thread is skipped, never waited
for, so the bound can be passed briefly by the queues in use at that moment.

Closing does not cost a sync: the pages written through the mapping stay in the page cache,
and the paths of files closed with unflushed entries are kept until `sync_closed()` (called
by the checkpoint, before it promises those entries) makes them durable in one `syncfs` of the
data directory's file system.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

from store.files import durability

log = logging.getLogger(__name__)

# Past this many closed files waiting for their sync, the thread that closes one syncs them
# itself: the list is bounded, and its cost is paid by whoever makes it grow.
UNSYNCED_PATHS_MAX = 65_536


class Closable(Protocol):
    def close_if_idle(self) -> bool:
        """Unmap every file and report it with `closed()`, unless the queue is in use by
        another thread; return whether it was closed."""
        ...

    def flush(self) -> None: ...


class OpenFiles:
    def __init__(self, directory: Path, files_max: int) -> None:
        assert files_max >= 1, files_max
        self.files_max = files_max
        self._directory = directory
        self._open: OrderedDict[Closable, int] = OrderedDict()  # queue -> its mapped files
        self._open_file_count = 0
        self._unsynced: list[Path] = []
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._directory_fd: int | None = None
        self.closed_count = 0

    @property
    def open_file_count(self) -> int:
        return self._open_file_count

    def used(self, queue: Closable, file_count: int) -> None:
        """`queue` was just used and maps `file_count` files: the most recent, now."""
        with self._lock:
            previous = self._open.pop(queue, 0)
            self._open[queue] = file_count
            self._open_file_count += file_count - previous
            if self._open_file_count <= self.files_max:
                return
            victims = [q for q in self._open if q is not queue]
        self._close_idle(victims)

    def closed(self, queue: Closable, unflushed_paths: list[Path]) -> None:
        """`queue` unmapped its files (called under its lock, so that a flush running now
        finds its entries either still mapped or among the unsynced paths)."""
        with self._lock:
            self._unsynced.extend(unflushed_paths)
            too_many = len(self._unsynced) > UNSYNCED_PATHS_MAX
            if queue in self._open:
                self._open_file_count -= self._open.pop(queue)
                self.closed_count += 1
        if too_many:
            self.sync_closed()

    def open_queues(self) -> list[Closable]:
        with self._lock:
            return list(self._open)

    def _close_idle(self, victims: list[Closable]) -> None:
        for victim in victims:  # least recently used first
            if self._open_file_count <= self.files_max:
                return
            victim.close_if_idle()  # a busy one stays open: try the next

    def close_all(self) -> None:
        """Close every idle queue (shutdown: frees the descriptors before the checkpoint)."""
        for victim in self.open_queues():
            victim.close_if_idle()

    def sync_closed(self) -> int:
        """Make the files closed with unflushed entries durable; return how many there were.

        An error is raised (OSError), never retried here: the pages it concerns may already
        be dropped by the kernel (DESIGN, "Durability rules")."""
        with self._sync_lock:
            with self._lock:
                paths, self._unsynced = self._unsynced, []
            if not paths:
                return 0
            contents = durability.read_before_sync(paths)
            if not _syncfs(self._directory_descriptor()):
                for path in dict.fromkeys(paths):
                    _fsync_path(path)
            durability.whole_files_synced(contents)
            return len(paths)

    def _directory_descriptor(self) -> int:
        """Kept open for the store's life: syncfs reports a writeback error to a descriptor
        opened before it happened, so a fresh one could miss it."""
        if self._directory_fd is None:
            self._directory.mkdir(parents=True, exist_ok=True)
            self._directory_fd = os.open(self._directory, os.O_RDONLY)
        return self._directory_fd

    def close(self) -> None:
        if self._directory_fd is not None:
            os.close(self._directory_fd)
            self._directory_fd = None


def _load_syncfs() -> ctypes._NamedFuncPointer | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (AttributeError, OSError):  # not Linux: per-file fsync instead
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_SYNCFS = _load_syncfs()


def _syncfs(fd: int) -> bool:
    """syncfs(2) on the file system of `fd`; False when the platform has none."""
    if _SYNCFS is None:
        return False
    if _SYNCFS(fd) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"syncfs of the consume-queue directory failed: "
                             f"{os.strerror(error)}")
    return True


def _fsync_path(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:  # removed by retention or truncation since: nothing to keep
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

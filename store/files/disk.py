"""The file layer: every call the store makes to put bytes or names on disk for good.

msync of a mapping, fsync of a file or a directory, and the allocation of a new file's blocks
go through one `Disk` object, handed down from the store to its file queues and checkpoint, so
that a test can record these calls or make them fail (EIO, ENOSPC) on real files. Nothing here
decides what a failure means: callers do (see store/flush.py and store/files/mapped_file_queue.py).

msync goes to libc's through ctypes on Linux, because `mmap.flush` holds the interpreter lock
for the whole call: an msync of a log's dirty pages (tens to hundreds of ms on a busy disk)
stopped every thread of the process, producers, the HTTP gateway and replication included
(`python bench/msync_gil.py` shows it). A ctypes call releases the lock.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from collections.abc import Callable
from pathlib import Path

from store.files import durability

_MS_SYNC = 4  # <sys/mman.h> on Linux


def _libc_msync() -> Callable[[int, int, int], int] | None:
    """libc's msync(addr, length, flags), or None where it is not used (then mmap.flush)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).msync
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    function.restype = ctypes.c_int
    return function


_LIBC_MSYNC = _libc_msync()


def msync_unlocked(mapping: mmap.mmap, start: int, size_bytes: int) -> None:
    """`mapping.flush(start, size_bytes)`, with the interpreter lock released while the kernel
    writes the pages back (libc's msync through ctypes; mmap.flush where that is not
    available, or for a read-only mapping). The same errors: ValueError out of the mapping,
    OSError from msync (EINVAL for a start that is not page-aligned, EIO...)."""
    if _LIBC_MSYNC is None or size_bytes <= 0:
        mapping.flush(start, size_bytes)
        return
    if start < 0 or start + size_bytes > len(mapping):
        raise ValueError(f"flush values out of range: {start} + {size_bytes} > {len(mapping)}")
    try:
        # Pins the mapping while msync runs: closing it meanwhile raises BufferError rather
        # than unmapping the pages under the call.
        anchor = ctypes.c_char.from_buffer(mapping)
    except TypeError:  # a read-only mapping
        mapping.flush(start, size_bytes)
        return
    try:
        if _LIBC_MSYNC(ctypes.addressof(anchor) + start, size_bytes, _MS_SYNC) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error))
    finally:
        del anchor


class Disk:
    """The real calls. Subclass in tests to record or fail them."""

    def msync(self, mapping: mmap.mmap, start: int, size_bytes: int) -> None:
        """Write back [start, start + size_bytes) of a mapping (other threads run meanwhile);
        raises OSError on failure."""
        msync_unlocked(mapping, start, size_bytes)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fsync_directory(self, directory: Path) -> None:
        """Make the names in `directory` (files created, renamed or removed) durable."""
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        for listener in durability.listeners:
            listener.names_synced(directory)

    def allocate(self, fd: int, size_bytes: int, offset: int = 0) -> None:
        """Reserve every block of [offset, offset + size_bytes): a full disk answers ENOSPC
        here, not SIGBUS at the first write into the mapping, as a hole would."""
        os.posix_fallocate(fd, offset, size_bytes)

    def free_bytes(self, directory: Path) -> int:
        """What an unprivileged writer may still take on the file system of `directory`."""
        stats = os.statvfs(directory)
        return stats.f_bavail * stats.f_frsize


REAL_DISK = Disk()

"""The file layer: every call the store makes to put bytes or names on disk for good.

msync of a mapping, fsync of a file or a directory, and the allocation of a new file's blocks
go through one `Disk` object, handed down from the store to its file queues and checkpoint, so
that a test can record these calls or make them fail (EIO, ENOSPC) on real files. Nothing here
decides what a failure means: callers do (see store/flush.py and store/mapped_file_queue.py).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from store import durability


class Disk:
    """The real calls. Subclass in tests to record or fail them."""

    def msync(self, mapping: mmap.mmap, start: int, size_bytes: int) -> None:
        """Write back [start, start + size_bytes) of a mapping; raises OSError on failure."""
        mapping.flush(start, size_bytes)

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

    def allocate(self, fd: int, size_bytes: int) -> None:
        """Reserve every block of [0, size_bytes): a full disk answers ENOSPC here, not SIGBUS
        at the first write into the mapping, as a sparse (ftruncate) file would."""
        os.posix_fallocate(fd, 0, size_bytes)


REAL_DISK = Disk()

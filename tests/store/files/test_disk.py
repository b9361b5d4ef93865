"""The real file layer's msync (store/files/disk.py): libc's through ctypes, with mmap.flush's
answers, and the mapping free to close afterwards."""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from store.files import disk as disk_module
from store.files.disk import REAL_DISK, msync_unlocked

SIZE_BYTES = 16 * mmap.PAGESIZE


@pytest.fixture
def mapping(tmp_path: Path) -> Iterator[mmap.mmap]:
    fd = os.open(tmp_path / "mapped", os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, SIZE_BYTES)
    mapped = mmap.mmap(fd, SIZE_BYTES)
    yield mapped
    mapped.close()  # raises BufferError if an msync left the mapping pinned
    os.close(fd)


def test_msync_uses_libc_on_linux_and_the_bytes_reach_the_file(
        mapping: mmap.mmap, tmp_path: Path) -> None:
    assert disk_module._LIBC_MSYNC is not None  # the suite runs on Linux
    mapping[mmap.PAGESIZE:mmap.PAGESIZE + 5] = b"hello"
    REAL_DISK.msync(mapping, mmap.PAGESIZE, 2 * mmap.PAGESIZE)
    assert (tmp_path / "mapped").read_bytes()[mmap.PAGESIZE:mmap.PAGESIZE + 5] == b"hello"


def test_msync_refuses_what_mmap_flush_refuses(mapping: mmap.mmap) -> None:
    """Out of the mapping: ValueError; a start that is not page-aligned: OSError EINVAL."""
    with pytest.raises(ValueError, match="out of range"):
        msync_unlocked(mapping, mmap.PAGESIZE, SIZE_BYTES)
    with pytest.raises(ValueError):
        msync_unlocked(mapping, -mmap.PAGESIZE, mmap.PAGESIZE)
    with pytest.raises(OSError) as raised:
        msync_unlocked(mapping, 1, mmap.PAGESIZE)
    assert raised.value.errno == errno.EINVAL
    msync_unlocked(mapping, 0, SIZE_BYTES)  # the whole mapping, exactly
    msync_unlocked(mapping, 0, 0)


def test_a_read_only_mapping_is_flushed_by_mmap(tmp_path: Path) -> None:
    path = tmp_path / "read-only"
    path.write_bytes(bytes(SIZE_BYTES))
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        msync_unlocked(mapped, 0, SIZE_BYTES)


def test_without_libc_msync_mmap_flush_is_used(
        mapping: mmap.mmap, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disk_module, "_LIBC_MSYNC", None)
    mapping[:3] = b"abc"
    msync_unlocked(mapping, 0, mmap.PAGESIZE)
    with pytest.raises(ValueError):
        msync_unlocked(mapping, 0, SIZE_BYTES + 1)

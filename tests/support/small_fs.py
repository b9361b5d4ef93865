"""A real, small file system for disk-full tests: a tmpfs of a few MiB mounted in the test's
directory (we run as root in CI; elsewhere the test is skipped, saying why)."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

SMALL_FS_BYTES = 4 << 20


@contextmanager
def small_fs(directory: Path, size_bytes: int = SMALL_FS_BYTES) -> Iterator[Path]:
    """Mount a tmpfs of `size_bytes` at `directory`; unmount (lazily) afterwards."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(directory)],
            capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        pytest.skip("no `mount` command: cannot make a small file system for disk-full tests")
    if mounted.returncode != 0:
        pytest.skip(f"mounting a {size_bytes}-byte tmpfs is not permitted here (needs root): "
                    f"{mounted.stderr.strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True, timeout=30,
                       check=False)


def fill(directory: Path) -> Path:
    """Take every free byte of the file system holding `directory`; return the filler file
    (remove it to give the space back)."""
    filler = directory / "filler"
    chunk = bytes(64 * 1024)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            try:
                written = os.write(fd, chunk)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
                continue
            if written < len(chunk):
                chunk = chunk[: max(1, len(chunk) // 2)]
    finally:
        os.close(fd)
    return filler

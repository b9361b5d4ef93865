"""The commit-log file size a data dir keeps, whatever `mapped_file_size_bytes` says now.

A log's offsets depend on its file size (each file starts at a multiple of it, a record never
spans two files, a slave's or a DLedger follower's log is a byte copy of its leader's), so a
data dir goes on with the size it was created with. The store records it in the data dir
(`commitlog_file_size`, at every start once its files are recovered); a data dir from before
that record is read from its files: with two files or more the first one's size (only the
last file can be short, a torn tail); with one, its size when it is larger than the setting.
A single file shorter than the setting is ambiguous without the record (a smaller log, or a
torn tail of the setting's size): it is taken for a torn tail, as stores did before.
"""

from __future__ import annotations

import logging
from pathlib import Path

from store.checkpoint import write_file_atomically
from store.files.disk import REAL_DISK, Disk
from store.paths import StorePaths, name_to_offset

log = logging.getLogger(__name__)

RECORD_BYTES_MAX = 32  # a decimal number and a newline


def kept_file_size(data_dir: Path, configured_bytes: int) -> int | None:
    """The file size the data dir's commit log keeps, or None for a log without files yet
    (then the setting applies)."""
    paths = StorePaths(data_dir)
    recorded = _recorded(paths.commit_log_file_size)
    if recorded is not None:
        return recorded
    sizes = _file_sizes(paths.commit_log_dir)
    if not sizes:
        return None
    if len(sizes) >= 2 or sizes[0] > configured_bytes:
        return sizes[0]
    return configured_bytes


def record_file_size(data_dir: Path, size_bytes: int, disk: Disk = REAL_DISK) -> None:
    """Record the size (a no-op when it is recorded already). A failure is logged: without
    the record the size is read from the files, which is right but for one short file."""
    path = StorePaths(data_dir).commit_log_file_size
    if _recorded(path) == size_bytes:
        return
    try:
        write_file_atomically(path, f"{size_bytes}\n".encode(), disk)
    except OSError as error:
        log.warning("could not record the commit-log file size in %s: %s", path, error)


def _recorded(path: Path) -> int | None:
    try:
        with path.open("rb") as stream:
            text = stream.read(RECORD_BYTES_MAX + 1)
    except FileNotFoundError:
        return None
    try:
        size = int(text) if len(text) <= RECORD_BYTES_MAX else 0
    except ValueError:
        size = 0
    if size <= 0:
        log.warning("%s does not hold a file size (%r): reading the size from the files",
                    path, text[:RECORD_BYTES_MAX])
        return None
    return size


def _file_sizes(directory: Path) -> list[int]:
    """The sizes of the log's files, oldest first."""
    try:
        starts = sorted((start, path) for path in directory.iterdir()
                        if (start := name_to_offset(path.name)) is not None and path.is_file())
    except FileNotFoundError:
        return []
    return [path.stat().st_size for _, path in starts]

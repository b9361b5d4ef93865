"""Read-only iteration over a commit log's records, for export: works on a stopped broker's
data dir and beside a running one (files mapped read-only, nothing written, no lock taken)."""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from store.errors import StoreCorruptError
from store.paths import name_to_offset
from store.record import BLANK_MAGIC, PREFIX, RecordError, StoredMessage, decode_record


@dataclass(frozen=True, slots=True)
class LogFile:
    path: Path
    start_offset: int
    size_bytes: int


def list_log_files(commit_log_dir: Path) -> list[LogFile]:
    """The commit-log files in offset order; a broken set is refused, naming the file."""
    files = []
    for path in sorted(commit_log_dir.iterdir()):
        start = name_to_offset(path.name)
        if start is None:
            continue  # temp files and foreign names are not part of the log
        files.append(LogFile(path, start, path.stat().st_size))
    for previous, current in zip(files, files[1:], strict=False):
        if current.start_offset != previous.start_offset + previous.size_bytes:
            raise StoreCorruptError(f"{current.path}: files are not contiguous")
    return files


def log_range(files: list[LogFile]) -> tuple[int, int]:
    """[min, end of files) of the log (the end of valid records is found by reading)."""
    if not files:
        return 0, 0
    return files[0].start_offset, files[-1].start_offset + files[-1].size_bytes


def iter_records(files: list[LogFile], start: int, end: int) -> Iterator[StoredMessage]:
    """Records whose offset is in [start, end); stops at the first invalid or unwritten one
    (the growing tail of a running log, or a torn tail)."""
    offset = start
    for log_file in files:
        file_end = log_file.start_offset + log_file.size_bytes
        if file_end <= offset:
            continue
        if log_file.start_offset > offset or offset >= end:
            return
        with open(log_file.path, "rb") as handle:
            mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            position = offset - log_file.start_offset
            while offset < end and position + 8 <= log_file.size_bytes:
                total_size, magic = PREFIX.unpack_from(mapping, position)
                if magic == BLANK_MAGIC:
                    break
                try:
                    record = decode_record(memoryview(mapping)[: log_file.size_bytes], position)
                except RecordError:
                    return
                if record.commit_log_offset != offset:
                    return
                yield record
                position += total_size
                offset += total_size
        finally:
            mapping.close()
        if offset >= end:
            return
        offset = file_end


def commit_log_dir(data_dir: Path) -> Path:
    path = data_dir / "commitlog"
    if not path.is_dir():
        raise FileNotFoundError(f"{data_dir} has no commitlog/ directory: not a twinlog data dir")
    return path

"""Read-only iteration over a commit log's records, for export: works on a stopped broker's
data dir and beside a running one (files mapped read-only, nothing written, no lock taken).

`iter_records` decodes one record at a time into StoredMessage objects. `iter_windows` is the
bulk path the export uses: it maps one window of a file at a time, so memory stays bounded
whatever the log's size; it walks the record sizes in a thin loop, gathers the window's fixed
headers with numpy, checks the framing (magic, physical offset) and verifies every body's CRC,
on a helper thread, for the next window while the caller decodes this one.
`store.snapshot.columns` then checks and decodes the rest of the records' contents in bulk.
Both stop where the other stops, and both read only records that end at or before the
range's end: the end is a durable (or replicated) offset, and a record that reaches past it
may not survive a power loss.
"""

from __future__ import annotations

import enum
import mmap
import os
import struct
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from isal.isal_zlib import crc32

from store.errors import StoreCorruptError
from store.paths import name_to_offset
from store.record import (
    BLANK_MAGIC,
    HEADER_SIZE,
    MESSAGE_MAGIC,
    PREFIX,
    RECORD_OVERHEAD,
    RecordError,
    StoredMessage,
    decode_record,
)
from store.snapshot.gather import Bytes, Int64s, byte_rows

# The V1 header (store/record.py HEADER) as a numpy record type: big-endian, 88 bytes a row.
HEADER_DTYPE = np.dtype([
    ("total_size", ">i4"), ("magic", ">u4"), ("body_crc", ">i4"), ("queue_id", ">i4"),
    ("flag", ">i4"), ("queue_offset", ">i8"), ("commit_log_offset", ">i8"),
    ("sys_flag", ">i4"), ("born_timestamp_ms", ">i8"), ("born_host", "V8"),
    ("store_timestamp_ms", ">i8"), ("store_host", "V8"), ("reconsume_times", ">i4"),
    ("prepared_transaction_offset", ">i8"), ("body_size", ">i4"),
])
assert HEADER_DTYPE.itemsize == HEADER_SIZE
WINDOW_BYTES = 16 * 1024 * 1024
# The first window of an iteration holds at most this many records (the next ones are bound
# by WINDOW_BYTES only): the first rows come out quickly, and a start offset that is not a
# record's is met before a whole window is mapped.
FIRST_WINDOW_RECORDS = 10
_SIZE = struct.Struct(">i")
_CRC_MASK = 0x7FFFFFFF
_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


@dataclass(frozen=True, slots=True)
class LogFile:
    path: Path
    start_offset: int
    size_bytes: int


# Opens a log file for reading: a descriptor valid inside the `with`, or None when the file
# was removed (by retention) since it was listed.
OpenLogFile = Callable[[LogFile], AbstractContextManager[int | None]]


class LogFileRemoved(Exception):
    """A file of the range was removed by retention before it was read: the iteration ends
    after the records read so far."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path.name} was removed by retention before it was read")
        self.path = path


@contextmanager
def open_by_path(log_file: LogFile) -> Iterator[int | None]:
    try:
        fd = os.open(log_file.path, os.O_RDONLY)
    except FileNotFoundError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def list_log_files(commit_log_dir: Path) -> list[LogFile]:
    """The commit-log files in offset order; a broken set is refused, naming the file."""
    files: list[LogFile] = []
    for path in sorted(commit_log_dir.iterdir()):
        start = name_to_offset(path.name)
        if start is None:
            continue  # temp files and foreign names are not part of the log
        try:
            files.append(LogFile(path, start, path.stat().st_size))
        except FileNotFoundError:
            files = []  # retention removes from the start: what came before goes too
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
    """Records wholly inside [start, end); stops at the first invalid or unwritten one (the
    growing tail of a running log, or a torn tail), or the first that reaches past `end`."""
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
                if offset + total_size > end:
                    return
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


@dataclass(frozen=True, slots=True)
class RecordWindow:
    """Consecutive records of one file, framed: their sizes chain, their magic is a message's
    and their physical offset is where they are; their body matches its CRC. The rest of
    their contents (field sizes, properties) is checked when they are decoded (columns.py).

    `data` is a read-only mapping of part of the file, unmapped when the last array over it is
    dropped; `starts` are the records' positions in it and `header` their fixed headers."""

    data: Bytes
    base_offset: int
    starts: Int64s
    header: npt.NDArray[Any]

    @property
    def count(self) -> int:
        return len(self.starts)

    @property
    def end_offset(self) -> int:
        """The commit-log offset after the window's last record."""
        return self.base_offset + int(self.starts[-1]) + int(self.header["total_size"][-1])

    def prefix(self, count: int) -> RecordWindow:
        """The window's first `count` records."""
        return RecordWindow(self.data, self.base_offset, self.starts[:count],
                            self.header[:count])


class _Next(enum.Enum):
    MORE = "more"  # read on in this file
    FILE_DONE = "file done"  # blank end marker, end of the file or of the range
    STOP = "stop"  # an invalid or unwritten record: nothing after it is read


@dataclass(frozen=True, slots=True)
class _Mapped:
    """A part of a file mapped from `map_start`, to read records from `position` on."""

    mapping: mmap.mmap
    map_start: int
    position: int


def iter_windows(files: list[LogFile], start: int, end: int, window_bytes: int = WINDOW_BYTES,
                 first_records: int = FIRST_WINDOW_RECORDS,
                 open_file: OpenLogFile = open_by_path) -> Generator[RecordWindow]:
    """The records `iter_records(files, start, end)` reads, a window at a time: at most
    `window_bytes` of log are mapped at once (or one record, when it is bigger), plus the
    next window, mapped and checked by a helper thread while this one is used. Raises
    LogFileRemoved, after the windows before it, when a file is gone by the time it is read."""
    offset = start
    records_max = first_records
    with ThreadPoolExecutor(1, thread_name_prefix="snapshot-map") as mapper:
        for log_file in files:
            file_end = log_file.start_offset + log_file.size_bytes
            if file_end <= offset:
                continue
            if log_file.start_offset > offset or offset >= end:
                return
            with open_file(log_file) as fd:
                if fd is None:
                    raise LogFileRemoved(log_file.path)
                ready: Future[tuple[RecordWindow | None, _Next]] | None = mapper.submit(
                    _next_window, fd, log_file, offset, end, window_bytes, records_max)
                try:
                    while ready is not None:
                        window, state = ready.result()
                        ready = None
                        if window is None:
                            break
                        offset = window.end_offset
                        records_max = window_bytes  # no more records than bytes, whatever
                        if state is _Next.MORE:  # read the next window while this one is used
                            ready = mapper.submit(_next_window, fd, log_file, offset, end,
                                                  window_bytes, records_max)
                        yield window
                finally:
                    if ready is not None:  # iteration stopped early: the file stays open
                        wait([ready])  # until the helper is done with it
            if state is _Next.STOP or offset >= end:
                return
            offset = file_end


def _next_window(fd: int, log_file: LogFile, offset: int, end: int, window_bytes: int,
                 records_max: int) -> tuple[RecordWindow | None, _Next]:
    """The window at `offset` mapped, framed and its bodies' CRCs checked, and what comes
    after it. It runs on the helper thread while the caller decodes the window before: the
    decode spends most of its time in numpy and Arrow calls that release the GIL, so this
    window's size walk and CRC loop run meanwhile, on the second core."""
    mapped = _map_window(fd, log_file, offset, end, window_bytes, records_max)
    return _read_window(mapped, log_file, end, records_max)


def _map_window(fd: int, log_file: LogFile, offset: int, end: int, window_bytes: int,
                records_max: int) -> _Mapped | _Next:
    """The file mapped for the window at `offset`, or what ends the file there."""
    position = offset - log_file.start_offset
    limit = min(end - log_file.start_offset, log_file.size_bytes)
    if position >= limit or position + PREFIX.size > log_file.size_bytes:
        return _Next.FILE_DONE
    size, magic = PREFIX.unpack(os.pread(fd, PREFIX.size, position))
    if magic == BLANK_MAGIC:
        return _Next.FILE_DONE
    if magic != MESSAGE_MAGIC or size < RECORD_OVERHEAD or position + size > limit:
        return _Next.STOP  # invalid, or reaching past the range's end (not durable yet)
    map_start = position - position % mmap.ALLOCATIONGRANULARITY
    span = max(size, min(window_bytes, 2 * size * records_max))  # enough for a few records
    map_end = min(log_file.size_bytes, position + span)
    mapping = mmap.mmap(fd, map_end - map_start, flags=_MAP_FLAGS, prot=mmap.PROT_READ,
                        offset=map_start)
    return _Mapped(mapping, map_start, position)


def _read_window(mapped: _Mapped | _Next, log_file: LogFile, end: int,
                 records_max: int) -> tuple[RecordWindow | None, _Next]:
    """The records of a mapped window, checked, and what comes after them."""
    if not isinstance(mapped, _Mapped):
        return None, mapped
    mapping, map_start = mapped.mapping, mapped.map_start
    limit = min(end - log_file.start_offset, log_file.size_bytes)
    starts = _scan(mapping, mapped.position - map_start, limit - map_start, records_max)
    window = RecordWindow(np.frombuffer(mapping, dtype=np.uint8),
                          log_file.start_offset + map_start, starts, _headers(mapping, starts))
    count, state = _checked_prefix(window, memoryview(mapping))
    if count == 0:
        return None, state
    return (window if count == window.count else window.prefix(count)), state


def _headers(mapping: mmap.mmap, starts: Int64s) -> npt.NDArray[Any]:
    """The fixed headers of the records at `starts`, gathered in one numpy copy."""
    rows = byte_rows(np.frombuffer(mapping, dtype=np.uint8), HEADER_SIZE)[starts]
    return rows.view(HEADER_DTYPE)[:, 0]


def _checked_prefix(window: RecordWindow, view: memoryview) -> tuple[int, _Next]:
    """How many leading records of the window are framed right with a body that matches its
    CRC, and what comes after them: the file's end marker ends the file, anything else the
    iteration."""
    header = window.header
    framed = (header["magic"] == MESSAGE_MAGIC) & (
        header["commit_log_offset"] == window.starts + window.base_offset)
    count = _leading(framed)
    verified = _crc_prefix(window, view, count)
    if verified == window.count:
        return verified, _Next.MORE
    end_marker = verified == count and int(header["magic"][count]) == BLANK_MAGIC
    return verified, _Next.FILE_DONE if end_marker else _Next.STOP


def _crc_prefix(window: RecordWindow, view: memoryview, count: int) -> int:
    """How many of the first `count` records have a body that matches its CRC (`view` is the
    window's data). The CRC is zlib's (RocketMQ's: java.util.zip.CRC32), computed by ISA-L:
    a call a body, as nothing computes many CRCs in one call, but ISA-L's carry-less multiply
    code takes a sixth of zlib's time for a 1 KiB body, and this check was the export's
    biggest cost."""
    body_begins = window.starts[:count] + HEADER_SIZE
    body_ends = body_begins + window.header["body_size"][:count]  # checked later: a slice
    crcs = np.fromiter(map(crc32, map(view.__getitem__, map(slice, body_begins.tolist(),
                                                          body_ends.tolist()))),
                       dtype=np.int64, count=count)
    return _leading((crcs & _CRC_MASK) == window.header["body_crc"][:count])


def _leading(valid: npt.NDArray[np.bool_]) -> int:
    """How many leading entries are true."""
    return len(valid) if valid.all() else int(np.argmin(valid))


def _scan(mapping: mmap.mmap, position: int, limit: int, records_max: int) -> Int64s:
    """Record positions from `position` (whose record fits) while below `limit`: each next
    position is the previous one plus its TOTALSIZE; a size too small for a record or a
    record past the mapping's end ends the walk (the next window looks at it again), and so
    does one past `limit` (the next window stops there). A window may end where a record
    does, or less than a size field after it: that record's size is read by the next one."""
    starts: list[int] = []
    append = starts.append
    unpack = _SIZE.unpack_from
    bound = min(len(mapping), limit)
    sizes_end = len(mapping) - _SIZE.size  # the last position whose size field is mapped
    for _ in range(records_max):
        if position >= limit or position > sizes_end:
            break
        (size,) = unpack(mapping, position)
        if size < RECORD_OVERHEAD or position + size > bound:
            break
        append(position)
        position += size
    return np.array(starts, dtype=np.int64)


def commit_log_dir(data_dir: Path) -> Path:
    path = data_dir / "commitlog"
    if not path.is_dir():
        raise FileNotFoundError(f"{data_dir} has no commitlog/ directory: not a twinlog data dir")
    return path

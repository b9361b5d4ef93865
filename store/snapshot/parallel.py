"""The export spread over worker processes: the range is cut into segments (SEGMENT_BYTES of
one file each), each exported by a worker of a bounded pool into its own part files, with the
same per-record checks (framing, body CRC, contents) and the same end bound as the serial
export. The result is the records the serial export writes, no more:

- A file's first segment starts at a known record (the range's start or the file's); another
  starts at the first header at or after its start whose magic is a message's and whose
  physical-offset field is where it is, and takes the records that start before its stop.
- The coordinator joins the segments in log order: each must start where the one before
  ended. One that does not (a header look-alike inside a body, or an invalid record where the
  chain arrives) is exported again from where the chain arrives, on the coordinator.
- A segment that ends at an invalid record, at the range's end or before a file retention
  removed ends the export there: every later segment's files are deleted. One that ends at a
  file's end marker ends that file.

Workers open the files by path (a descriptor held by the broker cannot be handed to them): a
file retention removes before a worker reads it ends the snapshot there, like a file removed
before a serial export reaches it.
"""

from __future__ import annotations

import enum
import mmap
import multiprocessing
import os
import struct
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from store.record import BLANK_MAGIC, HEADER_SIZE, MESSAGE_MAGIC, PREFIX
from store.snapshot.log_reader import HEADER_DTYPE, LogFile, LogFileRemoved, open_by_path
from store.snapshot.messages import MessageWriter, Progress, Totals, Written, export_messages
from store.snapshot.throttle import Throttle

SEGMENT_BYTES = 32 * 1024 * 1024
_MAGIC = struct.pack(">I", MESSAGE_MAGIC)
_MAGIC_AT = HEADER_DTYPE.fields["magic"][1]  # type: ignore[index]
_OFFSET_AT = HEADER_DTYPE.fields["commit_log_offset"][1]  # type: ignore[index]
_OFFSET = struct.Struct(">q")


class Ending(enum.Enum):
    AT_STOP = "at stop"  # the records that start before the segment's stop are written
    FILE_DONE = "file done"  # the file's end marker, or its end
    STOPPED = "stopped"  # an invalid or unwritten record, or the range's end: nothing after
    REMOVED = "removed"  # retention removed the file before it was read


@dataclass(frozen=True)
class Segment:
    index: int
    log_file: LogFile
    start: int  # a commit-log offset: a record's when known_start, else where to look from
    known_start: bool
    stop: int  # records that start at or past it are the next segment's
    range_to: int
    directory: Path
    include_bodies: bool
    bytes_per_s: float


@dataclass(frozen=True)
class SegmentResult:
    start: int | None  # the first record's offset; None: no record found
    totals: Totals
    ending: Ending
    files: list[Path]


def plan(files: Sequence[LogFile], range_from: int, range_to: int, directory: Path,
         include_bodies: bool, bytes_per_s: float) -> list[Segment]:
    """The range cut into segments of at most SEGMENT_BYTES, none across two files."""
    segment_bytes = SEGMENT_BYTES  # read at each call: a test makes it small
    segments: list[Segment] = []
    for log_file in files:
        begin = max(range_from, log_file.start_offset)
        end = min(range_to, log_file.start_offset + log_file.size_bytes)
        for start in range(begin, end, segment_bytes):
            segments.append(Segment(len(segments), log_file, start, start == begin,
                                    min(start + segment_bytes, end), range_to, directory,
                                    include_bodies, bytes_per_s))
    return segments


def run_segment(segment: Segment) -> SegmentResult:
    """Export one segment (in a worker process, or on the coordinator)."""
    try:
        start = segment.start if segment.known_start else _resync(segment)
    except FileNotFoundError:
        removed = str(LogFileRemoved(segment.log_file.path))
        return SegmentResult(None, Totals(end=segment.start, removed=removed), Ending.REMOVED,
                             [])
    if start is None:
        return SegmentResult(None, Totals(end=segment.start), Ending.STOPPED, [])
    writer = MessageWriter(segment.directory, prefix=f"part-s{segment.index:05d}")
    written = export_messages([segment.log_file], open_by_path, start, segment.range_to,
                              writer, segment.include_bodies, Throttle(segment.bytes_per_s),
                              stop=segment.stop)
    totals = Totals(writer.count, writer.body_bytes, dict(writer.topic_counts), written.end,
                    written.removed)
    return SegmentResult(start, totals, _ending(segment, written), writer.files)


def _resync(segment: Segment) -> int | None:
    """The first record at or after the segment's start, found by its own header: the magic
    of a message and the physical offset of where it is (None: none before the stop)."""
    log_file = segment.log_file
    with open(log_file.path, "rb") as handle:
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        begin = segment.start - log_file.start_offset
        stop = segment.stop - log_file.start_offset
        found = mapping.find(_MAGIC, begin + _MAGIC_AT, stop + _MAGIC_AT)
        while found != -1:
            position = found - _MAGIC_AT
            if (position + HEADER_SIZE <= len(mapping) and _OFFSET.unpack_from(
                    mapping, position + _OFFSET_AT)[0] == log_file.start_offset + position):
                return log_file.start_offset + position
            found = mapping.find(_MAGIC, found + 1, stop + _MAGIC_AT)
        return None
    finally:
        mapping.close()


def _ending(segment: Segment, written: Written) -> Ending:
    if written.removed is not None:
        return Ending.REMOVED
    if written.invalid:
        return Ending.STOPPED
    if written.end >= segment.stop:
        return Ending.AT_STOP
    log_file = segment.log_file
    position = written.end - log_file.start_offset
    if position + PREFIX.size > log_file.size_bytes:
        return Ending.FILE_DONE
    try:
        with open(log_file.path, "rb") as handle:
            _, magic = PREFIX.unpack(os.pread(handle.fileno(), PREFIX.size, position))
    except FileNotFoundError:
        return Ending.STOPPED
    return Ending.FILE_DONE if magic == BLANK_MAGIC else Ending.STOPPED


def export_parallel(segments: list[Segment], workers: int, range_from: int, range_to: int,
                    progress: Progress | None = None) -> Totals:
    """The segments exported by `workers` processes and joined into the serial result."""
    # Never fork a threaded broker: workers fork from a clean server process, which has
    # imported this module (numpy, pyarrow) once for every later export.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = [pool.submit(run_segment, segment) for segment in segments]
        try:
            return _join(segments, futures, range_from, range_to, progress)
        finally:
            for future in futures:
                _discard(future)


def _join(segments: list[Segment], futures: list[Future[SegmentResult]], range_from: int,
          range_to: int, progress: Progress | None) -> Totals:
    totals = Totals(end=range_from)
    expected = range_from  # where the chain of records arrives
    finished_file: LogFile | None = None
    for segment, future in zip(segments, futures, strict=True):
        if segment.log_file == finished_file:
            continue  # past the file's end marker
        result = future.result()
        if expected >= segment.stop:
            _delete(result.files)  # a record that began before spans this segment
            continue
        if result.start != expected:
            _delete(result.files)
            result = run_segment(replace(segment, start=expected, known_start=True))
        futures[segment.index] = _done(result)  # joined: its files are kept
        totals.add(result.totals)
        expected = result.totals.end
        if progress is not None:
            progress(expected - range_from, range_to - range_from)
        if result.ending is Ending.FILE_DONE:
            finished_file = segment.log_file
            expected = segment.log_file.start_offset + segment.log_file.size_bytes
        elif result.ending is not Ending.AT_STOP:
            break
    return totals


def _done(result: SegmentResult) -> Future[SegmentResult]:
    future: Future[SegmentResult] = Future()
    future.set_result(SegmentResult(result.start, result.totals, result.ending, []))
    return future


def _discard(future: Future[SegmentResult]) -> None:
    """A segment not joined: cancelled, or its files deleted once it is done."""
    if not future.cancel() and future.exception() is None:
        _delete(future.result().files)


def _delete(files: list[Path]) -> None:
    for path in files:
        path.unlink(missing_ok=True)

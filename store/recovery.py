"""Recovery, as numbered passes run at every start (crash or not):

1. clean temp files and validate each file set (done by loading: a broken commit-log set
   stops start-up naming the file; a broken consume queue is dropped and rebuilt);
2. choose where to scan from: the checkpoint's recover offset, or the log's start when the
   checkpoint is missing, damaged or out of range;
3. scan records from there, checking size, magic, position and body CRC;
4. truncate the commit log after the last valid record (the torn or corrupt tail), and
   msync what the scan found: after a process crash it may be only in the page cache;
5. truncate consume-queue entries that point past it, and cut each queue at its first hole
   (zeroed entry) or entry not matching the commit log among those redispatch writes again
   (after a power loss, pages of a queue file may be missing below its last written entry);
   msync the entries of the scanned records, for the same reason as in 4;
6. load the key index (a file that fails its checks is deleted, entries past the log's end
   dropped), then redispatch every record from the scan start, or from where the index must
   be rebuilt when that is further back (entries already present are kept).
"""

from __future__ import annotations

import logging
import struct
import time
import zlib
from dataclasses import dataclass

from store.checkpoint import Checkpoint, read_checkpoint
from store.commit_log import CommitLog
from store.dispatch import DispatchService
from store.errors import OffsetNotAvailableError
from store.files.mapped_file import MappedFile
from store.index.consume_queue import ConsumeQueues, EntryCheck
from store.index.key_index import KeyIndex
from store.paths import StorePaths
from store.record import (
    BLANK_MAGIC,
    HEADER,
    HEADER_SIZE,
    MESSAGE_MAGIC,
    RECORD_OVERHEAD,
    RecordError,
)
from store.tombstones import Tombstones, revived_start
from store.topic import is_valid_topic

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    crashed: bool
    checkpoint_used: bool
    scan_start_offset: int
    end_offset: int
    scanned_record_count: int
    cleared_bytes: int
    rebuilt_queue_count: int
    duration_ms: float


def recover(
    paths: StorePaths,
    commit_log: CommitLog,
    queues: ConsumeQueues,
    dispatch: DispatchService,
    *,
    crashed: bool,
    check_crc: bool = True,
    key_index: KeyIndex | None = None,
    tombstones: Tombstones | None = None,
) -> RecoveryReport:
    started = time.perf_counter()
    # Pass 1: load and validate the file sets.
    commit_log.load()
    rebuilt = queues.load()
    # Pass 2: where to scan from.
    checkpoint = read_checkpoint(paths.checkpoint)
    start = commit_log.min_offset
    checkpoint_used = False
    if checkpoint is not None and not rebuilt and _checkpoint_holds(checkpoint, commit_log,
                                                                    queues):
        start = checkpoint.recover_offset
        checkpoint_used = True
    last = commit_log.files.last_file()
    # Pass 3: scan.
    end, scanned = scan_records(commit_log, start, check_crc=check_crc)
    # Pass 4: truncate the commit log's tail.
    cleared_bytes = commit_log.truncate(end) if last is not None else 0
    if cleared_bytes:
        log.warning("recovery: cleared a torn or corrupt tail after offset %d (%d bytes)",
                    end, cleared_bytes)
    # What the scan found may be only in the page cache (a killed process leaves it there):
    # make it durable now, before new records follow it and the checkpoint claims it.
    commit_log.files.sync_written_from(start)
    # Pass 5: consume queues must not point past the log, nor have holes redispatch skips;
    # what they hold for the scanned records goes to disk for the same reason as above.
    queues.truncate_physical(end)
    # A deletion the log lost (its record was not flushed) revives its topic's records below.
    revived = tombstones.cut(end) if tombstones is not None else {}
    for topic in revived:
        queues.remove_topic(topic)
    if revived:
        log.warning("recovery: the log lost the deletion of %s; their records are indexed "
                    "again", ", ".join(sorted(revived)))
    cut_queues = queues.truncate_at_holes(start, _entry_matcher(commit_log))
    if cut_queues:
        log.warning("recovery: %d consume queues had holes or stale entries; rebuilt from "
                    "offset %d", cut_queues, start)
    queues.sync_entries_from(start)
    # Pass 6: redispatch; from further back when the key index lost entries (a damaged
    # file, or none yet): dispatch skips queue entries and index entries already present.
    redispatch_start = revived_start(revived, start, commit_log.min_offset,
                                     commit_log.files.file_size_bytes)
    index_start = key_index.load(end) if key_index is not None else None
    if index_start is not None:
        redispatch_start = max(commit_log.min_offset, min(redispatch_start, index_start))
    dispatch.dispatched_offset = redispatch_start
    while dispatch.dispatch_available():
        pass
    commit_log.set_queue_offsets(queues.queue_offsets())
    report = RecoveryReport(
        crashed=crashed,
        checkpoint_used=checkpoint_used,
        scan_start_offset=start,
        end_offset=end,
        scanned_record_count=scanned,
        cleared_bytes=cleared_bytes,
        rebuilt_queue_count=rebuilt,
        duration_ms=(time.perf_counter() - started) * 1000,
    )
    log.info("recovery: %s", report)
    return report


def _checkpoint_holds(checkpoint: Checkpoint, commit_log: CommitLog,
                      queues: ConsumeQueues) -> bool:
    """Whether the files still keep the checkpoint's promise: the record it names ends at
    (or, past a blank, in the file before) the recover offset, and no queue went missing."""
    if not commit_log.min_offset <= checkpoint.recover_offset <= _files_end(commit_log):
        log.warning("recovery: checkpoint offset %d is outside the log", checkpoint.recover_offset)
        return False
    if queues.count_with_entries() < checkpoint.queue_count:
        log.warning("recovery: %d consume queues expected, %d found; rebuilding all",
                    checkpoint.queue_count, queues.count_with_entries())
        return False
    if checkpoint.last_record_offset < commit_log.min_offset:
        return checkpoint.recover_offset == commit_log.min_offset
    mapped = commit_log.files.find_file(checkpoint.last_record_offset)
    if mapped is None:
        return False
    position = checkpoint.last_record_offset - mapped.start_offset
    end, count, _ = _scan_file(mapped, position, check_crc=True, records_max=1)
    record_end = mapped.start_offset + end
    holds = count == 1 and (record_end == checkpoint.recover_offset
                            or checkpoint.recover_offset == mapped.end_offset)
    if not holds:
        log.warning("recovery: the record before the checkpoint is damaged; scanning all")
    return holds


def _entry_matcher(commit_log: CommitLog) -> EntryCheck:
    def matches(topic: str, queue_id: int, queue_offset: int,
                entry: tuple[int, int, int]) -> bool:
        if entry[0] < commit_log.min_offset:
            return True  # its record went with retention: nothing to check it against
        try:
            record = commit_log.read_record(entry[0])
        except (OffsetNotAvailableError, RecordError):
            return False
        return (record.total_size == entry[1] and record.queue_offset == queue_offset
                and record.queue_id == queue_id and record.topic == topic)

    return matches


def _files_end(commit_log: CommitLog) -> int:
    last = commit_log.files.last_file()
    return last.end_offset if last is not None else 0


def scan_records(commit_log: CommitLog, start: int, *, check_crc: bool) -> tuple[int, int]:
    """The offset after the last valid record from `start` on, and how many were valid."""
    offset = start
    count = 0
    for mapped in commit_log.files.files:
        if mapped.end_offset <= offset:
            continue
        if mapped.start_offset > offset:
            break  # only reached after a blank moved us to this file's start
        position, records, reached_blank = _scan_file(mapped, offset - mapped.start_offset,
                                                      check_crc)
        count += records
        offset = mapped.start_offset + position
        if not reached_blank:
            break
        offset = mapped.end_offset
    return offset, count


def _scan_file(
    mapped: MappedFile, position: int, check_crc: bool, records_max: int = 1 << 62
) -> tuple[int, int, bool]:
    """(position after the last valid record, valid records, whether a blank ended it)."""
    view = mapped.view(0, mapped.size_bytes)
    size_bytes = mapped.size_bytes
    count = 0
    try:
        while position + 8 <= size_bytes and count < records_max:
            total_size, magic = struct.unpack_from(">iI", view, position)
            if magic == BLANK_MAGIC and total_size == size_bytes - position:
                return position, count, True
            if magic != MESSAGE_MAGIC or not RECORD_OVERHEAD <= total_size <= size_bytes - position:
                return position, count, False
            fields = HEADER.unpack_from(view, position)
            physical_offset, body_size = fields[6], fields[14]
            if physical_offset != mapped.start_offset + position:
                return position, count, False
            if body_size < 0 or HEADER_SIZE + body_size + 3 > total_size:
                return position, count, False
            if check_crc:
                body_start = position + HEADER_SIZE
                crc = zlib.crc32(view[body_start : body_start + body_size]) & 0x7FFFFFFF
                if crc != fields[2]:
                    return position, count, False
            if not _tail_fields_fit(view, position, total_size, body_size):
                return position, count, False
            position += total_size
            count += 1
        return position, count, False
    finally:
        view.release()


def _tail_fields_fit(view: memoryview, position: int, total_size: int, body_size: int) -> bool:
    """The topic and properties fill the record exactly, and the topic is a valid name: the
    CRC covers only the body, so a record torn inside its topic (a page lost after the body,
    zeros in the name) would otherwise pass, and dispatch would file it under that name."""
    topic_at = position + HEADER_SIZE + body_size
    topic_size = view[topic_at]
    properties_at = topic_at + 1 + topic_size
    if properties_at + 2 > position + total_size:
        return False
    properties_size: int = struct.unpack_from(">H", view, properties_at)[0]
    if properties_at + 2 + properties_size != position + total_size:
        return False
    try:
        topic = bytes(view[topic_at + 1 : properties_at]).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return is_valid_topic(topic)

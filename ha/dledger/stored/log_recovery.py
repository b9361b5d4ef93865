"""Recovery of a store-backed DLedger log, after the commit log recovered as in every mode.

The index is checked against the commit log from the base on: entries contiguous (each at its
own slot with a valid CRC), terms never decreasing, each no-op at the end of the record before
it, each record at the position rule's place, present whole in the commit log, a valid V1
record whose physical offset is its position, of the indexed size and payload CRC. The first
entry that fails and everything after it is dropped, and the commit-log bytes past the last
kept record are cut: they were never acknowledged (with sync_before_ack an acknowledgement
follows `sync()`, which covers the commit log first, then the index; without it a power
loss may cut acknowledged entries too, as docs/dledger.md says). Uncommitted entries are kept: the
leader confirms or truncates them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ha.dledger.stored.placement import next_position
from ha.dledger.stored.state_files import LogBase, write_log_base
from store.commit_log import CommitLog
from store.errors import OffsetNotAvailableError
from store.files.disk import Disk
from store.index.entry_index import EntryIndex, IndexEntry, payload_crc
from store.message_store import MessageStore
from store.record import RecordError, decode_record

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LogRecoveryReport:
    base_index: int
    last_index: int
    end_position: int  # after the last record kept (-1: none since the last reset)
    first_problem: str | None  # why the entry after `last_index` was dropped, if one was
    cut_bytes: int  # commit-log bytes past the last kept record


def recover_log(store: MessageStore, index: EntryIndex, base: LogBase, base_path: Path,
                disk: Disk) -> tuple[LogBase, IndexEntry | None, LogRecoveryReport]:
    """Keep the valid prefix of the index, cut the rest of it and of the commit log, and make
    what is kept durable (a killed process may have left it in the page cache only). The
    base first moves past the entries retention removed (`_past_retention`)."""
    base = _past_retention(store, index, base, base_path, disk)
    file_size_bytes = store.config.mapped_file_size_bytes
    last: IndexEntry | None = None
    previous_term, end = base.term, base.end_position
    problem: str | None = None
    entry_index = base.index + 1
    while (found := index.read(entry_index)) is not None:
        problem = _problem(found, previous_term, end, store.commit_log, file_size_bytes)
        if problem is not None:
            problem = f"entry {entry_index}: {problem}"
            break
        last, previous_term = found, found.term
        if found.size_bytes:
            end = found.end_position
        entry_index += 1
    index.truncate_from(entry_index)
    index.files.sync_written_from(0)
    cut_bytes = _cut_commit_log(store, end)
    report = LogRecoveryReport(base.index, entry_index - 1, end, problem, cut_bytes)
    if problem is not None or cut_bytes:
        log.warning("dledger recovery: %s", report)
    return base, last, report


def _past_retention(store: MessageStore, index: EntryIndex, base: LogBase, base_path: Path,
                    disk: Disk) -> LogBase:
    """Retention removes a file, then the host compacts the log to the entries it held (at
    its next tick): a stop or crash between the two leaves indexed entries whose records are
    gone. They were committed (retention removes only dispatched files, and dispatch stops
    at the commit), so the base moves past them, as the compaction would have; checked as
    records, they would cut the whole log after them."""
    min_offset = store.commit_log.min_offset
    moved = base
    while (found := index.read(moved.index + 1)) is not None \
            and 0 <= found.position < min_offset:
        moved = LogBase(moved.index + 1, found.term, found.end_position)
    if moved != base:
        log.warning("dledger recovery: entries %d-%d lie below the commit log's first retained "
                    "offset %d (retention removed them before the log was compacted): the "
                    "base moves to %d", base.index + 1, moved.index, min_offset, moved.index)
        write_log_base(base_path, moved, disk)
        index.delete_files_below(moved.index + 1)
    return moved


def _cut_commit_log(store: MessageStore, end: int) -> int:
    commit_log = store.commit_log
    if commit_log.files.last_file() is None:
        return 0
    if end < 0:
        return store.clear_log()
    if commit_log.max_offset <= end:
        return 0
    return store.truncate_uncommitted(end)


def _problem(found: IndexEntry, previous_term: int, previous_end: int, commit_log: CommitLog,
             file_size_bytes: int) -> str | None:
    if found.term < previous_term:
        return f"term {found.term} after term {previous_term}"
    if found.size_bytes == 0:
        return None if found.position == previous_end else \
            f"no-op at {found.position}, the log ends at {previous_end}"
    expected = next_position(previous_end, found.size_bytes, file_size_bytes)
    if expected >= 0 and found.position != expected:
        return f"record indexed at {found.position}, expected at {expected}"
    if expected < 0 and found.position % file_size_bytes != 0:
        return f"first record after a reset indexed at {found.position}, not a file start"
    return _record_problem(found, commit_log)


def _record_problem(found: IndexEntry, commit_log: CommitLog) -> str | None:
    start, end = found.position, found.end_position
    if start < commit_log.min_offset or end > commit_log.max_offset:
        return f"record [{start}, {end}) is not in the commit log"
    try:
        payload = commit_log.read_bytes(start, end)
        if len(payload) != found.size_bytes:
            return f"record at {start} runs past its file"
        record = decode_record(payload)
    except (OffsetNotAvailableError, RecordError) as error:
        return f"record at {start}: {error}"
    if record.commit_log_offset != start or record.total_size != found.size_bytes:
        return f"record at {start} names offset {record.commit_log_offset}, size " \
               f"{record.total_size}"
    if payload_crc(payload) != found.payload_crc:
        return f"record at {start} is not the indexed one (payload CRC)"
    return None

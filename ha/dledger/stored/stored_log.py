"""StoredLog: the node's log (NodeLog) over the commit log, the entry index and the base file.

An entry's payload is one V1 message record exactly as the commit log stores it (its
physical-offset field is its position), or empty for the leader's no-op (no bytes in the
commit log). Position rule, the same on every member: an entry goes at the end of the
previous one if it fits the current file with the 8 bytes of the end-of-file blank to spare,
else at the next file's start after the blank. A record whose physical offset is not that
position is refused (`EntryRecordError`) and nothing is written: a follower's commit-log files
are byte copies of its leader's.

Payloads stay on disk: `term_at`, `slice` and `conflict_hint` read the index (and the commit
log for payloads); memory holds the base, the last entry, the queue-offset counters and the
newest entries up to RECENT_BYTES_MAX (ha/dledger/stored/recent_entries.py), which the leader's
pushes read instead of the disk.
A change is visible at once and durable after `DLedgerStorage.sync()` (a reset and a
compaction rewrite the base file at once: they are rare and must not leave stale entries
under a new base).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ha.dledger.core.messages import Entry
from ha.dledger.stored.placement import (
    EntryRecordError,
    EntryWriteError,
    indexed_end,
    next_position,
)
from ha.dledger.stored.recent_entries import RecentEntries
from ha.dledger.stored.state_files import LogBase, write_log_base
from store.files.disk import Disk
from store.index.entry_index import EntryIndex, IndexEntry, encode_entry, payload_crc
from store.index.queue_counters import next_queue_offsets
from store.message_store import MessageStore
from store.record import (
    END_FILE_MIN_BLANK_LENGTH,
    OFFSETS,
    QUEUE_OFFSET_POSITION,
    Message,
    RecordError,
    check_entry_record,
    decode_head,
    decode_record,
    encode_message,
    with_offsets,
)
from store.status import AppendRawStatus, PutMessageStatus
from store.system_topics import (
    METADATA_TOPIC,
    OP_SNAPSHOT,
    PROPERTY_OP,
    deleted_topic,
    forget_topic,
    queue_starts,
)

log = logging.getLogger(__name__)

# A push carries at most this many payload bytes (at least one entry): bounded frames.
SLICE_BYTES_MAX = 4 * 1024 * 1024
# The newest entries kept in memory for pushes: two full pushes' worth.
RECENT_BYTES_MAX = 2 * SLICE_BYTES_MAX

# What `append` learns from checking a record: its (topic, queue id), queue offset, position.
RecordPlace = tuple[tuple[str, int], int, int]


class StoredLog:
    def __init__(self, store: MessageStore, index: EntryIndex, base: LogBase,
                 last: IndexEntry | None, base_path: Path, disk: Disk) -> None:
        self._store = store
        self._index = index
        self._base = base
        self._base_path = base_path
        self._disk = disk
        self._file_size_bytes = store.config.mapped_file_size_bytes
        # Read once, as CommitLog does: the config computes the host field on every access.
        self._store_host = store.config.store_host_bytes
        self._message_size_max_bytes = store.config.message_size_max_bytes
        self._last_index = last.index if last is not None else base.index
        self._last_term = last.term if last is not None else base.term
        self._end_position = last.end_position if last is not None else base.end_position
        self.committed_index = base.index
        self._recent = RecentEntries(RECENT_BYTES_MAX)
        self._queue_offsets = next_queue_offsets(store.commit_log, store.queues, store.dispatch)
        # The records `encode` built since `start_encoding`, by id, with their places: the
        # leader appends those very objects right after, and parsing a record this log built
        # itself would be waste. Each is placed after the one before (the end and the
        # queue-offset counters below), so that a round's run goes in with one write.
        self._staged: dict[int, tuple[bytes, RecordPlace]] = {}
        self._staged_end = -1
        self._staged_queue_offsets: dict[tuple[str, int], int] = {}
        # Truncations that cut records a previous run had dispatched (a fork repaired).
        self.forks_cut_count = 0
        # Where the records the consume queues index end, as a previous run left them: at
        # a start dispatch restarts lower (from its checkpoint) and waits for the commit.
        self._indexed_end_at_open = indexed_end(store)
        # Called with the offset the log was cut back to (-1: all of it) after a truncation
        # or a reset: a layer that applied records of its own before they committed (group
        # consumption on a leader) learns that some may be gone.
        self.on_cut: Callable[[int], None] | None = None

    # -- the NodeLog views -----------------------------------------------------------------

    @property
    def base_index(self) -> int:
        return self._base.index

    @property
    def base_term(self) -> int:
        return self._base.term

    @property
    def last_index(self) -> int:
        return self._last_index

    @property
    def last_term(self) -> int:
        return self._last_term

    @property
    def end_position(self) -> int:
        """The commit-log offset after the last entry (-1: no record since a reset)."""
        return self._end_position

    def term_at(self, index: int) -> int | None:
        if index == self._base.index:
            return self._base.term
        if index < self._base.index or index > self._last_index:
            return None
        if index == self._last_index:
            return self._last_term
        recent = self._recent.get(index)
        if recent is not None:
            return recent.term
        return self.index_entry(index).term

    def crc_at(self, index: int) -> int | None:
        """The payload CRC at `index`: a recent entry's computed, an older one's indexed."""
        if index <= self._base.index or index > self._last_index:
            return None
        recent = self._recent.get(index)
        if recent is not None:
            return payload_crc(recent.payload)
        return self.index_entry(index).payload_crc

    def index_entry(self, index: int) -> IndexEntry:
        assert self._base.index < index <= self._last_index, (index, self._base.index)
        entry = self._index.read(index)
        assert entry is not None, f"index entry {index} is missing below the log's end"
        return entry

    def end_of(self, index: int) -> int:
        """The commit-log offset after entry `index`'s record (-1: not known). The last
        entry's and a recent record's come from memory (the leader asks at every commit and
        for every peer's lag), older ones from the index."""
        if index == self._base.index:
            return self._base.end_position
        if index == self._last_index:
            return self._end_position
        recent = self._recent.get(index)
        if recent is not None and recent.payload:
            position: int = OFFSETS.unpack_from(recent.payload, QUEUE_OFFSET_POSITION)[1]
            return position + len(recent.payload)
        return self.index_entry(index).end_position

    def entry(self, index: int) -> Entry:
        recent = self._recent.get(index)
        if recent is not None:
            return recent
        found = self.index_entry(index)
        return Entry(index, found.term, self._payload(found))

    def _payload(self, found: IndexEntry) -> bytes:
        if found.size_bytes == 0:
            return b""
        return self._store.commit_log.read_bytes(found.position,
                                                 found.position + found.size_bytes)

    def slice(self, first_index: int, count_max: int) -> tuple[Entry, ...]:
        assert first_index > self._base.index
        recent = self._recent.slice(first_index, count_max, SLICE_BYTES_MAX)
        if recent is not None:
            return recent
        entries: list[Entry] = []
        size_total = 0
        for index in range(first_index, min(self._last_index, first_index + count_max - 1) + 1):
            found = self.index_entry(index)
            if entries and size_total + found.size_bytes > SLICE_BYTES_MAX:
                break
            entries.append(Entry(index, found.term, self._payload(found)))
            size_total += found.size_bytes
        return tuple(entries)

    def matches(self, index: int, term: int) -> bool:
        return self.term_at(index) == term

    def conflict_hint(self, index: int, term: int) -> tuple[int, int]:
        """The largest index <= `index` whose term is <= `term`, and its term (stops at the
        base). Terms never decrease along the log, so a binary search finds it."""
        low, high = self._base.index + 1, min(index, self._last_index)
        found = self._base.index
        while low <= high:
            middle = (low + high) // 2
            middle_term = self.term_at(middle)
            assert middle_term is not None
            if middle_term <= term:
                found, low = middle, middle + 1
            else:
                high = middle - 1
        found_term = self.term_at(found)
        assert found_term is not None
        return found, found_term

    def at_least_as_new(self, last_index: int, last_term: int) -> bool:
        if last_term != self._last_term:
            return last_term > self._last_term
        return last_index >= self._last_index

    # -- the leader's encode ---------------------------------------------------------------

    def start_encoding(self) -> None:
        """Encodes from here on place their records from the log's present end on."""
        self._staged.clear()
        self._staged_queue_offsets.clear()

    def next_queue_offsets(self) -> dict[tuple[str, int], int]:
        """Every queue's next queue offset after the log's end and the records encoded since
        `start_encoding` (on the host thread, as `encode`): where a record encoded now goes."""
        return {**self._queue_offsets, **self._staged_queue_offsets}

    def encode(self, message: Message) -> bytes | tuple[PutMessageStatus, str]:
        """The record as it would be written after the log's end and the records encoded
        since `start_encoding` (appended or not), or why it is refused. The log does not
        change: its queue-offset counters move when the entry is appended (only a topic's
        round-robin turn advances, as for any put)."""
        store = self._store
        queue_id = store.commit_log.choose_queue(message)
        if queue_id < 0:
            return PutMessageStatus.MESSAGE_ILLEGAL, f"queue_id {message.queue_id} is invalid"
        encoded = encode_message(message, queue_id, time.time_ns() // 1_000_000,
                                 self._store_host, self._message_size_max_bytes)
        if isinstance(encoded, tuple):
            return encoded
        if len(encoded) + END_FILE_MIN_BLANK_LENGTH > self._file_size_bytes:
            return PutMessageStatus.MESSAGE_ILLEGAL, f"record of {len(encoded)} bytes is too big"
        end_position = self._staged_end if self._staged else self._end_position
        position = next_position(end_position, len(encoded), self._file_size_bytes)
        if position < 0:
            # Nothing but no-ops since a reset: a new file past anything readers were shown.
            end = max(store.commit_log.max_offset, store.commit_limit or 0)
            position = end + (-end) % self._file_size_bytes
        key = (message.topic, queue_id)
        queue_offset = self._staged_queue_offsets.get(key)
        if queue_offset is None:
            queue_offset = self._queue_offsets.get(key, 0)
        payload = with_offsets(encoded, queue_offset, position)
        self._staged[id(payload)] = (payload, (key, queue_offset, position))
        self._staged_end = position + len(payload)
        self._staged_queue_offsets[key] = queue_offset + 1
        deleted = deleted_topic(message.topic, message.properties)
        if deleted is not None:  # what is encoded after a topic delete starts at 0
            for known in (*self._queue_offsets, *self._staged_queue_offsets):
                if known[0] == deleted:
                    self._staged_queue_offsets[known] = 0
        return payload

    # -- changes ---------------------------------------------------------------------------

    def append(self, entry: Entry) -> None:
        payload = entry.payload
        if payload and self._index.room():
            self._append_records([(entry, self._place(payload, self._end_position))])
        else:
            self._append_alone(entry)

    def append_many(self, entries: Sequence[Entry]) -> None:
        """Append `entries` in order, as `append` would one by one (a refused entry raises,
        the ones before it stay). A run of records that lie back to back in one commit-log
        file, with room for their index entries in the index's last file, goes in with one
        write to each: a push's entries cost one write, not one per entry."""
        start = 0
        while start < len(entries):
            run = self._record_run(entries, start)
            if run:
                self._append_records(run)
                start += len(run)
            else:
                self.append(entries[start])
                start += 1

    def _record_run(self, entries: Sequence[Entry],
                    start: int) -> list[tuple[Entry, RecordPlace]]:
        """The records from `start` on that go in with one write to the commit log and one to
        the index: checked, each at the end of the one before (the first may start the next
        file), as many as the index's last file takes. Stops before anything else (a no-op,
        a record refused, a record that starts a file), which `append` then takes alone."""
        run: list[tuple[Entry, RecordPlace]] = []
        end = self._end_position
        index, term = self._last_index, self._last_term
        for entry in entries[start:start + self._index.room()]:
            # What `append` asserts of each entry, before anything of the run is written.
            assert entry.index == index + 1 and entry.term >= term, (entry, index, term)
            index, term = entry.index, entry.term
            payload = entry.payload
            if not payload:
                break
            try:
                place = self._place(payload, end)
            except EntryRecordError:
                break
            position = place[2]
            if run and position != end:
                break
            run.append((entry, place))
            end = position + len(payload)
        return run

    def _append_records(self, run: list[tuple[Entry, RecordPlace]]) -> None:
        """Write a run of checked records (see `_record_run`) and index them. The index's
        last file has room for them all: nothing can fail once the records are written."""
        first, (_, _, position) = run[0]
        assert first.index == self._last_index + 1, (first.index, self._last_index)
        assert first.term >= self._last_term, (first.term, self._last_term)
        status = self._store.write_entry_record(position,
                                                b"".join([entry.payload for entry, _ in run]))
        if status is not AppendRawStatus.OK:
            raise EntryWriteError(status, f"entries {first.index} to {run[-1][0].index} at "
                                  f"offset {position}")
        encoded: list[bytes] = []
        for entry, (key, queue_offset, record_position) in run:
            payload = entry.payload
            encoded.append(encode_entry(entry.index, entry.term, record_position, len(payload),
                                        payload_crc(payload)))
            self._count(key, queue_offset, payload)
            self._recent.append(entry)
        self._index.append_encoded(first.index, b"".join(encoded))
        last, (_, _, last_position) = run[-1]
        self._last_index, self._last_term = last.index, last.term
        self._end_position = last_position + len(last.payload)

    def _append_alone(self, entry: Entry) -> None:
        """A no-op, or a record whose index entry needs a new index file (which may fail)."""
        assert entry.index == self._last_index + 1, (entry.index, self._last_index)
        assert entry.term >= self._last_term, (entry.term, self._last_term)
        payload = entry.payload
        if not payload:
            self._append_index(IndexEntry(entry.index, entry.term, self._end_position, 0, 0))
            self._recent.append(entry)
            return
        key, queue_offset, position = self._place(payload, self._end_position)
        last_file = self._store.commit_log.files.last_file()
        max_before = -1 if last_file is None else last_file.write_offset  # -1: an empty log
        status = self._store.write_entry_record(position, payload)
        if status is not AppendRawStatus.OK:
            raise EntryWriteError(status, f"entry {entry.index} at offset {position}")
        try:
            self._append_index(IndexEntry(entry.index, entry.term, position, len(payload),
                                          payload_crc(payload)))
        except OSError as error:
            # The record must not outlive its refused entry: the next one goes in its place.
            if max_before < 0:
                self._store.clear_log()
            else:
                self._store.truncate_uncommitted(max_before)
            raise EntryWriteError(AppendRawStatus.CREATE_MAPPED_FILE_FAILED, str(error)) \
                from error
        self._count(key, queue_offset, payload)
        self._recent.append(entry)

    def _count(self, key: tuple[str, int], queue_offset: int, payload: bytes) -> None:
        """An appended record's queue offset; a topic delete (a metadata record: rare, so
        parsed here) drops the deleted topic's counters, on every member, as the commit log of
        a classic master does in its append."""
        self._queue_offsets[key] = queue_offset + 1
        if key[0] == METADATA_TOPIC:
            head = decode_head(payload)
            deleted = deleted_topic(head.topic, head.properties)
            if deleted is not None:
                forget_topic(self._queue_offsets, deleted)
            op = head.properties.get(PROPERTY_OP, "")
            if op == OP_SNAPSHOT:
                # As dispatch starts the queues a snapshot names that this log holds no
                # record of (a member reset to its leader's base): elected, it continues
                # them at the leader's next offsets, not at 0.
                for topic, queue_id, next_offset in queue_starts(op,
                                                                 decode_record(payload).body):
                    self._queue_offsets.setdefault((topic, queue_id), next_offset)

    def _place(self, payload: bytes, end_position: int) -> RecordPlace:
        """Refuse a payload that is not one whole valid record for a log ending at
        `end_position`; return its place. A record `encode` built (that very object) is known
        valid, only its position is checked again: the log may have changed since. Any other
        record ends the staged run (it no longer describes where the log ends)."""
        staged = self._staged.get(id(payload))
        if staged is None or staged[0] is not payload:
            if self._staged:
                self.start_encoding()
            return self._checked_place(payload, end_position)
        self._check_position(staged[1][2], len(payload), end_position)
        return staged[1]

    def _checked_place(self, payload: bytes, end_position: int) -> RecordPlace:
        """The place of `payload`, once it is a whole valid record that goes after a log
        ending at `end_position`."""
        try:
            topic, queue_id, queue_offset, position = check_entry_record(payload)
        except RecordError as error:
            raise EntryRecordError(f"not a valid record: {error}") from error
        self._check_position(position, len(payload), end_position)
        return (topic, queue_id), queue_offset, position

    def _check_position(self, position: int, size_bytes: int, end_position: int) -> None:
        expected = next_position(end_position, size_bytes, self._file_size_bytes)
        if expected < 0 and position % self._file_size_bytes != 0:
            raise EntryRecordError(f"record at {position}: the first record after a reset "
                                   "starts a file")
        if expected >= 0 and position != expected:
            raise EntryRecordError(f"record at {position}, this log's next position is "
                                   f"{expected}")

    def _append_index(self, found: IndexEntry) -> None:
        self._index.append(found)
        self._last_index, self._last_term = found.index, found.term
        if found.size_bytes:
            self._end_position = found.end_position

    def truncate_from(self, index: int) -> None:
        """Remove entries from `index` on (never a committed one); the records go from the
        commit log, the queue-offset counters roll back with them."""
        assert self.committed_index < index, (index, self.committed_index)
        assert self._base.index < index <= self._last_index, (index, self._last_index)
        previous = index - 1
        previous_end = self.end_of(previous)
        previous_term = self.term_at(previous)
        assert previous_term is not None
        store = self._store
        if previous_end < 0:
            store.clear_log()  # no record since the reset before `index`
        elif previous_end < max(store.dispatch.dispatched_offset, self._indexed_end_at_open):
            # Records a previous run dispatched, which the group never committed: this
            # member led alone under another peer list (a fork). Its consume queues, key
            # index and metadata are cut with the log, as a classic slave's are.
            log.warning("dledger: entries from %d on are not the group's (a fork); cutting "
                        "the log back to %d, below what was dispatched (%d)", index,
                        previous_end, max(store.dispatch.dispatched_offset,
                                          self._indexed_end_at_open))
            store.truncate_log(previous_end)
            self._indexed_end_at_open = min(self._indexed_end_at_open, previous_end)
            self.forks_cut_count += 1
        else:
            store.truncate_uncommitted(previous_end)
        self._index.truncate_from(index)
        self._recent.truncate_from(index)
        self._last_index, self._last_term = previous, previous_term
        self._end_position = previous_end
        self._recount_queue_offsets()
        if self.on_cut is not None:
            self.on_cut(previous_end)

    def reset(self, base_index: int, base_term: int) -> None:
        """Drop the whole log; the next entry follows (base_index, base_term), and its record
        starts a file (it is the first record of the leader's first retained file)."""
        assert base_index >= self.committed_index, (base_index, self.committed_index)
        self._cut_unconfirmed_dispatch()
        # Entries go before the new base is written: a crash between leaves an empty log at
        # the old base, never old entries under the new base.
        self._store.clear_log()
        self._index.delete_all()
        self._recent.clear()
        self._set_base(LogBase(base_index, base_term, -1))
        self._last_index, self._last_term, self._end_position = base_index, base_term, -1
        self.committed_index = base_index
        self._recount_queue_offsets()
        if self.on_cut is not None:
            self.on_cut(-1)

    def _cut_unconfirmed_dispatch(self) -> None:
        """Before a reset: records a previous run dispatched past what this run's leader
        confirmed (our commit) may be a fork's (a member that led alone under another peer
        list). The log is about to go whole, but their consume-queue and key-index entries
        and the metadata they made would stay, and the leader's records after its base take
        the same queue offsets: they are cut, as `truncate_from` cuts a fork. A queue left
        without entries is started by the leader's snapshot after its base."""
        store = self._store
        committed_end = self.end_of(self.committed_index)
        if committed_end < store.commit_log.min_offset:
            committed_end = store.commit_log.min_offset
        indexed_end = max(store.dispatch.dispatched_offset, self._indexed_end_at_open)
        if indexed_end <= committed_end or committed_end > store.commit_log.max_offset:
            return
        log.warning("dledger: reset to the leader's base; the records dispatched from %d to %d "
                    "were never confirmed by this run's leader: their consume-queue entries "
                    "and metadata are cut", committed_end, indexed_end)
        store.truncate_log(committed_end)
        self._indexed_end_at_open = min(self._indexed_end_at_open, committed_end)
        self.forks_cut_count += 1

    def compact_to(self, index: int) -> None:
        """Forget entries up to `index` (committed; their records were removed by retention,
        see `compactable_index`); index files wholly below the new base go."""
        assert self._base.index <= index <= self._last_index
        assert index <= self.committed_index, (index, self.committed_index)
        if index == self._base.index:
            return
        term = self.term_at(index)
        assert term is not None
        self._set_base(LogBase(index, term, self.end_of(index)))
        self._index.delete_files_below(index + 1)
        self._recent.drop_through(index)

    def compactable_index(self) -> int:
        """The last committed entry whose record (or position, for a no-op) lies below the
        commit log's first retained file: the index to compact to after retention. The entry
        after it is the record at that file's start, where a follower reset from this base
        starts its log."""
        min_offset = self._store.commit_log.min_offset
        low, high = self._base.index + 1, self.committed_index
        found = self._base.index
        while low <= high:  # positions never decrease along the log
            middle = (low + high) // 2
            if self.index_entry(middle).position < min_offset:
                found, low = middle, middle + 1
            else:
                high = middle - 1
        return found

    @property
    def retained_min_offset(self) -> int:
        """The commit log's first retained offset (retention moves it)."""
        return self._store.commit_log.min_offset

    def hold_retention_for(self, match_indexes: Iterable[int], behind_bytes_max: int) -> None:
        """Keep the commit-log files the peers need to continue after their matches, for
        each peer less than `behind_bytes_max` behind: a peer down or far behind must not
        stop retention and fill the disk; once retention passed it, it is reset from the
        base instead. Retention stops before the held files and says so in
        `store.retention.blocked_offset`, for the admin view."""
        held = [index for index in match_indexes
                if self._end_position - self._start_of(max(index, self._base.index) + 1)
                < behind_bytes_max]
        index = max(min(held, default=self._last_index), self._base.index)
        hold = self._end_position if index >= self._last_index else self._start_of(index + 1)
        self._store.retention.hold_offset = hold if hold >= 0 else None

    def _start_of(self, index: int) -> int:
        if index > self._last_index:
            return self._end_position
        found = self.index_entry(index)
        return found.position if found.size_bytes else found.end_position

    def _set_base(self, base: LogBase) -> None:
        write_log_base(self._base_path, base, self._disk)
        self._base = base

    def _recount_queue_offsets(self) -> None:
        """After a truncation or a reset: the counters, and any staged record, are stale."""
        self.start_encoding()
        store = self._store
        self._queue_offsets = next_queue_offsets(store.commit_log, store.queues, store.dispatch)

    # -- commit ----------------------------------------------------------------------------

    def set_committed(self, index: int) -> None:
        """Entries up to `index` are committed: readers may go up to the end of its record."""
        assert index <= self._last_index, (index, self._last_index)
        if index <= self.committed_index:
            return
        self.committed_index = index
        end = self.end_of(index)
        if end >= 0:
            self._store.set_commit_limit(end)

"""Reads answered with each record's encoded form, made once and kept by commit-log offset.

A consume answer is mostly the same bytes per message read after read: every consumer group
of a topic reads the same records, and a consumer reads some again (a retry, a rebalance).
Decoding a record and encoding its document costs about 10 µs of Python per message, far
above the rest of a read. `EncodedRecords` keeps what the caller's `Encoder` makes of a
record (its piece of an answer, say its JSON document) by commit-log offset, bounded in
bytes (the oldest filled go first); a read of cached records is a queue-entry pass and a
dict look-up each.

The cache never answers what a read of the log would not:
- a record's bytes never change while the log keeps it; a truncation (a slave cut back to
  its master, a DLedger member's uncommitted tail, a reset) raises the log's `generation`,
  and the cache is emptied when it sees a new one, before it answers;
- a record below the log's min offset (removed by retention) answers None, as
  `CommitLog.read_records` does.

Reads of misses decode at most `misses_max` records and stop there (a short answer: the
caller reads on after letting others run).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, cast

from store.commit_log import CommitLog
from store.index.consume_queue import ConsumeQueues
from store.reads import READ_BYTES_MAX, READ_MESSAGES_MAX, GetMessageStatus, place_read, read_runs
from store.record import StoredMessage

# Per cached record, beyond its encoded bytes: the key, the tuple, the dict slot.
ENTRY_OVERHEAD_BYTES = 200


class Encoded(NamedTuple):
    """A record's encoded form, with what a reader needs besides it."""

    data: bytes
    total_size: int
    store_timestamp_ms: int


# A record to its encoded form; the function itself keys the cache (keep one per form).
Encoder = Callable[[StoredMessage], bytes]


@dataclass(slots=True)
class EncodedRead:
    """As GetMessagesResult (store/reads.py), with the records' encoded forms."""

    status: GetMessageStatus
    next_offset: int
    min_offset: int
    max_offset: int
    records: list[Encoded] = field(default_factory=list)


class EncodedRecords:
    """The encoded forms of records, by encoder and commit-log offset, at most `bytes_max`."""

    def __init__(self, commit_log: CommitLog, bytes_max: int) -> None:
        self._commit_log = commit_log
        self.bytes_max = bytes_max
        self._cached: dict[Encoder, dict[int, Encoded]] = {}
        self._filled: deque[tuple[Encoder, int]] = deque()  # the order they were filled in
        self._generation = commit_log.generation
        self._lock = threading.Lock()  # fills and evictions; look-ups take none
        self.size_bytes = 0

    def read(self, queues: ConsumeQueues, topic: str, queue_id: int, queue_offset: int,
             max_count: int, encoder: Encoder, misses_max: int,
             max_bytes: int = READ_BYTES_MAX) -> EncodedRead:
        """`store.reads.get_messages`'s read, each record in its encoded form; it stops early
        (a FOUND answer with fewer records, `next_offset` where it stopped) once it has
        decoded `misses_max` records."""
        max_count = max(1, min(max_count, READ_MESSAGES_MAX))
        max_bytes = max(1, min(max_bytes, READ_BYTES_MAX))
        status, next_offset, low, high, queue = place_read(queues, topic, queue_id,
                                                           queue_offset)
        result = EncodedRead(status, next_offset, low, high)
        if queue is None:
            return result
        commit_log = self._commit_log
        if commit_log.generation != self._generation:
            self.clear(commit_log.generation)
        records = self._all_cached(queue.entries(queue_offset, max_count), encoder,
                                   max_bytes)
        if records is not None:  # the usual read, no record to decode
            result.records = records
            result.next_offset = queue_offset + len(records)
            return result
        result.next_offset = read_runs(
            queue, queue_offset, high, max_count, max_bytes,
            lambda offsets: self.records(offsets, encoder, misses_max), result.records)
        return result

    def _all_cached(self, entries: list[tuple[int, int, int] | None], encoder: Encoder,
                    max_bytes: int) -> list[Encoded] | None:
        """The records of `entries` when all are valid, cached, kept by the log and within
        `max_bytes` (read_runs would read them all); None otherwise."""
        cached = self._cached.get(encoder)
        if cached is None or not entries or None in entries:
            return None
        valid = cast(list[tuple[int, int, int]], entries)
        if valid[0][0] < self._commit_log.min_offset or (
                len(valid) > 1 and sum([entry[1] for entry in valid]) > max_bytes):
            return None
        records = [cached.get(entry[0]) for entry in valid]
        return None if None in records else cast(list[Encoded], records)

    def records(self, offsets: Sequence[int], encoder: Encoder,
                misses_max: int) -> list[Encoded | None]:
        """The encoded records at `offsets` (ascending), None for one gone; fewer than asked
        when `misses_max` had to be decoded before the end."""
        commit_log = self._commit_log
        generation = commit_log.generation
        if generation != self._generation:
            self.clear(generation)
        cached = self._cached.get(encoder, {})
        min_offset = commit_log.min_offset
        found: list[Encoded | None] = []
        missing: list[int] = []  # indexes in `found` of the records to read
        for offset in offsets:
            if offset < min_offset:
                found.append(None)
                continue
            encoded = cached.get(offset)
            if encoded is None:
                if len(missing) == misses_max:
                    break
                missing.append(len(found))
            found.append(encoded)
        if missing:
            messages = commit_log.read_records([offsets[index] for index in missing])
            for index, message in zip(missing, messages, strict=True):
                if message is not None:
                    found[index] = self._fill(offsets[index], encoder, message, generation)
        return found

    def _fill(self, offset: int, encoder: Encoder, message: StoredMessage,
              generation: int) -> Encoded:
        """The encoded record, kept unless the log was truncated since `generation` (when
        the read began): the record may be one the truncation removed."""
        encoded = Encoded(encoder(message), message.total_size, message.store_timestamp_ms)
        size_bytes = len(encoded.data) + ENTRY_OVERHEAD_BYTES
        if size_bytes > self.bytes_max:
            return encoded  # too large to keep: answered, not cached
        with self._lock:
            if generation != self._commit_log.generation or generation != self._generation:
                return encoded
            cached = self._cached.setdefault(encoder, {})
            if offset in cached:
                return encoded
            filled = self._filled
            while filled and self.size_bytes + size_bytes > self.bytes_max:
                oldest_encoder, oldest_offset = filled.popleft()
                oldest = self._cached[oldest_encoder].pop(oldest_offset)
                self.size_bytes -= len(oldest.data) + ENTRY_OVERHEAD_BYTES
            cached[offset] = encoded
            filled.append((encoder, offset))
            self.size_bytes += size_bytes
        return encoded

    def clear(self, generation: int) -> None:
        with self._lock:
            self._cached = {}
            self._filled = deque()
            self.size_bytes = 0
            self._generation = generation

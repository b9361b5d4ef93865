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

A read decodes at most `misses_max` records and stops before the entry that would be one
more (a short answer: the caller reads on after letting others run).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, cast

from store.commit_log import CommitLog
from store.index.consume_queue import ConsumeQueues
from store.reads import (
    READ_BYTES_MAX,
    READ_MESSAGES_MAX,
    Entry,
    GetMessageStatus,
    place_read,
    read_runs,
)
from store.record import StoredMessage

# Per cached record, beyond its encoded bytes: the key, the tuple, the dict slot.
ENTRY_OVERHEAD_BYTES = 200


class Encoded(NamedTuple):
    """A record's encoded form, with what a reader needs besides it."""

    data: bytes
    total_size: int
    store_timestamp_ms: int


# Records to their encoded forms, in order; the function itself keys the cache (keep one
# per form).
Encoder = Callable[[list[StoredMessage]], list[bytes]]
# Encoded(...) without NamedTuple's Python-level __new__: a read may make a thousand.
_new_encoded: Callable[[type[Encoded], tuple[bytes, int, int]], Encoded] = tuple.__new__


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
        # Records answered from the cache, and records decoded for an answer (a read's
        # thread adds without a lock: counts for an operator, a rare lost add is harmless).
        self.hit_count = 0
        self.decoded_count = 0

    def read(self, queues: ConsumeQueues, topic: str, queue_id: int, queue_offset: int,
             max_count: int, encoder: Encoder, misses_max: int,
             max_bytes: int = READ_BYTES_MAX, limit_offset: int | None = None) -> EncodedRead:
        """`store.reads.get_messages`'s read, each record in its encoded form. It decodes at
        most `misses_max` records: it ends before the entry that would be one more (a FOUND
        answer with fewer records, `next_offset` there). With `limit_offset` (a DLedger
        member's commit limit) it stops before the first record that ends past it."""
        max_count = max(1, min(max_count, READ_MESSAGES_MAX))
        max_bytes = max(1, min(max_bytes, READ_BYTES_MAX))
        status, next_offset, low, high, queue = place_read(queues, topic, queue_id,
                                                           queue_offset)
        result = EncodedRead(status, next_offset, low, high)
        if queue is None:
            return result
        generation = self._commit_log.generation
        if generation != self._generation:
            self.clear(generation)
        cached = self._cached.get(encoder, {})
        if not cached:  # every record to decode: no more entries than it may decode
            entries = queue.entries(queue_offset, min(max_count, misses_max))
            taken, stops = len(entries), misses_max < max_count
        else:
            # read_runs stops at the limit itself; the cached answer must too
            entries = _within_limit(queue.entries(queue_offset, max_count), limit_offset)
            records = self._all_cached(entries, cached, max_bytes)
            if records is not None:  # the usual read, no record to decode
                self.hit_count += len(records)
                result.records = records
                result.next_offset = queue_offset + len(records)
                return result
            taken = _within_misses(entries, cached, misses_max)
            stops = taken < len(entries)
        result.next_offset = read_runs(
            queue, queue_offset, queue_offset + taken if stops else high, max_count,
            max_bytes, lambda offsets: self._records(offsets, encoder, cached, generation),
            result.records, entries[:taken], limit_offset)
        return result

    def _all_cached(self, entries: list[Entry | None], cached: dict[int, Encoded],
                    max_bytes: int) -> list[Encoded] | None:
        """The records of `entries` when all are valid, cached, kept by the log and within
        `max_bytes` (read_runs would read them all); None otherwise."""
        if not cached or not entries or None in entries:
            return None
        valid = cast(list[Entry], entries)
        if valid[0][0] < self._commit_log.min_offset or (
                len(valid) > 1 and sum([entry[1] for entry in valid]) > max_bytes):
            return None
        records = [cached.get(entry[0]) for entry in valid]
        return None if None in records else cast(list[Encoded], records)

    def _records(self, offsets: Sequence[int], encoder: Encoder, cached: dict[int, Encoded],
                 generation: int) -> list[Encoded | None]:
        """The encoded records at `offsets` (ascending), None for one gone: the cached ones,
        the others read from the log (a record below its start is never taken from the
        cache)."""
        found: list[Encoded | None]
        wanted: Sequence[int]
        if cached:
            min_offset = self._commit_log.min_offset
            found = [cached.get(offset) if offset >= min_offset else None for offset in offsets]
            missing = [index for index, record in enumerate(found) if record is None]
            self.hit_count += len(found) - len(missing)
            if not missing:
                return found
            wanted = [offsets[index] for index in missing]
        else:  # a cold read: every record to read
            found, missing, wanted = [None] * len(offsets), list(range(len(offsets))), offsets
        read = self._commit_log.read_records(wanted)
        if None in read:  # gone meanwhile (retention): answered as None
            missing = [index for index, message in zip(missing, read, strict=True)
                       if message is not None]
            wanted = [offsets[index] for index in missing]
            read = [message for message in read if message is not None]
        messages = cast(list[StoredMessage], read)
        if not messages:
            return found
        made = [_new_encoded(Encoded, (data, message.total_size, message.store_timestamp_ms))
                for data, message in zip(encoder(messages), messages, strict=True)]
        self.decoded_count += len(made)
        for index, encoded in zip(missing, made, strict=True):
            found[index] = encoded
        if self.bytes_max > 0:
            self._keep(encoder, wanted, made, generation)
        return found

    def _keep(self, encoder: Encoder, offsets: Sequence[int], made: list[Encoded],
              generation: int) -> None:
        """Keep what was made at `offsets`, the oldest kept making room, unless the log was
        truncated since `generation` (when the read began): a record read may be one the
        truncation removed."""
        with self._lock:
            if generation != self._commit_log.generation or generation != self._generation:
                return
            cached = self._cached.setdefault(encoder, {})
            filled = self._filled
            bytes_max = self.bytes_max
            for offset, encoded in zip(offsets, made, strict=True):
                size_bytes = len(encoded[0]) + ENTRY_OVERHEAD_BYTES
                if size_bytes > bytes_max or offset in cached:
                    continue  # too large to keep (answered all the same), or kept already
                while filled and self.size_bytes + size_bytes > bytes_max:
                    oldest_encoder, oldest_offset = filled.popleft()
                    oldest = self._cached[oldest_encoder].pop(oldest_offset)
                    self.size_bytes -= len(oldest[0]) + ENTRY_OVERHEAD_BYTES
                cached[offset] = encoded
                filled.append((encoder, offset))
                self.size_bytes += size_bytes

    def clear(self, generation: int) -> None:
        with self._lock:
            self._cached = {}
            self._filled = deque()
            self.size_bytes = 0
            self._generation = generation


def _within_misses(entries: list[Entry | None], cached: dict[int, Encoded],
                   misses_max: int) -> int:
    """How many of `entries` a read takes to decode at most `misses_max` records."""
    misses = 0
    for index, entry in enumerate(entries):
        if entry is not None and entry[0] not in cached:
            if misses == misses_max:
                return index
            misses += 1
    return len(entries)


def _within_limit(entries: list[Entry | None], limit_offset: int | None) -> list[Entry | None]:
    """The entries before the first whose record ends past `limit_offset` (all: None)."""
    if limit_offset is None:
        return entries
    for index, entry in enumerate(entries):
        if entry is not None and entry[0] + entry[1] > limit_offset:
            return entries[:index]
    return entries

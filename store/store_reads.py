"""A store's reads: messages by queue offset, message id and key, queue ranges, long-poll
parking (the read half of store/message_store.py's MessageStore).
"""

from __future__ import annotations

from collections.abc import Callable

from store.arrivals import Arrivals, Waiter
from store.commit_log import CommitLog
from store.dispatch import DispatchService
from store.encoded_reads import EncodedRead, EncodedRecords, Encoder
from store.errors import OffsetNotAvailableError
from store.index.consume_queue import ConsumeQueues
from store.index.key_index import LOOKUP_RESULTS_MAX, KeyIndex
from store.index.time_search import queue_offset_at_time
from store.message_id import LookupResult, LookupStatus, find_by_msg_id
from store.reads import (
    READ_BYTES_MAX,
    GetMessagesResult,
    get_messages,
    read_heads,
)
from store.record import RecordError, RecordHead, StoredMessage
from store.tombstones import Tombstones


class StoreReads:
    """Reads of a store: messages by queue offset, id and key, queue ranges, long-poll
    parking (part of MessageStore; commit-limited in DLedger mode, as `get_messages` says)."""

    commit_log: CommitLog
    queues: ConsumeQueues
    dispatch: DispatchService
    encoded_records: EncodedRecords
    key_index: KeyIndex
    tombstones: Tombstones
    arrivals: Arrivals

    def get_messages(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int,
        max_bytes: int = READ_BYTES_MAX, *, committed_only: bool = True,
    ) -> GetMessagesResult:
        """Commit-limited (DLedger), a read stops at the commit limit: after a restart the
        consume queues may hold records a previous run dispatched that the group never
        committed (a member that led alone under another peer list); they are served only
        once a leader confirmed them, and are cut if it does not (`committed_only=False`:
        the system feed's rebuild, which reads the log as it is)."""
        limit = self.dispatch.limit_offset if committed_only else None
        return get_messages(self.commit_log, self.queues, topic, queue_id, queue_offset,
                            max_count, max_bytes, limit)

    def get_encoded(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
                    encoder: Encoder, misses_max: int,
                    max_bytes: int = READ_BYTES_MAX) -> EncodedRead:
        """`get_messages`, each record as `encoder` makes it, cached (store/encoded_reads.py);
        it stops after decoding `misses_max` records, and at the commit limit as
        `get_messages` does."""
        return self.encoded_records.read(self.queues, topic, queue_id, queue_offset,
                                         max_count, encoder, misses_max, max_bytes,
                                         self.dispatch.limit_offset)

    def get_message_by_id(self, msg_id: str) -> LookupResult:
        """The record a message id names (store/message_id.py): FOUND, NOT_FOUND or
        MALFORMED_ID. A commit-limited store finds no record past its commit limit."""
        found = find_by_msg_id(self.commit_log, msg_id)
        limit = self.dispatch.limit_offset
        message = found.message
        if limit is not None and message is not None \
                and message.commit_log_offset + message.total_size > limit:
            # DLedger mode: a record past the commit limit may still be truncated away.
            return LookupResult(LookupStatus.NOT_FOUND)
        return found

    def find_by_key(self, topic: str, key: str, count_max: int,
                    begin_timestamp_ms: int = 0,
                    end_timestamp_ms: int = 2**63 - 1) -> list[StoredMessage]:
        """Messages of `topic` with `key`, stored in [begin, end), newest first, at most
        `count_max` (<= 1024): index candidates, each record read and checked (its topic and
        keys), so a hash collision never answers another message."""
        count_max = max(1, min(count_max, LOOKUP_RESULTS_MAX))
        dead_below = self.tombstones.dead_below(topic)
        limit = self.dispatch.limit_offset
        found: list[StoredMessage] = []
        for offset in self.key_index.candidates(topic, key, begin_timestamp_ms,
                                                end_timestamp_ms, count_max * 4):
            if offset < dead_below:
                break  # older candidates belong to the deleted incarnation too
            message = self._record_or_none(offset)
            if message is None or (limit is not None
                                   and offset + message.total_size > limit):
                continue  # DLedger mode: not (or not yet again) committed
            if message.topic == topic and key in (message.keys or "").split(" "):
                found.append(message)
                if len(found) == count_max:
                    break
        return found

    def record_at(self, offset: int) -> tuple[StoredMessage, bool] | None:
        """The whole record that starts at `offset` and whether it is committed (always, in
        the classic modes), or None when no valid record starts there (never written, cut
        by a truncation, removed by retention, or the middle of another record)."""
        message = self._record_or_none(offset)
        if message is None:
            return None
        limit = self.dispatch.limit_offset
        return message, limit is None or offset + message.total_size <= limit

    def dispatch_caught_up(self) -> bool:
        """Whether every record of the log (up to the commit limit, in DLedger mode) is
        dispatched."""
        end = self.commit_log.max_offset
        limit = self.dispatch.limit_offset
        if limit is not None:
            end = min(end, limit)
        return self.dispatch.dispatched_offset >= end

    def read_record_or_none(self, offset: int) -> StoredMessage | None:
        return self._record_or_none(offset)

    def _record_or_none(self, offset: int) -> StoredMessage | None:
        try:
            return self.commit_log.read_record(offset)
        except (OffsetNotAvailableError, RecordError):
            return None  # removed by retention since the index pointed at it

    def park_reader(self, topic: str, queue_id: int, seen_max_offset: int,
                    wake: Callable[[], None]) -> Waiter | None:
        """Call `wake` (from dispatch's thread, or this one) once the queue's max offset
        passes `seen_max_offset`; None when `long_poll_waiters_max` readers wait already.
        The caller unparks the waiter whatever happens (store/arrivals.py)."""
        def current_max_offset() -> int:
            queue = self.queues.get(topic, queue_id)
            return queue.max_queue_offset if queue is not None else 0

        return self.arrivals.park(topic, queue_id, seen_max_offset, current_max_offset, wake)

    def unpark_reader(self, waiter: Waiter) -> None:
        self.arrivals.cancel(waiter)

    def release_readers(self) -> None:
        """The gateway stops: every parked reader, and every one that parks from now on,
        answers at once with what there is (store/arrivals.py `release_all`)."""
        self.arrivals.release_all()

    def queue_offset_at_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int | None:
        """The first queue offset of a message stored at or after `timestamp_ms` (the max
        offset when all are older); None when the queue has no entries yet."""
        queue = self.queues.get(topic, queue_id)
        if queue is None:
            return None
        return queue_offset_at_time(self.commit_log, queue, timestamp_ms)

    def read_heads(self, topic: str, queue_id: int, queue_offset: int, max_count: int,
                   property_name: str | None = None) -> list[RecordHead]:
        """Up to `max_count` messages from `queue_offset` without their bodies (at most
        READ_MESSAGES_MAX per call): keys, properties, offsets and store timestamps; with
        `property_name`, only of messages that may carry it (store/reads.py)."""
        return read_heads(self.commit_log, self.queues, topic, queue_id, queue_offset, max_count,
                          property_name)

    def first_retained_queue_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset whose record the log still holds (the queue's max when it
        holds none; 0 for an unknown queue). A queue's files outlive the records retention
        removed (a file goes once all its entries point below the log), and a log reset to
        a base fills the queue's start with gap entries: the queue's min says neither."""
        queue = self.queues.get(topic, queue_id)
        return 0 if queue is None else queue.next_offset_at(self.commit_log.min_offset)

    def queue_end(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """The queue's next offset and where its last record starts in the log (None: no
        entry yet, or the last one is a gap)."""
        queue = self.queues.get(topic, queue_id)
        if queue is None or queue.max_queue_offset == queue.min_queue_offset:
            return None
        last = queue.get(queue.max_queue_offset - 1)
        return None if last is None else (queue.max_queue_offset, last[0])

    def queue_offset_range(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """[min, max) queue offsets of a queue, or None when it has no entries yet."""
        queue = self.queues.get(topic, queue_id)
        if queue is None:
            return None
        return queue.min_queue_offset, queue.max_queue_offset

    @property
    def min_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def max_offset(self) -> int:
        return self.commit_log.max_offset

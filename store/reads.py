"""Reading a topic/queue from a queue offset, bounded in count and bytes."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from store.commit_log import CommitLog
from store.errors import OffsetNotAvailableError
from store.index.consume_queue import ConsumeQueue, ConsumeQueues
from store.record import RecordError, RecordHead, StoredMessage, property_marker

READ_MESSAGES_MAX = 1024
READ_BYTES_MAX = 16 * 1024 * 1024


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"


@dataclass(slots=True)
class GetMessagesResult:
    status: GetMessageStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage] = field(default_factory=list)
    # A read with a tags-code filter: the queue offsets it passed without reading their
    # records (store/tag_reads.py).
    passed: list[int] = field(default_factory=list)


def get_messages(
    commit_log: CommitLog,
    queues: ConsumeQueues,
    topic: str,
    queue_id: int,
    queue_offset: int,
    max_count: int,
    max_bytes: int = READ_BYTES_MAX,
    limit_offset: int | None = None,
) -> GetMessagesResult:
    """Messages from `queue_offset` on. `next_offset` is where the next read should start;
    an offset below the queue's min answers OFFSET_TOO_SMALL with next_offset = min. With
    `limit_offset`, the read stops before the first record that ends past it."""
    max_count = max(1, min(max_count, READ_MESSAGES_MAX))
    max_bytes = max(1, min(max_bytes, READ_BYTES_MAX))
    status, next_offset, low, high, queue = place_read(queues, topic, queue_id, queue_offset)
    result = GetMessagesResult(status, next_offset, low, high)
    if queue is not None:
        result.next_offset = read_runs(queue, queue_offset, high, max_count, max_bytes,
                                       commit_log.read_records, result.messages,
                                       limit_offset=limit_offset)
    return result


def place_read(queues: ConsumeQueues, topic: str, queue_id: int, queue_offset: int
               ) -> tuple[GetMessageStatus, int, int, int, ConsumeQueue | None]:
    """Where a read from `queue_offset` stands: (status, next offset, min offset, max offset,
    and the queue when there is something to read: FOUND)."""
    queue = queues.get(topic, queue_id)
    if queue is None:
        return GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0, None
    low, high = queue.min_queue_offset, queue.max_queue_offset
    if high == low:
        return GetMessageStatus.NO_MESSAGE_IN_QUEUE, low, low, high, None
    if queue_offset < low:
        return GetMessageStatus.OFFSET_TOO_SMALL, low, low, high, None
    if queue_offset == high:
        return GetMessageStatus.OFFSET_OVERFLOW_ONE, high, low, high, None
    if queue_offset > high:
        return GetMessageStatus.OFFSET_OVERFLOW_BADLY, high, low, high, None
    return GetMessageStatus.FOUND, queue_offset, low, high, queue


class SizedRecord(Protocol):
    @property
    def total_size(self) -> int: ...


R = TypeVar("R", bound=SizedRecord)
Entry = tuple[int, int, int]  # a consume-queue entry: commit-log offset, size, tags code


def read_runs(queue: ConsumeQueue, queue_offset: int, high: int, max_count: int,
              max_bytes: int, read_records: Callable[[list[int]], list[R | None]],
              found: list[R], first_entries: list[Entry | None] | None = None,
              limit_offset: int | None = None,
              wanted_code: Callable[[int], bool] | None = None,
              passed: list[int] | None = None) -> int:
    """The records of the queue's entries from `queue_offset` (below `high`) appended to
    `found`, at most `max_count` and `max_bytes` (past it only as the first), read with
    `read_records` (commit-log offsets to records, None for one gone); the queue offset the
    next read starts at.
    `first_entries`: `queue.entries(queue_offset, max_count)`, when the caller has them.
    With `limit_offset`, the read stops before the first record that ends past it.
    With `wanted_code`, an entry whose tags code it refuses is passed without reading its
    record: its queue offset goes to `passed`, and counts toward `max_count`."""
    passed = [] if passed is None else passed
    size_total = 0
    offset = queue_offset
    # The entries in runs (one pass over the queue's files each), their records read together
    # (one pass over the log's files). More than one run only when entries were invalid or a
    # record was gone (removed by retention between the two reads: skipped, and the read
    # goes on right after it, as entry by entry).
    while offset < high and len(found) + len(passed) < max_count:
        if first_entries is not None:
            entries, first_entries = first_entries, None
        else:
            entries = queue.entries(offset, max_count - len(found) - len(passed))
        if not entries:
            break  # the queue lost its start to retention meanwhile
        wanted: list[tuple[int, int]] = []  # (queue offset, commit-log offset)
        wanted_bytes = size_total
        full = False
        for entry in entries:
            if entry is not None:
                commit_log_offset, size, code = entry
                if limit_offset is not None and commit_log_offset + size > limit_offset:
                    full = True
                    break
                if wanted_code is not None and not wanted_code(code):
                    passed.append(offset)
                    offset += 1
                    continue
                if (found or wanted) and wanted_bytes + size > max_bytes:
                    full = True
                    break
                wanted.append((offset, commit_log_offset))
                wanted_bytes += size
            offset += 1
        records = read_records([position for _, position in wanted])
        for (entry_offset, _), record in zip(wanted, records, strict=True):
            if record is None:
                offset, full = entry_offset + 1, False
                break
            found.append(record)
            size_total += record.total_size
        if full:
            break
    return offset


def read_heads(commit_log: CommitLog, queues: ConsumeQueues, topic: str, queue_id: int,
               queue_offset: int, max_count: int,
               property_name: str | None = None) -> list[RecordHead]:
    """The heads (records without bodies) of up to `max_count` messages from `queue_offset`,
    in queue order; offsets outside the queue, or removed by retention meanwhile, are skipped.
    Memory does not depend on message size: for index rebuilds that need keys and properties.
    With `property_name`, only the heads of messages that may carry that property: the others
    are passed over without decoding their properties (check the property in what comes
    back: a body-free match of its encoded name is all this filter looks at)."""
    queue = queues.get(topic, queue_id)
    if queue is None:
        return []
    start = max(queue_offset, queue.min_queue_offset)
    count = min(start + max(0, min(max_count, READ_MESSAGES_MAX)), queue.max_queue_offset) - start
    offsets = [entry[0] for entry in queue.entries(start, count) if entry is not None]
    if property_name is not None:
        return commit_log.read_heads_having(offsets, property_marker(property_name))
    heads: list[RecordHead] = []
    for offset in offsets:
        try:
            heads.append(commit_log.read_head(offset))
        except (OffsetNotAvailableError, RecordError):
            continue  # removed by retention between the two reads
    return heads

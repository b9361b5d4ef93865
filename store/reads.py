"""Reading a topic/queue from a queue offset, bounded in count and bytes."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from store.commit_log import CommitLog
from store.errors import OffsetNotAvailableError
from store.index.consume_queue import ConsumeQueues
from store.record import RecordError, RecordHead, StoredMessage

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
    queue = queues.get(topic, queue_id)
    if queue is None:
        return GetMessagesResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    low, high = queue.min_queue_offset, queue.max_queue_offset
    if high == low:
        return GetMessagesResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, low, low, high)
    if queue_offset < low:
        return GetMessagesResult(GetMessageStatus.OFFSET_TOO_SMALL, low, low, high)
    if queue_offset == high:
        return GetMessagesResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, high, low, high)
    if queue_offset > high:
        return GetMessagesResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, high, low, high)
    result = GetMessagesResult(GetMessageStatus.FOUND, queue_offset, low, high)
    messages = result.messages
    size_total = 0
    offset = queue_offset
    # The entries in runs (one pass over the queue's files each), their records read together
    # (one pass over the log's files). More than one run only when entries were invalid or a
    # record was gone (removed by retention between the two reads: skipped, and the read
    # goes on right after it, as entry by entry).
    while offset < high and len(messages) < max_count:
        entries = queue.entries(offset, max_count - len(messages))
        if not entries:
            break  # the queue lost its start to retention meanwhile
        wanted: list[tuple[int, int]] = []  # (queue offset, commit-log offset)
        wanted_bytes = size_total
        full = False
        for entry in entries:
            if entry is not None:
                commit_log_offset, size, _ = entry
                if limit_offset is not None and commit_log_offset + size > limit_offset:
                    full = True
                    break
                if (messages or wanted) and wanted_bytes + size > max_bytes:
                    full = True
                    break
                wanted.append((offset, commit_log_offset))
                wanted_bytes += size
            offset += 1
        records = commit_log.read_records([position for _, position in wanted])
        for (entry_offset, _), message in zip(wanted, records, strict=True):
            if message is None:
                offset, full = entry_offset + 1, False
                break
            messages.append(message)
            size_total += message.total_size
        if full:
            break
    result.next_offset = offset
    return result


def read_heads(commit_log: CommitLog, queues: ConsumeQueues, topic: str, queue_id: int,
               queue_offset: int, max_count: int) -> list[RecordHead]:
    """The heads (records without bodies) of up to `max_count` messages from `queue_offset`,
    in queue order; offsets outside the queue, or removed by retention meanwhile, are skipped.
    Memory does not depend on message size: for index rebuilds that need keys and properties."""
    queue = queues.get(topic, queue_id)
    if queue is None:
        return []
    start = max(queue_offset, queue.min_queue_offset)
    end = min(start + max(0, min(max_count, READ_MESSAGES_MAX)), queue.max_queue_offset)
    heads: list[RecordHead] = []
    for offset in range(start, end):
        entry = queue.get(offset)
        if entry is None:
            continue
        try:
            heads.append(commit_log.read_head(entry[0]))
        except (OffsetNotAvailableError, RecordError):
            continue  # removed by retention between the two reads
    return heads

"""The scheduler's read of a lane: a run of entries under one consume-queue lock hold, each
record decoded (the general read, store/reads.py, takes the queue's lock per entry)."""

from __future__ import annotations

from store.commit_log import CommitLog
from store.errors import OffsetNotAvailableError
from store.index.consume_queue import ConsumeQueues
from store.reads import GetMessagesResult, GetMessageStatus
from store.record import RecordError


def read_lane(commit_log: CommitLog, queues: ConsumeQueues, topic: str, queue_id: int,
              queue_offset: int, count_max: int) -> GetMessagesResult:
    """Messages of the lane from `queue_offset` (FOUND, maybe none past a gap run), or
    OFFSET_TOO_SMALL with the queue's min as `next_offset`; NO_MESSAGE_IN_QUEUE at its end."""
    queue = queues.get(topic, queue_id)
    if queue is None:
        return GetMessagesResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    low, high = queue.min_queue_offset, queue.max_queue_offset
    if queue_offset < low:
        return GetMessagesResult(GetMessageStatus.OFFSET_TOO_SMALL, low, low, high)
    if queue_offset >= high:
        return GetMessagesResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, queue_offset, low, high)
    result = GetMessagesResult(GetMessageStatus.FOUND, queue_offset, low, high)
    entries, scanned_end = queue.get_many(queue_offset, count_max)
    result.next_offset = scanned_end  # past the entries read, and the gaps among them
    for entry_offset, commit_log_offset, _ in entries:
        try:
            result.messages.append(commit_log.read_record(commit_log_offset))
        except (OffsetNotAvailableError, RecordError):
            # removed by retention between the two reads: the next round sees it
            result.next_offset = entry_offset
            break
    return result

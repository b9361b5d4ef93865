"""Where a stored DLedger log's records go and what refuses them: the next record's position
(a record never straddles two commit-log files), the end of what the consume queues index,
and the errors of an entry that cannot be written."""

from __future__ import annotations

from ha.dledger.core.storage import LogWriteError
from store.message_store import MessageStore
from store.record import END_FILE_MIN_BLANK_LENGTH
from store.status import AppendRawStatus


def next_position(end_position: int, size_bytes: int, file_size_bytes: int) -> int:
    """Where a record of `size_bytes` goes after a log ending at `end_position`: there if it
    fits the file with the blank to spare, else the next file's start (-1: any file start,
    when no record follows the last reset)."""
    if end_position < 0:
        return -1
    room = file_size_bytes - end_position % file_size_bytes
    return end_position if size_bytes + END_FILE_MIN_BLANK_LENGTH <= room \
        else end_position + room


def indexed_end(store: MessageStore) -> int:
    """The end of the last record any consume queue indexes (0: none)."""
    end = 0
    for queue in store.queues.all():
        if queue.max_queue_offset > queue.min_queue_offset:
            last = queue.get(queue.max_queue_offset - 1)
            if last is not None:
                end = max(end, last[0] + last[1])
    return end


class EntryRecordError(ValueError):
    """An entry's payload is not a record for this log's next position: refused, not written."""


class EntryWriteError(LogWriteError):
    """The disk refused an entry (no new file, a failed msync): nothing of it is kept."""

    def __init__(self, status: AppendRawStatus, detail: str) -> None:
        super().__init__(f"{status.value}: {detail}")
        self.status = status

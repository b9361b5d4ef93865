"""A queue read in one pass (ConsumeQueue.entries, CommitLog.read_records) answers what the
entry-by-entry read answered: the same messages, next offset and byte bound, across file
boundaries of both the queue and the log, and after retention removed records under it."""

from __future__ import annotations

from collections.abc import Callable

from store import GetMessagesResult, GetMessageStatus, MessageStore
from store.errors import OffsetNotAvailableError
from store.record import RecordError
from tests.support.store import fill_across_files, remove_oldest_log_files

OpenStore = Callable[..., MessageStore]


def _entry_by_entry(store: MessageStore, offset: int, count: int,
                    max_bytes: int) -> tuple[list[int], int]:
    """The read as it was: each entry, then its record (queue offsets read, next offset)."""
    queue = store.queues.get("T", 0)
    assert queue is not None
    high = queue.max_queue_offset
    found: list[int] = []
    size_total = 0
    while offset < high and len(found) < count:
        entry = queue.get(offset)
        if entry is not None:
            if found and size_total + entry[1] > max_bytes:
                break
            try:
                message = store.commit_log.read_record(entry[0])
            except (OffsetNotAvailableError, RecordError):
                message = None
            if message is not None:
                found.append(message.queue_offset)
                size_total += entry[1]
        offset += 1
    return found, offset


def _check_reads(store: MessageStore) -> int:
    queue = store.queues.get("T", 0)
    assert queue is not None
    low, high = queue.min_queue_offset, queue.max_queue_offset
    checked = 0
    for offset in range(low, high, 7):
        for count in (1, 5, 16, 17, 40, 200):
            for max_bytes in (1, 4000, 1 << 24):
                result: GetMessagesResult = store.get_messages("T", 0, offset, count, max_bytes)
                assert result.status is GetMessageStatus.FOUND
                expected, next_offset = _entry_by_entry(store, offset, count, max_bytes)
                assert [m.queue_offset for m in result.messages] == expected, (offset, count)
                assert result.next_offset == next_offset, (offset, count, max_bytes)
                checked += 1
    return checked


def test_a_read_in_one_pass_answers_as_entry_by_entry(open_store: OpenStore) -> None:
    store = open_store(consume_queue_entries_per_file=16)
    fill_across_files(store)
    assert _check_reads(store) > 100
    queue = store.queues.get("T", 0)
    assert queue is not None
    assert queue.entries(0, 40) == [queue.get(offset) for offset in range(40)]
    assert queue.entries(140, 40) == [queue.get(offset) for offset in range(140, 150)]
    assert queue.entries(150, 1) == [] and queue.entries(0, 0) == []
    remove_oldest_log_files(store)
    assert _check_reads(store) > 0

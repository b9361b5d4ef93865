"""Next queue offsets for a log whose tail is not dispatched yet (DLedger: uncommitted entries).

The consume queues know every dispatched record; the records from the dispatch position to
the log's end (never in a queue) are read from the commit log. Their queue offsets count too:
the leader numbers a new entry after the uncommitted ones before it. A topic delete among them
(store/system_topics.py) drops the topic's counters: what follows it starts at 0. A metadata
snapshot among them starts the queues it names that have no counter at its queue starts, as
dispatch will (`ConsumeQueues.start_at`) and as a member counts the parts it appends.
"""

from __future__ import annotations

from store.commit_log import CommitLog
from store.dispatch import DispatchService
from store.index.consume_queue import ConsumeQueues
from store.record import BLANK_MAGIC, PREFIX
from store.system_topics import (
    METADATA_TOPIC,
    PROPERTY_OP,
    deleted_topic,
    forget_topic,
    queue_starts,
)


def next_queue_offsets(commit_log: CommitLog, queues: ConsumeQueues,
                       dispatch: DispatchService) -> dict[tuple[str, int], int]:
    """(topic, queue id) -> the next queue offset, over dispatched and undispatched records.
    The dispatch position is read before the queues: a record dispatched meanwhile is then
    counted twice, never missed (the larger offset wins)."""
    start = max(dispatch.dispatched_offset, commit_log.min_offset)
    counters = queues.queue_offsets()
    for topic, queue_id, queue_offset, deleted, starts in records_from(commit_log, start):
        if deleted is not None:
            forget_topic(counters, deleted)
        key = (topic, queue_id)
        if queue_offset + 1 > counters.get(key, 0):
            counters[key] = queue_offset + 1
        for start_topic, start_queue_id, next_offset in starts:
            counters.setdefault((start_topic, start_queue_id), next_offset)
    return counters


RecordCount = tuple[str, int, int, str | None, list[tuple[str, int, int]]]


def records_from(commit_log: CommitLog, start: int) -> list[RecordCount]:
    """(topic, queue id, queue offset, the topic it deletes or None, the queue starts it
    names) of every record from `start` to the log's end."""
    found: list[RecordCount] = []
    offset = start
    file_size = commit_log.files.file_size_bytes
    while offset < commit_log.max_offset:
        prefix = commit_log.read_bytes(offset, offset + PREFIX.size)
        total_size, magic = PREFIX.unpack(prefix)
        if magic == BLANK_MAGIC:
            offset += file_size - offset % file_size
            continue
        record = commit_log.read_record(offset)
        found.append((record.topic, record.queue_id, record.queue_offset,
                      deleted_topic(record.topic, record.properties),
                      queue_starts(record.properties.get(PROPERTY_OP, ""), record.body)
                      if record.topic == METADATA_TOPIC else []))
        offset += total_size
    return found

"""What a receive may hand out from one queue: its candidates (the window's new offsets from
the scan offset, the consume queue's tag hash first with a tag filter) and the messages read
for them, by queue offset."""

from __future__ import annotations

import heapq

from store import MessageStore, StoredMessage
from store.consumption.events import Candidate
from store.consumption.names import PROPERTY_ATTEMPTS, PROPERTY_ORDER_KEY, retry_topic
from store.consumption.queue_state import QueueState
from store.consumption.records import QueueKey
from store.consumption.registry import RETRY_QUEUE_BIT, is_retry_queue
from store.consumption.tags import TagFilter
from store.tag_reads import get_tagged_messages

PREFETCH_GAP_MAX = 8  # offsets apart that one read still joins (it reads the ones between)
PREFETCH_SPAN_MAX = 1_024


class Reads:
    """The messages of one queue a receive read (by queue offset), and its candidates."""

    def __init__(self, store: MessageStore, topic: str, queue_id: int) -> None:
        self._store, self._topic, self._queue_id = store, topic, queue_id
        self.candidates: list[Candidate] = []
        self.found: dict[int, StoredMessage] = {}

    def message(self, queue_offset: int) -> StoredMessage | None:
        message = self.found.get(queue_offset)
        if message is None:
            result = self._store.get_messages(self._topic, self._queue_id, queue_offset, 1)
            if result.messages and result.messages[0].queue_offset == queue_offset:
                message = result.messages[0]
        return message

    def prefetch(self, offsets: list[int]) -> None:
        """Read the messages of `offsets` not read yet (waiting entries, retried in place) in
        runs: one read for offsets at most PREFETCH_GAP_MAX apart, each at most
        PREFETCH_SPAN_MAX offsets long, instead of one read each."""
        wanted = sorted(offset for offset in offsets if offset not in self.found)
        at = 0
        while at < len(wanted):
            start = end = wanted[at]
            at += 1
            while at < len(wanted) and wanted[at] - end <= PREFETCH_GAP_MAX \
                    and wanted[at] - start < PREFETCH_SPAN_MAX:
                end = wanted[at]
                at += 1
            result = self._store.get_messages(self._topic, self._queue_id, start,
                                              end - start + 1)
            for message in result.messages:
                self.found.setdefault(message.queue_offset, message)


def stored_topic(key: QueueKey) -> str:
    """The topic a queue key's messages are stored in: the group's retry topic for a retry
    queue."""
    return retry_topic(key.group, key.topic) if is_retry_queue(key.queue_id) else key.topic


def candidates(store: MessageStore, key: QueueKey, state: QueueState, wanted: int,
               tags: TagFilter) -> Reads:
    """The messages a receive may hand out: the window's waiting ones are read as
    needed (`Reads.message`); new ones from the scan offset, at most the window's room.
    With a tag filter, an entry whose tags code is none of the tags' is a candidate
    without a tag (filtered out) and its record is not read."""
    topic, queue_id = stored_topic(key), key.queue_id & ~RETRY_QUEUE_BIT
    reads = Reads(store, topic, queue_id)
    count = min(state.room, max(wanted, 32))
    if count <= 0:
        return reads
    result = store.get_messages(topic, queue_id, state.scan_offset, count) \
        if tags.tags is None else get_tagged_messages(
            store, topic, queue_id, state.scan_offset, count, tags.tags)
    # Both in queue-offset order; an unread (passed) entry has no message.
    read: list[tuple[int, StoredMessage | None]] = [
        (message.queue_offset, message) for message in result.messages]
    for offset, message in heapq.merge(read, ((offset, None) for offset in result.passed),
                                       key=lambda item: item[0]):
        if offset != state.scan_offset + len(reads.candidates):
            break
        if message is None:
            reads.candidates.append(Candidate(offset))
            continue
        reads.found[offset] = message
        attempts = message.properties.get(PROPERTY_ATTEMPTS)
        reads.candidates.append(Candidate(
            offset, message.properties.get("TAGS"),
            message.properties.get(PROPERTY_ORDER_KEY),
            int(attempts) if attempts and attempts.isdigit() else 0))
    return reads

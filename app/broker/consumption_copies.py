"""The copies group consumption puts: a retried message into its retry topic (a delayed put,
due at the end of its backoff), a dead letter into `%DLQ%{group}`.

A copy is put before the record of the event that ends the delivery (the caller's order), so a
crash between the two leaves the message in flight, to end again: a duplicate at worst, never
a loss. A copy refused (nothing written) raises, and the event is not written either.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence

from store import Message, MessageStore, PutMessageResult, StoredMessage
from store.consumption.events import DeadLettered, Event, Retried
from store.consumption.names import (
    DLQ_PREFIX,
    PROPERTY_ATTEMPTS,
    PROPERTY_ORIGIN_MSG_ID,
    PROPERTY_ORIGIN_OFFSET,
    PROPERTY_ORIGIN_QUEUE_ID,
    PROPERTY_ORIGIN_TOPIC,
    dlq_topic,
    retry_topic,
)
from store.consumption.records import QueueKey
from store.consumption.registry import RETRY_QUEUE_BIT, is_retry_queue
from store.timers.scheduling import Delay, delayed
from store.waits.completion import PutCompletion

READ_RUN_MAX = 256  # messages of one read of a run of offsets


class CopyRefused(Exception):
    """The broker did not store a retry or dead-letter copy; `status` says why."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def origin_of(message: StoredMessage) -> tuple[str, int, int, str]:
    """Where a message was first stored (a retry copy names it), and its message id."""
    properties = message.properties
    topic = properties.get(PROPERTY_ORIGIN_TOPIC)
    if topic is None:
        return message.topic, message.queue_id, message.queue_offset, message.msg_id
    return (topic, int(properties.get(PROPERTY_ORIGIN_QUEUE_ID, "0")),
            int(properties.get(PROPERTY_ORIGIN_OFFSET, "0")),
            properties.get(PROPERTY_ORIGIN_MSG_ID, message.msg_id))


def copy_of(message: StoredMessage, topic: str, queue_id: int, attempts: int,
            origin: tuple[str, int, int, str] | None = None) -> Message:
    """The message for `topic`, naming its origin and the deliveries it had."""
    origin_topic, origin_queue, origin_offset, msg_id = origin or origin_of(message)
    properties = dict(message.properties)
    properties.update({PROPERTY_ORIGIN_TOPIC: origin_topic,
                       PROPERTY_ORIGIN_QUEUE_ID: str(origin_queue),
                       PROPERTY_ORIGIN_OFFSET: str(origin_offset),
                       PROPERTY_ORIGIN_MSG_ID: msg_id, PROPERTY_ATTEMPTS: str(attempts)})
    return Message(topic, message.body, properties, queue_id, message.flag,
                   message.born_timestamp_ms, message.born_host, attempts)


class Copies:
    def __init__(self, store: MessageStore,
                 retry_queue_count: Callable[[str], int] = lambda group: 1,
                 appender: Callable[[Sequence[Message]],
                                    list[tuple[PutMessageResult, PutCompletion]]] | None = None
                 ) -> None:
        """`appender` puts the copies (default: the store; DLedger: the group member)."""
        self._store = store
        self.retry_queue_count = retry_queue_count
        self._put = appender or store.put_messages
        self.dead_lettered_puts = 0
        self.retry_puts = 0

    def dead_letter(self, group: str, message: StoredMessage, attempts: int) -> Message:
        return copy_of(message, dlq_topic(group), 0, attempts)

    def for_ended(self, group: str, key: QueueKey, events: Sequence[Event],
                  now_ms: int) -> list[Message]:
        """The copies the events need: a retry out of its queue (a delayed message, due at
        the end of its backoff), a dead letter. The messages are read a run of offsets at
        a time."""
        needed = [event for event in events if isinstance(event, DeadLettered)
                  or (isinstance(event, Retried) and not event.in_place)]
        if not needed:
            return []
        found = self._read(key, sorted(event.queue_offset for event in needed))
        queues = max(1, self.retry_queue_count(group))
        plan = self._store.config.timers
        copies = []
        for event in needed:
            message = found.get(event.queue_offset)
            if message is None:
                continue  # gone (retention): nothing left to copy
            origin = origin_of(message)
            if isinstance(event, DeadLettered):
                copies.append(copy_of(message, dlq_topic(group), 0, event.attempt, origin))
                continue
            queue_id = zlib.crc32(origin[3].encode()) % queues
            copy = copy_of(message, retry_topic(group, key.topic), queue_id, event.attempt,
                           origin)
            wait_ms = min(event.due_ms - now_ms, plan.max_delay_ms)
            if wait_ms > 0:
                copy, _ = delayed(plan, copy, Delay(delay_ms=wait_ms), now_ms)
            copies.append(copy)
        return copies

    def put(self, copies: Sequence[Message]) -> list[PutCompletion]:
        """The copies, in one append; CopyRefused when one was not stored."""
        if not copies:
            return []
        completions = []
        for result, completion in self._put(copies):
            if not result.status.is_stored:
                raise CopyRefused(result.status.value, result.detail or "copy not stored")
            completions.append(completion)
        self.dead_lettered_puts += sum(copy.topic.startswith(DLQ_PREFIX) for copy in copies)
        self.retry_puts += sum(not copy.topic.startswith(DLQ_PREFIX) for copy in copies)
        return completions

    def _read(self, key: QueueKey, offsets: list[int]) -> dict[int, StoredMessage]:
        """The messages at `offsets` (ascending) of the key's queue, by offset."""
        topic = retry_topic(key.group, key.topic) if is_retry_queue(key.queue_id) else key.topic
        queue_id = key.queue_id & ~RETRY_QUEUE_BIT
        found: dict[int, StoredMessage] = {}
        index = 0
        while index < len(offsets):
            start = offsets[index]
            end = index
            while end + 1 < len(offsets) and offsets[end + 1] == offsets[end] + 1 \
                    and end + 1 - index < READ_RUN_MAX:
                end += 1
            result = self._store.get_messages(topic, queue_id, start, end - index + 1)
            for message in result.messages:
                found[message.queue_offset] = message
            index = max(end + 1, index + max(1, len(result.messages)))
        return found

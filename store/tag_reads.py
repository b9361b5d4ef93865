"""Reads with a tag filter: the consume queue's tags code first, the record's tag to confirm.

Every consume-queue entry carries its record's tags code (store/record.py's `tags_code`, as
RocketMQ's). A read for some tags passes the entries whose code is none of theirs without
reading the commit log; the records it does read are those whose code matches, and the
caller confirms each with its tag (two tags can share a code).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from store.reads import (
    READ_BYTES_MAX,
    READ_MESSAGES_MAX,
    GetMessagesResult,
    place_read,
    read_runs,
)
from store.record import tags_code

if TYPE_CHECKING:
    from store.message_store import MessageStore


def get_tagged_messages(store: MessageStore, topic: str, queue_id: int, queue_offset: int,
                        max_count: int, tags: frozenset[str],
                        max_bytes: int = READ_BYTES_MAX) -> GetMessagesResult:
    """`store.get_messages` for messages of `tags`: at most `max_count` entries from
    `queue_offset`, read (in `messages`: their tags code is one of the tags', confirm the tag)
    or passed unread (in `passed`); `next_offset` follows both. It stops at the store's
    commit limit as `get_messages` does, an entry past it neither read nor passed."""
    codes = frozenset(tags_code(tag) for tag in tags)
    max_count = max(1, min(max_count, READ_MESSAGES_MAX))
    max_bytes = max(1, min(max_bytes, READ_BYTES_MAX))
    status, next_offset, low, high, queue = place_read(store.queues, topic, queue_id,
                                                       queue_offset)
    result = GetMessagesResult(status, next_offset, low, high)
    if queue is not None:
        result.next_offset = read_runs(queue, queue_offset, high, max_count, max_bytes,
                                       store.commit_log.read_records, result.messages,
                                       limit_offset=store.commit_limit,
                                       wanted_code=codes.__contains__, passed=result.passed)
    return result

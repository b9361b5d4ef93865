"""The first queue offset of a message stored at or after a time: a binary search over the
consume queue, reading each probed record's STORETIMESTAMP (8 bytes) from the commit log.

Store timestamps follow commit-log order (a record's time is taken under the append lock),
so along a queue they do not decrease. An entry whose record is gone (a gap entry, or
retention between the two reads) counts as older than any time: it cannot be consumed.
"""

from __future__ import annotations

import struct

from store.commit_log import CommitLog
from store.errors import OffsetNotAvailableError
from store.index.consume_queue import ConsumeQueue

STORE_TIMESTAMP_POSITION = 56  # TOTALSIZE..BORNHOST: 4+4+4+4+4+8+8+4+8+8 bytes
_TIMESTAMP = struct.Struct(">q")


def queue_offset_at_time(commit_log: CommitLog, queue: ConsumeQueue, timestamp_ms: int) -> int:
    """The first offset in [min, max) whose record was stored at or after `timestamp_ms`;
    the max offset when every message is older (a reset there consumes only new ones)."""
    low, high = queue.min_queue_offset, queue.max_queue_offset
    while low < high:
        middle = (low + high) // 2
        stored_ms = _store_timestamp_ms(commit_log, queue, middle)
        if stored_ms is not None and stored_ms >= timestamp_ms:
            high = middle
        else:
            low = middle + 1
    return low


def _store_timestamp_ms(commit_log: CommitLog, queue: ConsumeQueue,
                        queue_offset: int) -> int | None:
    entry = queue.get(queue_offset)
    if entry is None:
        return None
    start = entry[0] + STORE_TIMESTAMP_POSITION
    try:
        raw = commit_log.read_bytes(start, start + _TIMESTAMP.size)
    except OffsetNotAvailableError:
        return None
    if len(raw) != _TIMESTAMP.size:
        return None
    stored_ms: int = _TIMESTAMP.unpack(raw)[0]
    return stored_ms

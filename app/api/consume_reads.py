"""A consume read in chunks, the event loop free between them.

A read runs on the event loop (no thread hop: bench/http_consume.py measured it), so a read
of many messages must not hold the loop for all of them: a produce or a short read arriving
meanwhile waits for one chunk, not the whole read (the consumer and producer together). A
plain read decodes at most CHUNK_MESSAGES records a chunk (records whose documents are kept,
store/encoded_reads.py, cost a look-up each and make no chunk); a tag-filtered read decodes
FILTERED_CHUNK_MESSAGES a chunk (it passes every record it reads and encodes only those it
keeps, for this answer alone: the cache keeps what every reader of the queue gets).

Chunked or not, a read answers what one store read would: the same records (less those a tag
filter leaves out), the same next_offset and the same bounds (max_messages records passed,
READ_BYTES_MAX bytes of them, past it only as a read's first record); min_offset as the read
began, max_offset as its last chunk saw it. A chunk that makes no progress (a DLedger
member's read at its commit limit) ends the read, as the one store read would have ended
there.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from store import GetMessageStatus, MessageStore
from store.consumption.tags import TagFilter
from store.encoded_reads import Encoded, EncodedRead, Encoder
from store.reads import READ_BYTES_MAX
from store.tag_reads import get_tagged_messages

# Records a plain read decodes between two turns of the event loop.
CHUNK_MESSAGES = 8
# Records a tag-filtered read passes between two turns (decoded all, encoded the kept ones).
FILTERED_CHUNK_MESSAGES = 32


@dataclass(slots=True)
class ChunkedRead:
    """A read under way: its answer so far, and the records it passed and their bytes (a
    tag filter keeps fewer than it passes)."""

    result: EncodedRead
    passed: int
    passed_bytes: int


def first_chunk(store: MessageStore, topic: str, queue_id: int, offset: int,
                max_messages: int, encoder: Encoder, tags: TagFilter | None) -> ChunkedRead:
    """A read's first chunk; `reads_on` tells whether more follow."""
    return _chunk(store, topic, queue_id, offset, max_messages, encoder, tags, READ_BYTES_MAX)


def reads_on(read: ChunkedRead, max_messages: int) -> bool:
    """Whether a read's chunks so far leave more to read."""
    result = read.result
    return result.status is GetMessageStatus.FOUND and read.passed < max_messages \
        and result.next_offset < result.max_offset


async def read_on(store: MessageStore, topic: str, queue_id: int, max_messages: int,
                  encoder: Encoder, tags: TagFilter | None, read: ChunkedRead) -> None:
    """The chunks after the first, a turn of the event loop before each, added to `read`."""
    result = read.result
    while read.passed < max_messages and result.next_offset < result.max_offset:
        await asyncio.sleep(0)
        more = _chunk(store, topic, queue_id, result.next_offset, max_messages - read.passed,
                      encoder, tags, max(1, READ_BYTES_MAX - read.passed_bytes))
        if more.result.status is not GetMessageStatus.FOUND \
                or more.result.next_offset == result.next_offset:
            break  # the queue changed under the read (retention, a delete), or at its limit
        if read.passed and more.passed_bytes > READ_BYTES_MAX - read.passed_bytes:
            break  # full: the chunk's one record is past the bound (allowed only as first)
        result.records.extend(more.result.records)
        read.passed += more.passed
        read.passed_bytes += more.passed_bytes
        result.next_offset, result.max_offset = more.result.next_offset, more.result.max_offset


async def read_in_chunks(store: MessageStore, topic: str, queue_id: int, offset: int,
                         max_messages: int, encoder: Encoder,
                         tags: TagFilter | None = None) -> EncodedRead:
    """A whole read, chunk after chunk."""
    read = first_chunk(store, topic, queue_id, offset, max_messages, encoder, tags)
    if reads_on(read, max_messages):
        await read_on(store, topic, queue_id, max_messages, encoder, tags, read)
    return read.result


def _chunk(store: MessageStore, topic: str, queue_id: int, offset: int, max_messages: int,
           encoder: Encoder, tags: TagFilter | None, max_bytes: int) -> ChunkedRead:
    if tags is None:
        part = store.get_encoded(topic, queue_id, offset, max_messages, encoder,
                                 CHUNK_MESSAGES, max_bytes)
        return ChunkedRead(part, len(part.records),
                           sum([record.total_size for record in part.records]))
    # Entries whose tags code is none of the tags' are passed without reading their records
    # (store/tag_reads.py); a record read is kept when its tag matches.
    assert tags.tags is not None
    plain = get_tagged_messages(store, topic, queue_id, offset,
                                min(max_messages, FILTERED_CHUNK_MESSAGES), tags.tags, max_bytes)
    part = EncodedRead(plain.status, plain.next_offset, plain.min_offset, plain.max_offset)
    kept = [message for message in plain.messages if tags.matches(message.tags)]
    if kept:  # (an encoder is not asked for none: its one-dumps split answers [b""])
        part.records = [Encoded(data, message.total_size, message.store_timestamp_ms)
                        for message, data in zip(kept, encoder(kept), strict=True)]
    return ChunkedRead(part, len(plain.messages) + len(plain.passed),
                       sum([message.total_size for message in plain.messages]))

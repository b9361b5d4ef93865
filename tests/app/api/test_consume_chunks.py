"""A consume read in chunks (app/api/consume_reads.py) answers what one store read answers,
while the event loop runs other work between the chunks it decodes; the same read again,
its records' documents kept (store/encoded_reads.py), makes no chunk. A tag-filtered read
goes in chunks too, and a read at a DLedger member's commit limit ends there."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path

import orjson
import pytest

from app.api.consume_reads import CHUNK_MESSAGES, FILTERED_CHUNK_MESSAGES, read_in_chunks
from app.api.routes.consume import ENCODERS, consumed, documents
from store import Message, MessageStore
from store.consumption.tags import TagFilter
from store.encoded_reads import EncodedRead
from store.property_names import PROPERTY_TAGS
from tests.support.store import small_config, wait_dispatched

pytestmark = pytest.mark.anyio

READ_TIMEOUT_S = 5.0


async def test_a_read_in_chunks_answers_as_one_read(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path, consume_queue_entries_per_file=16))
    store.start()
    try:
        for index in range(60):
            store.put_message(Message("T", bytes([index]) * (50 + index * 40), queue_id=0))
        wait_dispatched(store)
        for offset in (0, 5, 31, 59, 60, 61):
            for count in (1, CHUNK_MESSAGES, CHUNK_MESSAGES + 1, 33, 100):
                whole = store.get_messages("T", 0, offset, count)
                documents = [orjson.dumps(consumed(message, "base64"))
                             for message in whole.messages]
                store.encoded_records.clear(store.commit_log.generation)
                for cached in (False, True):
                    chunked, turns = await _turns_while(read_in_chunks(
                        store, "T", 0, offset, count, ENCODERS["base64"]))
                    assert (chunked.status, chunked.next_offset, chunked.min_offset,
                            chunked.max_offset) == (whole.status, whole.next_offset,
                                                    whole.min_offset, whole.max_offset)
                    assert [record.data for record in chunked.records] == documents
                    if cached:
                        assert turns == 0, (offset, count)
                    else:
                        chunks = -(-len(whole.messages) // CHUNK_MESSAGES)
                        assert turns >= chunks - 1, (offset, count)
    finally:
        store.shutdown()


def test_documents_made_together_are_each_messages_own(tmp_path: Path) -> None:
    """documents() splits one orjson.dumps at its separator: bodies holding NUL, commas and
    the separator's own bytes, UTF-8 or not, come out as orjson.dumps of each message."""
    store = MessageStore(small_config(tmp_path))
    store.start()
    try:
        bodies = [b"a\x00,\x00,b", b",\x00,", b"\xff\x00", "é,\x00".encode(), b""]
        for body in bodies:
            store.put_message(Message("T", body, queue_id=0))
        wait_dispatched(store)
        messages = store.get_messages("T", 0, 0, len(bodies)).messages
        assert len(messages) == len(bodies)
        for encoding in ("utf8", "base64"):
            assert documents(messages, encoding) == [
                orjson.dumps(consumed(message, encoding)) for message in messages]
            assert documents(messages[:1], encoding) == [
                orjson.dumps(consumed(messages[0], encoding))]
    finally:
        store.shutdown()


async def _turns_while(read: Awaitable[EncodedRead]) -> tuple[EncodedRead, int]:
    """`read`'s result and how many turns another task of the event loop had meanwhile."""
    turns = 0

    async def other_work() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(other_work())
    await asyncio.sleep(0)
    before = turns
    try:
        async with asyncio.timeout(READ_TIMEOUT_S):  # (no task of its own, no turn taken)
            result = await read
    finally:
        ticker.cancel()
    return result, turns - before


async def test_a_filtered_read_goes_in_chunks_and_answers_as_one_read(tmp_path: Path) -> None:
    """A tag-filtered read of up to 1000 records passes them FILTERED_CHUNK_MESSAGES at a
    time with the loop free between, and keeps what the one store read would keep."""
    store = MessageStore(small_config(tmp_path, consume_queue_entries_per_file=64))
    store.start()
    try:
        for index in range(300):
            tag = "odd" if index % 2 else "even"
            store.put_message(Message("T", bytes([index % 256]) * (20 + index % 50),
                                      properties={PROPERTY_TAGS: tag}, queue_id=0))
        wait_dispatched(store)
        odd = TagFilter.parse("odd")
        for offset in (0, 1, 150, 299, 300, 301):
            for count in (1, FILTERED_CHUNK_MESSAGES, FILTERED_CHUNK_MESSAGES + 1, 100, 1000):
                whole = store.get_messages("T", 0, offset, count)
                kept = [message for message in whole.messages if message.tags == "odd"]
                chunked, turns = await _turns_while(read_in_chunks(
                    store, "T", 0, offset, count, ENCODERS["utf8"], odd))
                assert (chunked.status, chunked.next_offset, chunked.min_offset,
                        chunked.max_offset) == (whole.status, whole.next_offset,
                                                whole.min_offset, whole.max_offset)
                assert [record.data for record in chunked.records] == [
                    orjson.dumps(consumed(message, "utf8")) for message in kept]
                chunks = -(-len(whole.messages) // FILTERED_CHUNK_MESSAGES)
                assert turns >= chunks - 1, (offset, count, turns)
    finally:
        store.shutdown()


@pytest.mark.parametrize("tags", [None, "t"])
async def test_a_read_in_chunks_ends_at_the_commit_limit(tmp_path: Path,
                                                         tags: str | None) -> None:
    """A commit-limited store (a DLedger member) holding entries past its commit limit: a
    read in chunks ends at the limit, answering what the one store read answers, instead
    of reading the same empty chunk again until the limit moves."""
    store = MessageStore(small_config(tmp_path))
    store.start()
    try:
        for _ in range(40):
            store.put_message(Message("T", b"x" * 30, properties={PROPERTY_TAGS: "t"},
                                      queue_id=0))
        wait_dispatched(store)
        twelfth = store.get_messages("T", 0, 11, 1).messages[0]
        store.dispatch.limit_offset = twelfth.commit_log_offset + twelfth.total_size
        whole = store.get_messages("T", 0, 0, 32)
        assert len(whole.messages) == 12 and whole.next_offset == 12
        tag_filter = None if tags is None else TagFilter.parse(tags)
        for _ in range(2):  # documents made, then kept
            chunked, _turns = await _turns_while(read_in_chunks(
                store, "T", 0, 0, 32, ENCODERS["base64"], tag_filter))
            assert (chunked.status, chunked.next_offset, len(chunked.records)) == (
                whole.status, 12, 12)
    finally:
        store.dispatch.limit_offset = None
        store.shutdown()

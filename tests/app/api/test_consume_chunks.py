"""A consume read in chunks (app/api/routes/consume.py read_in_chunks) answers what one
store read answers, while the event loop runs other work between the chunks it decodes; the
same read again, its records' documents kept (store/encoded_reads.py), makes no chunk."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from app.api.routes.consume import (
    CHUNK_MESSAGES,
    ENCODERS,
    consumed,
    documents,
    read_in_chunks,
)
from store import Message, MessageStore
from tests.support.store import small_config, wait_dispatched

pytestmark = pytest.mark.anyio


async def test_a_read_in_chunks_answers_as_one_read(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path, consume_queue_entries_per_file=16))
    store.start()
    try:
        for index in range(60):
            store.put_message(Message("T", bytes([index]) * (50 + index * 40), queue_id=0))
        wait_dispatched(store)
        turns = 0

        async def other_work() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        for offset in (0, 5, 31, 59, 60, 61):
            for count in (1, CHUNK_MESSAGES, CHUNK_MESSAGES + 1, 33, 100):
                whole = store.get_messages("T", 0, offset, count)
                documents = [orjson.dumps(consumed(message, "base64"))
                             for message in whole.messages]
                store.encoded_records.clear(store.commit_log.generation)
                for cached in (False, True):
                    before = turns
                    chunked = await read_in_chunks(store, "T", 0, offset, count,
                                                   ENCODERS["base64"])
                    assert (chunked.status, chunked.next_offset, chunked.min_offset,
                            chunked.max_offset) == (whole.status, whole.next_offset,
                                                    whole.min_offset, whole.max_offset)
                    assert [record.data for record in chunked.records] == documents
                    if cached:
                        assert turns == before, (offset, count)
                    else:
                        chunks = -(-len(whole.messages) // CHUNK_MESSAGES)
                        assert turns - before >= chunks - 1, (offset, count)
        ticker.cancel()
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

"""A consume read in chunks (app/api/routes/consume.py read_in_chunks) answers what one
store read answers, while the event loop runs other work between the chunks it decodes; the
same read again, its records' documents kept (store/encoded_reads.py), makes no chunk."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from app.api.routes.consume import CHUNK_MESSAGES, ENCODERS, consumed, read_in_chunks
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

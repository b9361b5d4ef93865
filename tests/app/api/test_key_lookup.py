"""`GET /v1/topics/{topic}/messages?key=K` through the app."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.app import app_settings, problem, serving
from tests.support.store import wait_dispatched

pytestmark = pytest.mark.anyio


async def test_find_messages_by_key(tmp_path: Path) -> None:
    """Messages with a key come back newest first, bounded by max_messages and the time
    range; an unknown topic is 404; a key is required (400)."""
    async with serving(app_settings(tmp_path, key_index_slot_count=64,
                                    key_index_entries_per_file=1000)) as served:
        client = served.client
        ids = []
        for index in range(4):
            put = await client.post("/v1/topics/Keyed/messages", json={
                "body": f"m{index}", "keys": ["order-7" if index % 2 else "order-8", "all"]})
            assert put.status_code == 201, put.text
            ids.append(put.json()["msg_id"])
        wait_dispatched(served.broker.store)
        found = await client.get("/v1/topics/Keyed/messages",
                                 params={"key": "order-7", "body_encoding": "utf8"})
        assert found.status_code == 200, found.text
        assert [m["body"] for m in found.json()["messages"]] == ["m3", "m1"]
        newest = await client.get("/v1/topics/Keyed/messages",
                                  params={"key": "all", "max_messages": 3})
        assert [m["msg_id"] for m in newest.json()["messages"]] == ids[:0:-1]
        stamps = [m["store_timestamp_ms"] for m in newest.json()["messages"]]
        early = await client.get("/v1/topics/Keyed/messages", params={
            "key": "all", "end_timestamp_ms": min(stamps)})
        assert all(m["store_timestamp_ms"] < min(stamps) for m in early.json()["messages"])
        unknown = await client.get("/v1/topics/Nope/messages", params={"key": "k"})
        assert unknown.status_code == 404
        assert problem(unknown)["error_code"] == "TOPIC_NOT_FOUND"
        keyless = await client.get("/v1/topics/Keyed/messages")
        assert keyless.status_code == 400

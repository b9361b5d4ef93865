"""Topic update and delete, group delete, offset reset to a time, through the app."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.app import app_settings, problem, serving
from tests.support.store import wait_dispatched

pytestmark = pytest.mark.anyio


async def test_update_grows_queues_and_changes_permission(tmp_path: Path) -> None:
    """PATCH grows the queue counts and sets the permission; a lower count is refused with
    409 QUEUE_COUNT_SHRINKS; an unknown topic is 404."""
    async with serving(app_settings(tmp_path)) as served:
        client = served.client
        await client.post("/v1/topics", json={"name": "Grow", "read_queue_count": 2,
                                              "write_queue_count": 2})
        grown = await client.patch("/v1/topics/Grow", json={"read_queue_count": 4,
                                                            "write_queue_count": 4})
        assert grown.status_code == 200, grown.text
        assert (grown.json()["read_queue_count"], grown.json()["write_queue_count"]) == (4, 4)
        put = await client.post("/v1/topics/Grow/messages", json={"body": "x", "queue_id": 3})
        assert put.status_code == 201, put.text
        shrunk = await client.patch("/v1/topics/Grow", json={"write_queue_count": 1})
        assert shrunk.status_code == 409
        assert problem(shrunk)["error_code"] == "QUEUE_COUNT_SHRINKS"
        read_only = await client.patch("/v1/topics/Grow", json={"permission": 4})
        assert read_only.json()["writable"] is False
        refused = await client.post("/v1/topics/Grow/messages", json={"body": "y"})
        assert refused.status_code == 403, refused.text
        missing = await client.patch("/v1/topics/Nope", json={"permission": 6})
        assert missing.status_code == 404


async def test_delete_topic_removes_its_queues(tmp_path: Path) -> None:
    """DELETE removes the topic and its consume queues (the commit log stays): describe, read
    and, without auto-create, produce then answer 404; its msg ids still resolve."""
    async with serving(app_settings(tmp_path / "b", auto_create_topics=False)) as served:
        client = served.client
        await client.post("/v1/topics", json={"name": "Doomed"})
        put = await client.post("/v1/topics/Doomed/messages", json={"body": "x", "queue_id": 0})
        assert put.status_code == 201
        store = served.broker.store
        wait_dispatched(store)
        max_offset = store.max_offset
        deleted = await client.delete("/v1/topics/Doomed")
        assert deleted.status_code == 204, deleted.text
        assert not (tmp_path / "b" / "consumequeue" / "Doomed").exists()
        assert store.max_offset > max_offset  # the delete is a record of the log
        for response in (await client.get("/v1/topics/Doomed"),
                         await client.get("/v1/topics/Doomed/queues/0/messages"),
                         await client.post("/v1/topics/Doomed/messages", json={"body": "y"}),
                         await client.delete("/v1/topics/Doomed")):
            assert response.status_code == 404, response.text
        by_id = await client.get(f"/v1/messages/{put.json()['msg_id']}")
        assert by_id.status_code == 200


async def test_delete_group(tmp_path: Path) -> None:
    """DELETE removes a group and its offsets; deleting it again is 404 GROUP_NOT_FOUND."""
    async with serving(app_settings(tmp_path)) as served:
        client = served.client
        await client.post("/v1/groups", json={"name": "old-group"})
        assert (await client.delete("/v1/groups/old-group")).status_code == 204
        assert (await client.get("/v1/groups/old-group")).status_code == 404
        again = await client.delete("/v1/groups/old-group")
        assert again.status_code == 404 and problem(again)["error_code"] == "GROUP_NOT_FOUND"


async def test_reset_offsets_to_a_time(tmp_path: Path) -> None:
    """A reset to a time sets each queue's offset to its first message stored at or after
    it; a time after every message gives the max offset."""
    async with serving(app_settings(tmp_path)) as served:
        client = served.client
        await client.post("/v1/topics", json={"name": "Timed", "read_queue_count": 1,
                                              "write_queue_count": 1})
        stamps: list[int] = []
        while len(set(stamps)) < 3:  # messages over at least three milliseconds
            await client.post("/v1/topics/Timed/messages", json={"body": "m"})
            wait_dispatched(served.broker.store)
            page = await client.get("/v1/topics/Timed/queues/0/messages",
                                    params={"offset": len(stamps), "max_messages": 1})
            stamps.append(page.json()["messages"][0]["store_timestamp_ms"])
        middle = sorted(set(stamps))[1]
        reset = await client.post("/v1/groups/timed-group/offsets/Timed:reset",
                                  json={"timestamp_ms": middle})
        assert reset.status_code == 200, reset.text
        (offset,) = reset.json()["offsets"]
        assert offset["offset"] == stamps.index(middle)
        late = await client.post("/v1/groups/timed-group/offsets/Timed:reset",
                                 json={"timestamp_ms": stamps[-1] + 1, "queue_id": 0})
        assert late.json()["offsets"][0]["offset"] == len(stamps)
        unknown = await client.post("/v1/groups/timed-group/offsets/Nope:reset",
                                    json={"timestamp_ms": 0})
        assert unknown.status_code == 404

"""A topic whose consume queue cannot be written: the others go on, and operators see why."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.app import Served, ServeFactory

pytestmark = pytest.mark.anyio


async def _wait_consumable(served: Served, topic: str, count: int) -> list[str]:
    deadline = time.monotonic() + 10
    while True:
        response = await served.client.get(
            f"/v1/topics/{topic}/queues/0/messages",
            params={"offset": 0, "max_messages": 10, "body_encoding": "utf8"})
        bodies = [message["body"] for message in response.json().get("messages", [])]
        if len(bodies) >= count:
            return bodies
        assert time.monotonic() < deadline, f"{topic}: {bodies} after 10 s"
        await asyncio.sleep(0.01)


async def test_a_failing_queue_is_listed_in_admin_store_and_metrics(serve: ServeFactory) -> None:
    """With one topic's queue directory unusable (a file where it belongs), a master refuses
    a message to it (507 naming the queue: it could not be indexed). A record that reaches
    dispatch anyway (as on a slave, whose log is the master's) is set aside: another topic's
    later message is consumable, and /admin/store and /metrics name the failed queue."""
    async with serve() as served:
        root = served.broker.store.paths.root / "consumequeue"
        root.mkdir(parents=True, exist_ok=True)
        (root / "Broken").write_bytes(b"not a directory")
        refused = await served.client.post("/v1/topics/Broken/messages",
                                           json={"body": "refused", "queue_id": 0})
        assert refused.status_code == 507, refused.text
        assert "Broken/0" in refused.json()["detail"]
        served.broker.store.commit_log.reserve_queue = None  # dispatch alone meets it
        for topic in ("Broken", "Healthy"):
            response = await served.client.post(f"/v1/topics/{topic}/messages",
                                                 json={"body": topic, "queue_id": 0})
            assert response.status_code == 201, response.text
        assert await _wait_consumable(served, "Healthy", 1) == ["Healthy"]
        store = (await served.client.get("/admin/store")).json()
        failed = store["dispatch_failed_queues"]
        assert [(entry["topic"], entry["queue_id"]) for entry in failed] == [("Broken", 0)]
        assert "Not a directory" in failed[0]["error"] or "exists" in failed[0]["error"]
        assert store["consume_queue_open_files"] >= 1
        metrics = (await served.client.get("/metrics")).text
        assert "twinlog_dispatch_failed_queues 1.0" in metrics
        assert "twinlog_dispatch_errors_total 1.0" in metrics

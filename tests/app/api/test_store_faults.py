"""A store that can no longer write (an msync/fsync failed) seen over HTTP: puts answer 503,
/readyz fails saying why, /metrics shows it, reads go on (issue 9, item 3)."""

from __future__ import annotations

import base64
import errno

import pytest

from tests.support.app import ServeFactory, problem
from tests.support.store import wait_until

pytestmark = pytest.mark.anyio

RAW = {"content-type": "application/octet-stream"}


async def test_a_write_fault_refuses_puts_fails_readiness_and_keeps_reads(
    serve: ServeFactory,
) -> None:
    """After a write fault a put answers 503 SERVICE_NOT_AVAILABLE naming the error, /readyz
    answers 503 with the reason, /metrics has twinlog_store_writable 0, and messages stored
    before stay readable."""
    async with serve() as served:
        stored = await served.client.post("/v1/topics/Kept/messages?queue_id=0",
                                          content=b"before", headers=RAW)
        assert stored.status_code == 201, stored.text
        assert (await served.client.get("/readyz")).status_code == 200
        store = served.broker.store
        store.health.record_fault("commit-log msync", OSError(errno.EIO, "Input/output error"))
        refused = await served.client.post("/v1/topics/Kept/messages?queue_id=0",
                                           content=b"after", headers=RAW)
        assert refused.status_code == 503
        body = problem(refused)
        assert body["put_status"] == "SERVICE_NOT_AVAILABLE" and "EIO" in body["detail"]
        ready = await served.client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["ready"] is False and "commit-log msync" in ready.json()["detail"]
        metrics = (await served.client.get("/metrics")).text
        assert "twinlog_store_writable 0.0" in metrics
        fault_line = 'twinlog_store_write_fault{errno="EIO",operation="commit-log msync"} 1.0'
        assert fault_line in metrics
        wait_until(lambda: store.dispatch.dispatched_offset >= store.max_offset)
        read = await served.client.get("/v1/topics/Kept/queues/0/messages",
                                       params={"offset": 0})
        assert read.status_code == 200
        assert [m["body"] for m in read.json()["messages"]] == [
            base64.b64encode(b"before").decode()]

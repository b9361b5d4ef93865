"""Stored-but-degraded outcomes through a real broker over HTTP: each is a 202 naming its
status (never the 201 that tells a client its message is durable and replicated), and the
message is stored."""

from __future__ import annotations

import pytest

from tests.support.app import Served, ServeFactory
from tests.support.ha_peer import ScriptedSlave
from tests.support.stalled_flush import stalled_flush
from tests.support.store import wait_dispatched, wait_until

pytestmark = pytest.mark.anyio

URL = "/v1/topics/Degraded/messages"


async def _produce_202(served: Served, status: str) -> None:
    response = await served.client.post(URL, json={"body": status, "queue_id": 0})
    assert response.status_code == 202, response.text
    assert response.json()["status"] == status
    wait_dispatched(served.broker.store)
    read = await served.client.get("/v1/topics/Degraded/queues/0/messages",
                                   params={"body_encoding": "utf8"})
    assert [m["body"] for m in read.json()["messages"]] == [status]


async def test_flush_disk_timeout_is_202(serve: ServeFactory) -> None:
    """A SYNC_FLUSH broker whose fsync stalls past sync_flush_timeout_ms answers 202
    FLUSH_DISK_TIMEOUT."""
    async with serve(flush_disk_type="SYNC_FLUSH", sync_flush_timeout_ms=200) as served:
        with stalled_flush(served.broker.store):
            await _produce_202(served, "FLUSH_DISK_TIMEOUT")


async def test_slave_not_available_is_202(serve: ServeFactory) -> None:
    """A SYNC_MASTER broker without a slave answers 202 SLAVE_NOT_AVAILABLE."""
    async with serve(broker_role="SYNC_MASTER") as served:
        await _produce_202(served, "SLAVE_NOT_AVAILABLE")


async def test_flush_slave_timeout_is_202(serve: ServeFactory) -> None:
    """A SYNC_MASTER broker whose only slave is connected but silent after its first report
    answers 202 FLUSH_SLAVE_TIMEOUT after slave_timeout_ms."""
    async with serve(broker_role="SYNC_MASTER", slave_timeout_ms=300) as served:
        replication = served.broker.replication
        assert replication is not None and replication.service is not None
        service = replication.service
        silent_slave = ScriptedSlave(service.listen_address[1],
                                     served.broker.settings.ha_secret).handshake()
        try:
            silent_slave.report(served.broker.store.max_offset)
            wait_until(lambda: service.is_slave_ok(0))
            await _produce_202(served, "FLUSH_SLAVE_TIMEOUT")
        finally:
            silent_slave.close()

"""A failover keeps the broker's state, not only its bytes (real `twinlog serve` processes):
a topic delete and a consumer group's offsets travel in the replicated log, so a promoted slave
serves exactly what its log holds."""

from __future__ import annotations

import httpx
import pytest

from tests.support.brokers import BrokerProcess, Launcher, caught_up, wait_for
from tests.support.queue_reads import produce, queue
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.processes  # real `twinlog serve` masters and slaves


def _promote(slave: BrokerProcess) -> None:
    def promote() -> bool:
        response = slave.client.post("/admin/ha/promote", json={"role": "SYNC_MASTER"})
        assert response.status_code in (200, 409), response.text
        return response.status_code == 200

    wait_for(promote, 15, "promotion (the dead master's link must drop first)")


def _sync_count(slave: BrokerProcess) -> int:
    count: int = slave.get_json("/admin/diff")["slave"]["metadata_sync"]["sync_count"]
    return count


def _kill(broker: BrokerProcess) -> None:
    assert broker.process is not None
    broker.process.kill()
    broker.process.wait(10)


def test_a_deleted_and_re_created_topic_survives_a_failover(launch: Launcher) -> None:
    """4 messages, DELETE, 2 more answered at queue offsets 0 and 1; kill -9 the master and
    promote: the promoted slave serves the 2 acknowledged messages at 0 and 1 (not the 4
    deleted ones), and the next produce gets queue offset 2."""
    master = launch("state-delete-master", "SYNC_MASTER", default_queue_count=1)
    slave = launch("state-delete-slave", "SLAVE", master=master, default_queue_count=1)
    wait_for(lambda: caught_up(master), 30, "slave connected")
    for number in range(4):
        produce(master, "D", f"old-{number}")
    deleted = master.client.delete("/v1/topics/D")
    assert deleted.status_code == 204, deleted.text
    assert [produce(master, "D", f"new-{number}")["queue_offset"]
            for number in range(2)] == [0, 1]
    wait_for(lambda: caught_up(master), 30, "slave caught up")
    wait_for(lambda: queue(slave, "D") == [(0, "new-0"), (1, "new-1")], 15,
             "the slave's queue holds the new incarnation only")
    _kill(master)
    _promote(slave)
    assert queue(slave, "D") == [(0, "new-0"), (1, "new-1")]
    # a promoted SYNC_MASTER with no slave yet answers 202 SLAVE_NOT_AVAILABLE: stored
    assert produce(slave, "D", "after", (201, 202))["queue_offset"] == 2
    keys = slave.client.get("/v1/topics/D/messages:by-key", params={"key": "x"})
    assert keys.status_code in (200, 404)


def test_a_group_never_skips_acknowledged_messages_after_a_failover(
        launch: Launcher) -> None:
    """The slave's HA link stalls while its metadata sync (HTTP) keeps working; the group
    commits past what the slave's log holds. After kill -9 and promotion, the group's offset
    on the new master is never beyond its queue: every message the new master acknowledges
    is delivered to the group."""
    master = launch("state-group-master", "SYNC_MASTER", default_queue_count=1,
                    slave_timeout_ms=1000)
    assert master.ha_port is not None
    proxy = TcpProxy(("127.0.0.1", master.ha_port))
    try:
        slave = launch("state-group-slave", "SLAVE", ha_master_address=proxy.address,
                       master_http_address=master.url, default_queue_count=1)
        wait_for(lambda: caught_up(master), 30, "slave connected")
        for number in range(30):
            produce(master, "G", f"m-{number}")
        master.client.post("/v1/groups", json={"name": "billing"})
        wait_for(lambda: caught_up(master), 30, "slave caught up")
        proxy.stall()
        with httpx.Client(base_url=master.url, timeout=10.0) as client:
            for number in range(30, 45):
                response = client.post("/v1/topics/G/messages", json={"body": f"m-{number}"})
                assert response.status_code in (201, 202), response.text
            commit = client.put("/v1/groups/billing/offsets/G/queues/0", json={"offset": 40})
            assert commit.status_code in (200, 202), commit.text
        # the slave's metadata sync (every 1 s) runs twice more while its log is stalled
        synced = _sync_count(slave)
        wait_for(lambda: _sync_count(slave) >= synced + 2, 15, "two more metadata syncs")
        _kill(master)
    finally:
        proxy.close()
    _promote(slave)
    held = len(queue(slave, "G"))
    offsets = slave.get_json("/v1/groups/billing/offsets", topic="G")["offsets"]
    committed = offsets[0]["offset"] if offsets else 0
    assert committed <= held, f"offset {committed} is past the queue's {held} messages"
    for number in range(3):
        put = produce(slave, "G", f"after-{number}", (201, 202))
        assert put["queue_offset"] >= committed

"""Failover by hand with real `twinlog serve` processes: kill -9 the SYNC_MASTER under load,
promote its slave, bring the old master back as the new master's slave."""

from __future__ import annotations

import threading

import httpx
import pytest

from app.cli.main import main
from tests.support.brokers import (
    BrokerProcess,
    Launcher,
    caught_up,
    log_bytes,
    master_diff,
    read_queues,
    wait_for,
)

pytestmark = pytest.mark.processes

TOPIC = "Failover"
PRODUCERS = 16


def _produce_until(broker: BrokerProcess, stop: threading.Event, acked: set[str],
                   index: int) -> None:
    """One producer: numbered bodies until `stop` or the broker dies; 201s are recorded."""
    with httpx.Client(base_url=broker.url, timeout=5.0) as client:
        sequence = 0
        while not stop.is_set():
            body = f"p{index:02d}-{sequence:06d}"
            sequence += 1
            try:
                response = client.post(f"/v1/topics/{TOPIC}/messages", json={"body": body})
            except httpx.HTTPError:
                return  # the master was killed
            if response.status_code == 201:
                acked.add(body)


@pytest.mark.parametrize("rejoin", ["restart-as-slave", "demote"])
def test_kill_promote_rejoin_loses_no_put_ok(launch: Launcher, rejoin: str) -> None:
    """Every message answered 201 by the killed SYNC_MASTER is on the promoted slave; the old
    master, restarted as its slave (or restarted as a master by mistake and then demoted),
    ends with a byte-equal log and the same queues."""
    master = launch(f"fo-master-{rejoin}", "SYNC_MASTER")
    slave = launch(f"fo-slave-{rejoin}", "SLAVE", master=master)
    wait_for(lambda: caught_up(master), what="slave connected")
    stop = threading.Event()
    acked: set[str] = set()
    producers = [threading.Thread(target=_produce_until, args=(master, stop, acked, i))
                 for i in range(PRODUCERS)]
    for producer in producers:
        producer.start()
    wait_for(lambda: len(acked) >= 400, 60, "400 PUT_OK answers")
    assert master.process is not None
    master.process.kill()  # SIGKILL under load
    master.process.wait(10)
    stop.set()
    for producer in producers:
        producer.join(10)

    def promote() -> bool:
        response = slave.client.post("/admin/ha/promote", json={"role": "SYNC_MASTER"})
        assert response.status_code in (200, 409), response.text
        return response.status_code == 200

    wait_for(promote, 15, "promotion (the dead master's link must drop first)")

    def missing() -> set[str]:  # its dispatch may still trail its log right after the kill
        return acked - {m["body"] for queue in read_queues(slave, TOPIC) for m in queue}

    try:
        wait_for(lambda: not missing(), 30, "every PUT_OK on the promoted broker")
    except AssertionError:
        raise AssertionError(f"{len(missing())} PUT_OK messages missing") from None
    promoted = slave.get_json("/admin/ha")["master"]
    assert promoted["epoch"] >= 2
    slave.ha_port = int(promoted["listen_address"].rpartition(":")[2])  # bound at promotion
    assert slave.client.post(f"/v1/topics/{TOPIC}/messages",
                             json={"body": "after"}).status_code == 202  # no slave yet
    wait_for(lambda: "after" in {m["body"] for queue in read_queues(slave, TOPIC)
                                 for m in queue}, 15, "the first put after promotion readable")

    if rejoin == "restart-as-slave":
        rejoined = launch(f"fo-master-{rejoin}", "SLAVE", master=slave)  # the old data dir
    else:
        rejoined = launch(f"fo-master-{rejoin}", "SYNC_MASTER")  # a new epoch of its own
        assert main(["ha", "demote", "--url", rejoined.url, "--master-ha-address",
                     slave.ha_address, "--master-http-address", slave.url]) == 0
    assert slave.client.post(f"/v1/topics/{TOPIC}/messages",
                             json={"body": "with the old master back"}).status_code in (201, 202)
    wait_for(lambda: caught_up(slave), 30, "old master caught up")
    end = master_diff(slave)["master_max_offset"]
    wait_for(lambda: read_queues(rejoined, TOPIC) == read_queues(slave, TOPIC), 30,
             "the rejoined broker's queues equal the new master's")
    assert rejoined.stop() == 0 and slave.stop() == 0
    assert log_bytes(rejoined.data_dir, end) == log_bytes(slave.data_dir, end)


def test_promotion_is_refused_while_the_master_is_connected(launch: Launcher) -> None:
    """Two masters would both take writes: promotion answers 409 while the link is up, and
    the slave stays a slave."""
    master = launch("guard-master", "SYNC_MASTER")
    slave = launch("guard-slave", "SLAVE", master=master)
    wait_for(lambda: caught_up(master), what="slave connected")
    response = slave.client.post("/admin/ha/promote", json={})
    assert response.status_code == 409
    assert response.json()["error_code"] == "ROLE_CHANGE_REFUSED"
    assert main(["ha", "promote", "--url", slave.url]) == 1  # the CLI says the same
    assert slave.get_json("/admin/diff")["role"] == "SLAVE"

"""Replication between real `twinlog serve` processes under faults: a master that lost an
unflushed tail, and a link that is cut, stalled and reordered while producers write.

The link-fault run repeats with TWINLOG_FAULT_SEEDS seeds (3 by default; `make faults` runs
many more); a failure names its seed, and the same seed replays the same fault schedule."""

from __future__ import annotations

import os
import random
import threading
from typing import Any

import httpx
import pytest

from tests.support.brokers import (
    BrokerProcess,
    Launcher,
    caught_up,
    log_bytes,
    master_diff,
    queues_when_current,
    read_queues,
    wait_for,
)
from tests.support.power_cut import lose_tail
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.processes

SEEDS = range(int(os.environ.get("TWINLOG_FAULT_SEEDS", "3")))


def _put(broker: BrokerProcess, topic: str, body: str) -> dict[str, Any]:
    response = broker.client.post(f"/v1/topics/{topic}/messages", json={"body": body})
    assert response.status_code in (201, 202), response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_a_slave_ahead_of_a_master_that_lost_its_tail_ends_identical(
        launch: Launcher) -> None:
    """The master's files lose their tail (a power cut under ASYNC_FLUSH) after its slave got
    those bytes; the restarted master writes other bytes past that point; the slave cuts back
    and ends byte-identical, with the same queues."""
    master = launch("tail-master", "ASYNC_MASTER")
    slave = launch("tail-slave", "SLAVE", master=master)
    answers = [_put(master, "Tail", f"first-{i:04d}") for i in range(200)]
    wait_for(lambda: caught_up(master), 30, "slave caught up")
    slave_max = master_diff(master)["master_max_offset"]
    assert slave.stop() == 0
    assert master.process is not None
    master.process.kill()
    master.process.wait(10)
    cut = answers[120]["commit_log_offset"]
    lose_tail(master.data_dir, cut)
    master.start()
    for i in range(300):
        _put(master, "Tail", f"second-{i:04d}")
    assert master_diff(master)["master_max_offset"] > slave_max
    slave = launch("tail-slave", "SLAVE", master=master)
    wait_for(lambda: caught_up(master), 30, "slave caught up again")
    assert slave.get_json("/admin/diff")["slave"]["truncated_bytes_total"] == slave_max - cut
    end = master_diff(master)["master_max_offset"]
    wait_for(lambda: read_queues(slave, "Tail") == read_queues(master, "Tail"), 30,
             "the slave's queues equal the master's")
    assert slave.stop() == 0 and master.stop() == 0
    assert log_bytes(slave.data_dir, end) == log_bytes(master.data_dir, end)


def _producer(master: BrokerProcess, index: int, count: int,
              answers: dict[str, int]) -> None:
    with httpx.Client(base_url=master.url, timeout=10.0) as client:
        for sequence in range(count):
            body = f"p{index}-{sequence:05d}"
            response = client.post("/v1/topics/Link/messages", json={"body": body})
            answers[body] = response.status_code


@pytest.mark.parametrize("seed", SEEDS)
def test_link_cut_stalled_and_reordered_while_producing(launch: Launcher, seed: int) -> None:
    """Seeded faults on live traffic between a SYNC_MASTER and its slave: every 201 is on
    the slave afterwards and both logs are byte-identical; a reordered stream is refused by
    its tags (the slave reconnects), never applied."""
    rng = random.Random(seed)
    master = launch(f"link-master-{seed}", "SYNC_MASTER")
    assert master.ha_port is not None
    proxy = TcpProxy(("127.0.0.1", master.ha_port))
    try:
        slave = launch(f"link-slave-{seed}", "SLAVE", ha_master_address=proxy.address,
                       master_http_address=master.url)
        wait_for(lambda: caught_up(master), 30, "slave connected")
        answers: dict[str, int] = {}
        producers = [threading.Thread(target=_producer, args=(master, i, 150, answers))
                     for i in range(4)]
        for producer in producers:
            producer.start()
        faults = []
        for _ in range(5):
            seen = proxy.bytes_from_target
            wait_for(lambda seen=seen: proxy.bytes_from_target > seen  # type: ignore[misc]
                     or not any(p.is_alive() for p in producers), 30, "live traffic")
            fault = rng.choice(["cut", "stall", "reorder"])
            faults.append(fault)
            if fault == "cut":
                proxy.cut()
            elif fault == "stall":
                proxy.stall()
                threading.Event().wait(rng.uniform(0.05, 0.5))  # a stall is a length of time
                proxy.resume()
            else:
                proxy.reorder()
        for producer in producers:
            producer.join(60)
        try:
            wait_for(lambda: caught_up(master), 60, f"caught up after {faults} (seed {seed})")
        except AssertionError as error:
            raise AssertionError(f"{error}\nmaster: {master.get_json('/admin/ha')}\n"
                                 f"slave: {slave.get_json('/admin/diff')}\n"
                                 f"slave log:\n{slave.log()}") from None
        put_ok = {body for body, status in answers.items() if status == 201}

        def all_put_ok_consumable() -> bool:
            # The slave's dispatch may trail its log (503 until its tables caught up); a 404,
            # or a message that never comes, fails.
            queues = queues_when_current(slave, "Link")
            return queues is not None and put_ok <= {m["body"] for queue in queues
                                                      for m in queue}

        wait_for(all_put_ok_consumable, 30, f"every 201 on the slave (seed {seed}, {faults})")
        assert set(answers.values()) <= {201, 202}, f"seed {seed}"
        end = master_diff(master)["master_max_offset"]
        assert slave.stop() == 0 and master.stop() == 0
        assert log_bytes(slave.data_dir, end) == log_bytes(master.data_dir, end)
    finally:
        proxy.close()

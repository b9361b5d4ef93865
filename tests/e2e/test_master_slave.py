"""A SYNC_MASTER and its SLAVE as real processes: produce over HTTP, read from the slave, the
diff, metadata sync, and the 201/202/503 answers. Tests that only produce and read share one
pair, each on its own topics (any order works); tests that pause or stop the slave have their
own pair."""

from __future__ import annotations

import base64
import shutil
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.brokers import BrokerProcess, Launcher, caught_up, master_diff, wait_for
from tests.support.fifo_groups import first_fifo_receive, receive, wait_replica_holds
from tests.support.processes import pause

pytestmark = pytest.mark.processes

Pair = tuple[BrokerProcess, BrokerProcess]


def _topic_url(topic: str) -> str:
    return f"/v1/topics/{topic}/messages"


def _start_pair(launch: Launcher) -> Pair:
    master = launch("master", "SYNC_MASTER")
    slave = launch("slave", "SLAVE", master=master)
    wait_for(lambda: caught_up(master), what="slave connected")
    return master, slave


@pytest.fixture(scope="module")
def pair(launch: Launcher) -> Iterator[Pair]:
    yield _start_pair(launch)


@pytest.fixture
def own_pair(launch_own: Launcher) -> Pair:
    return _start_pair(launch_own)


def _read_all(broker: BrokerProcess, topic: str, queue_id: int) -> list[dict[str, Any]]:
    response = broker.client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages",
                                 params={"max_messages": 100, "body_encoding": "utf8"})
    if response.status_code == 404:
        return []
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def test_curl_and_json_produce_read_back_from_the_slave(
        pair: Pair) -> None:
    """A curl --data-binary body and a JSON message are stored (201 on SYNC_MASTER with the
    slave in sync) and read back, identical, from the slave."""
    master, slave = pair
    url = _topic_url("E2ECurl")
    curl = shutil.which("curl")
    raw = b"raw \x00\xff bytes from curl"
    if curl is not None:
        answer = subprocess.run(
            [curl, "-s", "-o", "-", "-w", "\n%{http_code}", "-H",
             "Content-Type: application/octet-stream", "-H", "X-Twinlog-Tags: curl",
             "--data-binary", "@-", f"{master.url}{url}?queue_id=0"],
            input=raw, capture_output=True, check=True).stdout.decode()
        body, _, code = answer.rpartition("\n")
    else:  # the same request without curl
        response = master.client.post(f"{url}?queue_id=0", content=raw, headers={
            "content-type": "application/octet-stream", "x-twinlog-tags": "curl"})
        body, code = response.text, str(response.status_code)
    assert code == "201", body
    response = master.client.post(url, json={"body": "json body", "queue_id": 1,
                                                   "keys": ["k1"]})
    assert response.status_code == 201 and response.json()["status"] == "PUT_OK"
    wait_for(lambda: len(_read_all(slave, "E2ECurl", 0)) == len(
        _read_all(slave, "E2ECurl", 1)) == 1, what="messages on the slave")
    (from_curl,) = _read_all(slave, "E2ECurl", 0)
    assert from_curl["body_encoding"] == "base64"  # not UTF-8
    assert base64.b64decode(from_curl["body"]) == raw and from_curl["tags"] == "curl"
    (from_json,) = _read_all(slave, "E2ECurl", 1)
    assert (from_json["body"], from_json["keys"]) == ("json body", ["k1"])
    assert _read_all(master, "E2ECurl", 1) == [from_json]


def test_diff_goes_to_zero(pair: Pair) -> None:
    """After a burst, the master's /admin/diff reaches 0 bytes for the slave, and the slave's
    own view agrees (connected, nothing left to receive)."""
    master, slave = pair
    batch = {"messages": [{"body": "x" * 500} for _ in range(50)]}
    for _ in range(4):
        assert master.client.post(_topic_url("E2EDiff") + ":batch", json=batch).status_code == 201
    wait_for(lambda: caught_up(master), what="diff 0")
    diff = master_diff(master)
    assert diff["slaves"][0]["in_sync"] and diff["in_sync_slave_count"] == 1
    view = slave.get_json("/admin/diff")
    assert view["role"] == "SLAVE" and view["slave"]["connected"]
    wait_for(lambda: slave.get_json("/admin/diff")["slave"]["local_max_offset"]
             == diff["master_max_offset"], what="slave max offset")
    ha = master.get_json("/admin/ha")["master"]
    assert ha["connection_count"] == 1 and ha["slaves"][0]["ack_offset"] == diff[
        "master_max_offset"]


def test_produce_to_the_slave_names_the_master(pair: Pair) -> None:
    """The slave answers a produce with 503 and the master's HTTP and HA addresses."""
    master, slave = pair
    response = slave.client.post(_topic_url("E2ESlave"), json={"body": "x"})
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    document = response.json()
    assert document["put_status"] == "SERVICE_NOT_AVAILABLE"
    assert document["master_http_address"] == master.url
    assert document["master_ha_address"] == master.ha_address


def test_metadata_reaches_the_slave(pair: Pair) -> None:
    """A topic, a subscription group and a consumer offset created on the master appear on
    the slave through the metadata sync, whose status /admin/diff shows."""
    master, slave = pair
    created = master.client.post("/v1/groups", json={"name": "Auditors", "retry_times_max": 3})
    assert created.status_code == 201, created.text
    backoff = {"policy": "exponential", "initial_ms": 2_000, "multiplier": 3.0,
               "max_ms": 60_000}
    patched = master.client.patch("/v1/groups/Auditors", json={"backoff": backoff})
    assert patched.status_code == 200, patched.text
    assert master.client.post("/v1/topics", json={"name": "Synced",
                                                  "write_queue_count": 2}).status_code == 201
    assert master.client.post("/v1/topics/Synced/messages",
                              json={"body": "x", "queue_id": 1}).status_code == 201
    # Dispatch makes a stored message consumable a moment after its answer; an offset past
    # the queue's end is refused, so commit once the entry is there.
    wait_for(lambda: len(_read_all(master, "Synced", 1)) == 1, what="message dispatched")
    committed = master.client.put("/v1/groups/Readers/offsets/Synced/queues/1",
                                  json={"offset": 1})
    assert committed.status_code == 200, committed.text

    def synced() -> bool:
        topics = {t["name"] for t in slave.get_json("/v1/topics")["topics"]}
        offsets = slave.get_json("/v1/groups/Readers/offsets")["offsets"] if "Synced" in topics \
            else []
        return [o["offset"] for o in offsets] == [1]

    wait_for(synced, what="topic and offset on the slave")
    wait_for(lambda: "Auditors" in {g["name"] for g in slave.get_json("/v1/groups")["groups"]},
             what="group on the slave")
    # The update is a group.put record of the log, applied by the slave's dispatch (the
    # sync's pull runs once a minute): the slave, once promoted, decides with it.
    wait_for(lambda: slave.get_json("/v1/groups/Auditors")["backoff"] == backoff,
             what="the group's backoff on the slave")
    group = slave.get_json("/v1/groups/Auditors")
    assert group["retry_times_max"] == 3
    sync = slave.get_json("/admin/diff")["slave"]["metadata_sync"]
    assert sync["last_error"] is None and sync["sync_count"] >= 1
    lag = slave.get_json("/v1/groups/Readers/lag")
    assert lag["total_lag"] == 0


def test_a_fifo_group_s_flag_and_states_reach_the_slave(pair: Pair) -> None:
    """A FIFO group delivers m0 alone; the slave holds the flag (its group.put record) and
    the master's queue states, FIFO (the receive's record carries the mode). Turned off with
    m0 acked, the next receive takes m1 and m2 together, and the slave's states follow."""
    master, slave = pair
    first = first_fifo_receive(master.client, "Ordered", "FifoTopic")
    wait_replica_holds(master.client, slave.client, "Ordered", fifo=True, what="slave")
    acked = master.client.post("/v1/groups/Ordered/topics/FifoTopic/messages:ack",
                               json={"receipt_handles": [first["receipt_handle"]]})
    assert acked.status_code == 200, acked.text
    patched = master.client.patch("/v1/groups/Ordered", json={"fifo": False})
    assert patched.status_code == 200, patched.text
    bodies = [message["body"] for message in receive(master.client, "Ordered", "FifoTopic")]
    assert bodies == ["m1", "m2"]
    wait_replica_holds(master.client, slave.client, "Ordered", fifo=False, what="slave")


def test_paused_slave_makes_puts_time_out(own_pair: Pair) -> None:
    """A connected slave that stops acknowledging (SIGSTOP) makes a SYNC_MASTER put answer 202
    FLUSH_SLAVE_TIMEOUT after slave_timeout_ms; once resumed, it catches up."""
    master, slave = own_pair
    assert slave.process is not None
    pause(slave.process.pid)
    try:
        response = master.client.post(_topic_url("E2EPaused"), json={"body": "while paused"})
        assert response.status_code == 202, response.text
        assert response.json()["status"] == "FLUSH_SLAVE_TIMEOUT"
    finally:
        slave.process.send_signal(signal.SIGCONT)
    wait_for(lambda: caught_up(master), what="caught up after the pause")
    assert master.client.post(_topic_url("E2EPaused"), json={"body": "resumed"}).status_code == 201


def test_stopped_slave_makes_puts_slave_not_available(
        own_pair: Pair) -> None:
    """With the slave stopped (cleanly: no abort marker), a SYNC_MASTER put is stored but
    answers 202 SLAVE_NOT_AVAILABLE, and the master keeps serving reads."""
    master, slave = own_pair
    assert slave.stop() == 0
    assert not (slave.data_dir / "abort").exists()
    wait_for(lambda: master_diff(master)["slaves"] == [], what="master sees no slave")
    response = master.client.post(_topic_url("E2EStopped"), json={"body": "alone", "queue_id": 2})
    assert response.status_code == 202
    assert response.json()["status"] == "SLAVE_NOT_AVAILABLE"
    wait_for(lambda: [m["body"] for m in _read_all(master, "E2EStopped", 2)][-1:] == ["alone"],
             what="the 202 message consumable on the master (after dispatch)")

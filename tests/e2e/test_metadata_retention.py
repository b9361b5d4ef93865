"""Retention never takes metadata with it (issue 26), with real processes: a master whose
retention removed the files that held its first metadata records (the topics' and the
group's creation, the offset commits) and every record of one topic's queue; then a slave
with an empty data dir starts at the master's retained min offset, catches up, and is
promoted after a kill -9 of the master. The promoted slave holds the topics, the group and
its committed offsets, the queue whose records all lay below its log's start goes on at
the master's next queue offset, not at 0, and a group's receives and acks go on as they
were.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.support.brokers import (
    BrokerProcess,
    Launcher,
    caught_up,
    kill_and_promote,
    wait_for,
)

pytestmark = [pytest.mark.processes, pytest.mark.slow]

FILE_SIZE_BYTES = 64 * 1024
# Retention finds the disk "too full" on every round (every 10 s): it removes every file but
# the one being written, as far as dispatch and the metadata snapshot allow.
RETENTION = {"mapped_file_size_bytes": FILE_SIZE_BYTES, "message_size_max_bytes": 16384,
             "disk_max_used_ratio": 1e-9}
GROUP = "g"
POP_GROUP = "p"  # consumes Q by receive and ack


def _ok(response: Any, status: int = 201) -> Any:
    assert response.status_code == status, response.text
    return response.json() if response.content else None


def _produce(broker: BrokerProcess, topic: str, queue_id: int, body: str) -> int:
    put = _ok(broker.client.post(f"/v1/topics/{topic}/messages",
                                 json={"body": body, "queue_id": queue_id}))
    return int(put["queue_offset"])


def _commit(broker: BrokerProcess, topic: str, queue_id: int, offset: int) -> None:
    """Once the queue holds the offset (a commit past the queue's end is refused, and an
    ASYNC_MASTER answers a produce before its dispatch)."""
    wait_for(lambda: broker.get_json(f"/v1/topics/{topic}/queues/{queue_id}/messages",
                                     offset=0, max_messages=1)["max_offset"] >= offset, 10,
             f"{topic}/{queue_id} holding {offset}")
    _ok(broker.client.put(f"/v1/groups/{GROUP}/offsets/{topic}/queues/{queue_id}",
                          json={"offset": offset}), 200)


def _offsets(broker: BrokerProcess) -> dict[tuple[str, int], int]:
    return {(entry["topic"], entry["queue_id"]): entry["offset"]
            for entry in broker.get_json(f"/v1/groups/{GROUP}/offsets")["offsets"]}


def test_an_empty_slave_bootstrapped_past_retention_keeps_offsets_queues_and_consumption(
        launch_own: Launcher) -> None:
    """The topics' and the groups' creation, Gone/0's records and the first offset commits lie
    in files retention removed; the last commit, m0-m5 of Q, the receive of m0-m3 and the ack
    of m1 and m3 lie in the file it kept. An empty slave starts at the master's min offset and
    is promoted after a kill -9 of the master: it holds the topics, the group and the offsets,
    Gone/0 goes on at 3; and group P's consumption goes on: it delivers m4 and m5 at once, m0
    and m2 only once their invisible time has passed (attempt 2), and never m1 or m3. (One
    pair for both: the consumption half passed on the code before it too, guarding the
    snapshot and bootstrap loading paths.)"""
    pop = {"pop_invisible_ms_min": 100, "pop_expiry_interval_ms": 50}
    master = launch_own("master", "ASYNC_MASTER", **RETENTION, **pop)
    _ok(master.client.post("/v1/topics", json={"name": "Gone", "read_queue_count": 1,
                                               "write_queue_count": 1}))
    _ok(master.client.post("/v1/topics", json={"name": "Live", "read_queue_count": 2,
                                               "write_queue_count": 2}))
    _ok(master.client.post("/v1/topics", json={"name": "Q", "read_queue_count": 1,
                                               "write_queue_count": 1}))
    _ok(master.client.post("/v1/groups", json={"name": GROUP}))
    _ok(master.client.post("/v1/groups", json={"name": POP_GROUP}))
    gone = [_produce(master, "Gone", 0, f"gone-{n}") for n in range(3)]
    assert gone == [0, 1, 2]
    _commit(master, "Gone", 0, 3)  # the group read all of Gone/0
    for n in range(4):
        _produce(master, "Live", n % 2, f"live-{n}")
    _commit(master, "Live", 0, 1)
    early_end = master.get_json("/admin/store")["max_offset"]
    # Enough to fill several files, so retention passes every record above; then a new file
    # begins: the rest shares it.
    filler = "x" * 6000

    def end() -> int:
        return int(master.get_json("/admin/store")["max_offset"])

    while end() < early_end + 5 * FILE_SIZE_BYTES or end() % FILE_SIZE_BYTES > 8000:
        _produce(master, "Fill", 0, filler)
    kept_from = end() - end() % FILE_SIZE_BYTES
    _commit(master, "Live", 1, 2)  # a commit after the fill: its record stays retained
    for n in range(6):
        _produce(master, "Q", 0, f"m{n}")
    path = f"/v1/groups/{POP_GROUP}/topics/Q/messages"
    received = _ok(master.client.post(path + ":receive", json={
        "max_messages": 4, "invisible_ms": 25_000, "body_encoding": "utf8"}), 200)["messages"]
    assert [message["body"] for message in received] == ["m0", "m1", "m2", "m3"]
    invisible_until_ms = min(message["invisible_until_ms"] for message in received)
    _ok(master.client.post(path + ":ack", json={
        "receipt_handles": [received[1]["receipt_handle"], received[3]["receipt_handle"]]}),
        200)
    wait_for(lambda: master.get_json("/admin/store")["min_offset"] == kept_from, 40,
             "retention past the first metadata records")
    assert kept_from > early_end
    expected = {("Gone", 0): 3, ("Live", 0): 1, ("Live", 1): 2}
    assert _offsets(master) == expected

    slave = launch_own("slave", "SLAVE", master=master, mapped_file_size_bytes=FILE_SIZE_BYTES,
                       message_size_max_bytes=16384, **pop)
    wait_for(lambda: caught_up(master), 30, "the empty slave caught up")
    slave_store = slave.get_json("/admin/store")
    assert slave_store["min_offset"] == kept_from  # its log begins past those records
    wait_for(lambda: _offsets(slave) == expected, 15, "the slave's offsets equal the master's")
    kill_and_promote(master, slave)
    topics = {topic["name"] for topic in slave.get_json("/v1/topics")["topics"]}
    assert {"Gone", "Live", "Fill", "Q"} <= topics
    assert {GROUP, POP_GROUP} <= {group["name"] for group in slave.get_json("/v1/groups")["groups"]}
    assert _offsets(slave) == expected
    # Gone/0's records all lay below the slave's log: the queue goes on at 3, where the
    # group's offset says the next message is, and serves nothing of the old ones.
    assert _produce(slave, "Gone", 0, "after") == 3

    def served_from_0() -> list[tuple[int, str]]:
        page = slave.get_json("/v1/topics/Gone/queues/0/messages", offset=0, max_messages=10,
                              body_encoding="utf8")
        return [(m["queue_offset"], m["body"]) for m in page["messages"]]

    wait_for(lambda: served_from_0() == [(3, "after")], 10, "Gone/0 served from offset 0")
    assert _produce(slave, "Live", 1, "after") == 2
    seen: dict[str, int] = {}
    deadline_s = time.monotonic() + 40
    while set(seen) != {"m0", "m2", "m4", "m5"} and time.monotonic() < deadline_s:
        answer = slave.client.post(path + ":receive", json={
            "max_messages": 8, "invisible_ms": 60_000, "wait_ms": 500, "body_encoding": "utf8"})
        assert answer.status_code in (200, 202), answer.text
        now_ms = time.time() * 1000
        for message in answer.json()["messages"]:
            body = message["body"]
            assert body not in {"m1", "m3"}, f"{body} was acked on the old master"
            assert body not in seen, f"{body} delivered twice after the promotion"
            if body in {"m0", "m2"}:
                assert now_ms >= invisible_until_ms - 50, f"{body} came back early"
            seen[body] = message["delivery_attempt"]
    assert seen == {"m0": 2, "m2": 2, "m4": 1, "m5": 1}
    slave.stop()

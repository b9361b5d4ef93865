"""Group consumption with real `twinlog serve` processes: the CLI (receive, ack, dlq list and
redrive), consumers of one group under a producer with one consumer killed (kill -9) holding
messages, a poison message dead-lettered after exactly retry_times_max retries, and kill -9 +
promotion of a SYNC_MASTER in the middle of the consumption (at least once, acked never
again, in-flight messages back at their invisible time)."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_admin_cli import ok, twinlog
from tests.support.brokers import (
    ROOT,
    BrokerProcess,
    Launcher,
    caught_up,
    kill_and_promote,
    wait_for,
)

pytestmark = [pytest.mark.processes, pytest.mark.slow]

POP = {"pop_invisible_ms_min": 100, "pop_expiry_interval_ms": 20}


def _setup(broker: BrokerProcess, topic: str, group: str, *, queues: int = 2,
           retry_times_max: int = 16) -> None:
    response = broker.client.post("/v1/topics", json={
        "name": topic, "read_queue_count": queues, "write_queue_count": queues})
    assert response.status_code == 201, response.text
    response = broker.client.post("/v1/groups", json={"name": group,
                                                      "retry_times_max": retry_times_max})
    assert response.status_code == 201, response.text


def _produce(broker: BrokerProcess, topic: str, bodies: list[str]) -> None:
    for start in range(0, len(bodies), 50):
        response = broker.client.post(f"/v1/topics/{topic}/messages:batch", json={
            "messages": [{"body": body} for body in bodies[start:start + 50]]})
        assert response.status_code == 201, response.text


def _consumption(broker: BrokerProcess, group: str) -> dict[str, Any]:
    [counts] = broker.get_json(f"/v1/groups/{group}/lag")["consumption"]
    return dict(counts)


def _json_lines(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.endswith("}")]


def test_cli_receive_ack_and_a_poison_message_through_the_dead_letters(
        launch: Launcher) -> None:
    broker = launch("pop-cli", "ASYNC_MASTER", **POP)
    url = broker.url
    _setup(broker, "Jobs", "workers", retry_times_max=2)
    ok(twinlog(url, "produce", "Jobs", stdin=b"j0\nj1\nj2\n"))
    printed = ok(twinlog(url, "receive", "workers", "Jobs", "--max-messages", "2"))
    assert len(printed.splitlines()) == 2
    held = ok(twinlog(url, "receive", "workers", "Jobs", "--no-ack", "--invisible-ms", "100000"))
    handle, body = held.split()
    assert sorted([*printed.split(), body]) == ["j0", "j1", "j2"]
    assert "200 ACKED" in ok(twinlog(url, "ack", "workers", "Jobs", handle))
    again = twinlog(url, "ack", "workers", "Jobs", handle)
    assert again.returncode == 1 and "409 STALE_RECEIPT_HANDLE" in again.stdout, again
    assert _consumption(broker, "workers")["acked"] == 3

    ok(twinlog(url, "produce", "Jobs", stdin=b"poison\n"))
    attempts: list[int] = []
    deadline_s = time.monotonic() + 30
    while len(attempts) < 3 and time.monotonic() < deadline_s:
        out = ok(twinlog(url, "receive", "workers", "Jobs", "--no-ack", "--json",
                         "--invisible-ms", "100", "--wait-ms", "2000"))
        attempts += [json.loads(line)["delivery_attempt"] for line in out.splitlines()]
    assert attempts == [1, 2, 3]  # retry_times_max 2: three deliveries, then the DLQ
    wait_for(lambda: _consumption(broker, "workers")["dead_lettered"] == 1, 10, "dead letter")
    assert ok(twinlog(url, "receive", "workers", "Jobs", "--wait-ms", "300")) == ""
    listed = ok(twinlog(url, "dlq", "list", "workers")).splitlines()
    assert len(listed) == 1 and listed[0].endswith("Jobs attempts 3 poison"), listed
    assert "redrove 1 dead letters" in ok(twinlog(url, "dlq", "redrive", "workers"))
    back = ok(twinlog(url, "receive", "workers", "Jobs", "--json", "--wait-ms", "5000"))
    assert [(json.loads(line)["body"], json.loads(line)["delivery_attempt"])
            for line in back.splitlines()] == [("cG9pc29u", 1)]  # base64 of "poison"
    assert "redrove 0 dead letters" in ok(twinlog(url, "dlq", "redrive", "workers"))


def _consumer(url: str, out: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TWINLOG_")}
    env["TWINLOG_URL"] = url
    with out.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli.main", "receive", "crowd", "Work", "--follow",
             "--json", "--invisible-ms", "2000", *extra], cwd=ROOT, env=env, stdout=sink,
            stderr=subprocess.DEVNULL)


def test_consumers_of_one_group_under_a_producer_with_one_killed_holding_messages(
        launch: Launcher, tmp_path: Path) -> None:
    """Four acking consumers and one that receives without acking and is killed (-9): every
    message is acked exactly once by the group's count of acks; the killed one's messages
    come back after their invisible time, to the others, with delivery attempt 2."""
    broker = launch("pop-crowd", "ASYNC_MASTER", **POP)
    _setup(broker, "Work", "crowd", queues=4)
    bodies = [f"w{number:04d}" for number in range(400)]
    producer = threading.Thread(target=_produce, args=(broker, "Work", bodies))
    producer.start()
    crasher_out = tmp_path / "crasher.out"
    crasher = _consumer(broker.url, crasher_out, "--no-ack")
    wait_for(lambda: len(_json_lines(crasher_out)) >= 1, 30, "the crasher's first message")
    crasher.send_signal(signal.SIGKILL)
    crasher.wait(10)
    held = {message["body"] for message in _json_lines(crasher_out)}
    outs = [tmp_path / f"consumer{number}.out" for number in range(4)]
    consumers = [_consumer(broker.url, out) for out in outs]
    try:
        producer.join(60)
        wait_for(lambda: _consumption(broker, "crowd")["acked"] >= len(bodies), 90,
                 "every message acked")
        counts = _consumption(broker, "crowd")
    finally:
        for consumer in consumers:
            consumer.terminate()
            consumer.wait(10)
    assert counts == {"topic": "Work", "ready": 0, "in_flight": 0, "retrying": 0,
                      "dead_lettered": 0, "acked": len(bodies)}, counts
    received = [message for out in outs for message in _json_lines(out)]
    seen = {base64.b64decode(message["body"]).decode(): message for message in received}
    assert set(seen) == set(bodies)
    crashed = {base64.b64decode(body).decode() for body in held}
    assert crashed and all(seen[body]["delivery_attempt"] >= 2 for body in crashed)


def test_kill_9_and_promotion_of_a_sync_master_mid_consumption(launch: Launcher) -> None:
    """Receives and acks answered by a SYNC_MASTER are held by its slave: after kill -9 and
    promotion, an acked message is never delivered again, the messages in flight come back
    at their invisible time (not before) with the next attempt, and every message is acked
    at least once."""
    master = launch("pop-master", "SYNC_MASTER", **POP)
    slave = launch("pop-slave", "SLAVE", master=master, **POP)
    wait_for(lambda: caught_up(master), what="slave connected")
    _setup(master, "Fo", "fo")
    bodies = [f"f{number:03d}" for number in range(200)]
    _produce(master, "Fo", bodies)
    acked: set[str] = set()
    in_flight: dict[str, int] = {}  # body -> invisible until, as the killed master said
    path = "/v1/groups/fo/topics/Fo/messages"
    while len(acked) + len(in_flight) < 100:
        answer = master.client.post(path + ":receive", json={
            "max_messages": 16, "invisible_ms": 3000, "body_encoding": "utf8"})
        assert answer.status_code == 200, answer.text
        messages = answer.json()["messages"]
        keep, ack = messages[::2], messages[1::2]
        response = master.client.post(path + ":ack", json={
            "receipt_handles": [message["receipt_handle"] for message in ack]})
        assert response.status_code == 200, response.text
        acked |= {message["body"] for message in ack}
        in_flight |= {message["body"]: message["invisible_until_ms"] for message in keep}
    kill_and_promote(master, slave, "SYNC_MASTER")
    done: set[str] = set()
    deadline_s = time.monotonic() + 60
    with httpx.Client(base_url=slave.url, timeout=10.0) as client:
        while done | acked != set(bodies) and time.monotonic() < deadline_s:
            answer = client.post(path + ":receive", json={
                "max_messages": 32, "invisible_ms": 3000, "wait_ms": 1000,
                "body_encoding": "utf8"})
            assert answer.status_code in (200, 202), answer.text
            now_ms = time.time() * 1000
            messages = answer.json()["messages"]
            for message in messages:
                body = message["body"]
                assert body not in acked, f"{body} was acked on the old master"
                if body in in_flight:
                    assert now_ms >= in_flight[body] - 50, f"{body} came back early"
                    assert message["delivery_attempt"] == 2
            if messages:
                response = client.post(path + ":ack", json={
                    "receipt_handles": [message["receipt_handle"] for message in messages]})
                assert response.status_code in (200, 202), response.text
                done |= {message["body"] for message in messages}
    assert done | acked == set(bodies), f"{len(set(bodies) - done - acked)} never acked"
    assert set(in_flight) <= done

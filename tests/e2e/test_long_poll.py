"""Long poll against a real `twinlog serve`: a parked read answers soon after the store."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from tests.e2e.conftest import BrokerProcess, Launcher, wait_for

LATENCY_MS_MAX = 50


def long_poll_waiters(broker: BrokerProcess) -> int:
    """The broker's `twinlog_long_poll_waiters` gauge (the seam that orders the produce)."""
    text = broker.client.get("/metrics").text
    for line in text.splitlines():
        if line.startswith("twinlog_long_poll_waiters "):
            return int(float(line.split()[1]))
    raise AssertionError("twinlog_long_poll_waiters missing from /metrics")


def test_a_waiting_read_answers_within_50_ms_of_the_store_time(launch: Launcher) -> None:
    """A read with wait_ms=5000 parked on an empty queue receives the message produced 100 ms
    later, within 50 ms of the message's store timestamp."""
    broker = launch("long-poll", "ASYNC_MASTER")
    assert broker.client.post("/v1/topics", json={"name": "LongPoll"}).status_code == 201
    answer: dict[str, Any] = {}

    def consume() -> None:
        with httpx.Client(base_url=broker.url, timeout=30) as client:
            answer["response"] = client.get("/v1/topics/LongPoll/queues/0/messages",
                                            params={"wait_ms": 5000})
            answer["received_ms"] = time.time_ns() / 1e6

    reader = threading.Thread(target=consume, name="long-poll-reader")
    reader.start()
    try:
        wait_for(lambda: long_poll_waiters(broker) == 1, what="the read parked")
        parked_at = time.monotonic()
        while time.monotonic() - parked_at < 0.1:  # the produce comes 100 ms later
            assert long_poll_waiters(broker) == 1 and reader.is_alive()
        put = broker.client.post("/v1/topics/LongPoll/messages",
                                 json={"body": "late", "queue_id": 0})
        assert put.status_code == 201, put.text
    finally:
        reader.join(timeout=30)
    response = answer["response"]
    assert response.status_code == 200, response.text
    (message,) = response.json()["messages"]
    assert message["msg_id"] == put.json()["msg_id"]
    latency_ms = answer["received_ms"] - message["store_timestamp_ms"]
    print(f"long poll: answered {latency_ms:.1f} ms after the store time "
          f"(bound {LATENCY_MS_MAX} ms)")
    assert latency_ms < LATENCY_MS_MAX

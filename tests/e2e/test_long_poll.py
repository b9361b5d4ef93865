"""Long poll against a real `twinlog serve`: a parked read answers soon after the store."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from tests.support.brokers import BrokerProcess, Launcher, wait_for

pytestmark = pytest.mark.processes

LATENCY_MS_MAX = 50
# Rounds, the best of which must meet the bound: the suite shares two cores with other
# suites, and a round where the scheduler parks a thread for longer says nothing of the
# broker. Every round's figure is printed.
ROUNDS_MAX = 3


def long_poll_waiters(broker: BrokerProcess) -> int:
    """The broker's `twinlog_long_poll_waiters` gauge (the seam that orders the produce)."""
    text = broker.client.get("/metrics").text
    for line in text.splitlines():
        if line.startswith("twinlog_long_poll_waiters "):
            return int(float(line.split()[1]))
    raise AssertionError("twinlog_long_poll_waiters missing from /metrics")


def _one_round(broker: BrokerProcess, topic: str) -> float:
    """Park a read with wait_ms=5000, produce 100 ms later; return the answer's delay after
    the message's store time, in ms."""
    answer: dict[str, Any] = {}

    def consume() -> None:
        with httpx.Client(base_url=broker.url, timeout=30) as client:
            answer["response"] = client.get(f"/v1/topics/{topic}/queues/0/messages",
                                            params={"wait_ms": 5000})
            answer["received_ms"] = time.time_ns() / 1e6

    reader = threading.Thread(target=consume, name="long-poll-reader")
    reader.start()
    try:
        wait_for(lambda: long_poll_waiters(broker) == 1, what="the read parked")
        parked_at = time.monotonic()
        while time.monotonic() - parked_at < 0.1:  # the produce comes 100 ms later
            assert long_poll_waiters(broker) == 1 and reader.is_alive()
        put = broker.client.post(f"/v1/topics/{topic}/messages",
                                 json={"body": "late", "queue_id": 0})
        assert put.status_code == 201, put.text
    finally:
        reader.join(timeout=30)
    response = answer["response"]
    assert response.status_code == 200, response.text
    (message,) = response.json()["messages"]
    assert message["msg_id"] == put.json()["msg_id"]
    latency_ms: float = answer["received_ms"] - message["store_timestamp_ms"]
    print(f"long poll: answered {latency_ms:.1f} ms after the store time "
          f"(bound {LATENCY_MS_MAX} ms)")
    return latency_ms


def test_a_waiting_read_answers_within_50_ms_of_the_store_time(launch: Launcher) -> None:
    """A read with wait_ms=5000 parked on an empty queue receives the message produced 100 ms
    later, within 50 ms of the message's store timestamp (the best of up to three rounds)."""
    broker = launch("long-poll", "ASYNC_MASTER")
    latencies_ms = []
    for round_number in range(ROUNDS_MAX):
        topic = f"LongPoll{round_number}"
        assert broker.client.post("/v1/topics", json={"name": topic}).status_code == 201
        latencies_ms.append(_one_round(broker, topic))
        if latencies_ms[-1] < LATENCY_MS_MAX:
            break
    assert min(latencies_ms) < LATENCY_MS_MAX, latencies_ms

"""Long poll against a real `twinlog serve`: a parked read answers soon after the store."""

from __future__ import annotations

import json
import selectors
import signal
import socket
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


WAITERS_ON_SIGTERM = 300
ANSWERED_AFTER_SIGTERM_S_MAX = 1.0
BUSY_CLIENT_S = 3.0
PARKED_READ = (b"GET /v1/topics/Parked/queues/0/messages?wait_ms=30000 HTTP/1.1\r\n"
               b"Host: 127.0.0.1\r\n\r\n")


def _arrivals(sockets: list[socket.socket], deadline_s: float
              ) -> tuple[dict[socket.socket, float], dict[socket.socket, bytearray]]:
    """When each socket's first answer byte arrived (time.monotonic()), and all it read
    until the server closed it. Only the arrival is timed
    here, a recv per ready socket: parsing comes after, so a client slowed by the machine's
    load (an HTTP client parsing 300 answers on one thread took seconds under load 12,
    while the broker had written them all within 0.2 s) does not count as the broker's
    delay."""
    arrived: dict[socket.socket, float] = {}
    received: dict[socket.socket, bytearray] = {}
    with selectors.DefaultSelector() as selector:
        for sock in sockets:
            selector.register(sock, selectors.EVENT_READ, sock)
        while selector.get_map() and time.monotonic() < deadline_s:
            ready = selector.select(timeout=max(0.0, deadline_s - time.monotonic()))
            now_s = time.monotonic()
            for key, _ in ready:
                sock = key.data
                chunk = sock.recv(65536)
                arrived.setdefault(sock, now_s)
                received.setdefault(sock, bytearray()).extend(chunk)
                if not chunk:
                    selector.unregister(sock)
    return arrived, received


def _keep_busy(stop: threading.Event) -> None:
    """Python work holding the GIL in turns for up to BUSY_CLIENT_S: the seam that stands
    for a loaded machine on the client's side (with an HTTP client timing its parsed
    answers, every answer came over 2 s late with this thread running)."""
    end_s = time.monotonic() + BUSY_CLIENT_S
    while not stop.is_set() and time.monotonic() < end_s:
        sum(range(1000))


def test_sigterm_answers_every_waiting_read_within_a_second(launch: Launcher) -> None:
    """300 reads parked with wait_ms=30000 when SIGTERM comes: each is answered within a
    second, with the empty result (not a 500 after timeout_graceful_shutdown_s), and the
    broker exits 0. The answers' arrival is timed on the client's sockets, while another
    thread of this process keeps it busy."""
    broker = launch("long-poll-stop", "ASYNC_MASTER", long_poll_wait_ms_max=30_000,
                    timeout_graceful_shutdown_s=10)
    assert broker.client.post("/v1/topics", json={"name": "Parked"}).status_code == 201
    port = int(broker.url.rsplit(":", 1)[1])
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=10)
               for _ in range(WAITERS_ON_SIGTERM)]
    stop_busy = threading.Event()
    try:
        for sock in sockets:
            sock.sendall(PARKED_READ)
            sock.setblocking(False)
        wait_for(lambda: long_poll_waiters(broker) == WAITERS_ON_SIGTERM,
                 what=f"{WAITERS_ON_SIGTERM} reads parked")
        busy = threading.Thread(target=_keep_busy, args=(stop_busy,), name="busy-client")
        busy.start()
        signalled_at = time.monotonic()
        broker.process.send_signal(signal.SIGTERM)
        arrived, received = _arrivals(sockets, signalled_at + 30)
        stop_busy.set()
        exit_code = broker.process.wait(timeout=30)
        assert len(arrived) == WAITERS_ON_SIGTERM
        late = [at - signalled_at for at in arrived.values()
                if at - signalled_at > ANSWERED_AFTER_SIGTERM_S_MAX]
        assert not late, \
            f"{len(late)} reads answered late, the last {max(late):.1f} s after SIGTERM"
        for sock in sockets:
            head, _, body = bytes(received[sock]).partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            assert lines[0] == "HTTP/1.1 200 OK", head
            assert "content-type: application/json" in lines, head
            assert json.loads(body)["messages"] == [], body
    finally:
        stop_busy.set()
        for sock in sockets:
            sock.close()
    assert exit_code == 0, broker.log()

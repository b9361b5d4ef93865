"""Read workers (docs/read-workers.md) in real `twinlog serve` processes on loopback: what a
worker answers is what the broker answers, byte for byte; whatever it does not answer goes
back to the broker on the same connection; a worker killed mid-load costs no client a 500 or
a hang, and is restarted."""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.support.brokers import BrokerProcess, Launcher
from tests.support.processes import wait_for

TOKEN = "read-workers-token"
AUTH_TOKENS = f'{{"{TOKEN}": ["produce", "consume", "admin"], "produce-only": ["produce"]}}'
AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()
READY_S = 60.0
ANSWER_WAIT_S = 10.0
_DATE = re.compile(rb"\r\ndate: [^\r]*\r\n")


def _metric(broker: BrokerProcess, name: str) -> list[float]:
    text = broker.client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith(name + "{")]


def _workers_live(broker: BrokerProcess, count: int) -> None:
    wait_for(lambda: _metric(broker, "twinlog_read_worker_live") == [1.0] * count, READY_S,
             "read workers live")


def _reads_served(broker: BrokerProcess) -> float:
    # (workers report every second)
    time.sleep(1.2)
    return sum(_metric(broker, "twinlog_read_worker_reads_total"))


def _get(path: str, *extra: bytes) -> bytes:
    return b"".join([f"GET {path} HTTP/1.1\r\nHost: test\r\n".encode(), AUTH, *extra, b"\r\n"])


def _post(path: str, body: bytes) -> bytes:
    return b"".join([f"POST {path} HTTP/1.1\r\nHost: test\r\n".encode(), AUTH,
                     b"Content-Type: application/json\r\n",
                     b"Content-Length: %d\r\n\r\n" % len(body), body])


class _Connection:
    """A raw HTTP/1.1 connection: requests out, whole answers (by content-length) in."""

    def __init__(self, port: int) -> None:
        self._socket = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WAIT_S)
        self._buffer = b""

    def send(self, data: bytes) -> None:
        self._socket.sendall(data)

    def answer(self) -> bytes:
        while b"\r\n\r\n" not in self._buffer:
            self._receive()
        head_end = self._buffer.index(b"\r\n\r\n") + 4
        length = int(re.search(rb"content-length: (\d+)", self._buffer[:head_end]).group(1))
        while len(self._buffer) < head_end + length:
            self._receive()
        answer, self._buffer = (self._buffer[:head_end + length],
                                self._buffer[head_end + length:])
        return _DATE.sub(b"\r\ndate: -\r\n", answer)

    def _receive(self) -> None:
        data = self._socket.recv(65536)
        if not data:
            raise ConnectionError("closed by the broker")
        self._buffer += data

    def close(self) -> None:
        self._socket.close()


def _fresh(port: int, request: bytes) -> bytes:
    """The answer to `request` alone on a new connection (a read goes to a worker)."""
    connection = _Connection(port)
    try:
        connection.send(request)
        return connection.answer()
    finally:
        connection.close()


def _from_main(port: int, request: bytes) -> bytes:
    """The answer to `request` on a connection whose first request kept it in the broker."""
    connection = _Connection(port)
    try:
        connection.send(_get("/healthz"))
        connection.answer()
        connection.send(request)
        return connection.answer()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def broker(launch: Launcher) -> BrokerProcess:
    started = launch("workers", "ASYNC_MASTER", read_workers=1, auth_tokens=AUTH_TOKENS,
                     long_poll_wait_ms_max=200)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    for name, queues in (("RW", 2), ("RWShut", 1)):
        started.client.post("/v1/topics", headers=headers, json={
            "name": name, "read_queue_count": queues, "write_queue_count": queues}
        ).raise_for_status()
    started.client.post("/v1/topics/RW/messages:batch", headers=headers, json={
        "messages": [{"body": f"message {index}", "queue_id": 0, "tags": f"t{index % 3}",
                      "keys": [f"k{index}"], "properties": {"n": str(index)}}
                     for index in range(100)]}).raise_for_status()
    started.client.post("/v1/topics/RW/messages", headers=headers, json={
        "body": "/wD+", "body_encoding": "base64", "queue_id": 0}).raise_for_status()
    _workers_live(started, 1)
    return started


@pytest.mark.processes
def test_answers_are_the_brokers_byte_for_byte(broker: BrokerProcess) -> None:
    """Each read, on a new connection (a worker's) and on one the broker keeps: the same
    status line, headers and body; the successful reads were the worker's."""
    base = "/v1/topics/RW/queues/0/messages"
    reads = [f"{base}?offset=0&max_messages=1",
             f"{base}?offset=0&max_messages=32&body_encoding=utf8",
             f"{base}?offset=90&max_messages=32&body_encoding=base64",
             f"{base}?offset=99&max_messages=5&body_encoding=utf8",  # the non-UTF-8 body
             f"{base}?offset=101&max_messages=5",  # OFFSET_OVERFLOW_ONE
             f"{base}?offset=500",  # OFFSET_OVERFLOW_BADLY
             f"{base}?max_messages=3&body_encoding=utf8&offset=20",
             "/v1/topics/RW/queues/1/messages?offset=0"]  # never written: NO_MESSAGE...
    refused = [f"{base}?offset=0&tags=t1",  # a tag filter: the broker's
               f"{base}?offset=101&wait_ms=50",  # a long poll: the broker's
               f"{base}?offset=-1", f"{base}?max_messages=0", f"{base}?body_encoding=x",
               "/v1/topics/Nope/queues/0/messages", "/v1/topics/RW/queues/7/messages",
               "/v1/topics/bad%20name/queues/0/messages", f"{base}?offset=0&tags=t1||"]
    served_before = _reads_served(broker)
    for path in reads + refused:
        worker = _fresh(broker.http_port, _get(path))
        main = _from_main(broker.http_port, _get(path))
        assert worker == main, path
        assert worker.startswith(b"HTTP/1.1 200") == (path in reads or path in refused[:2]), \
            path
    for request in (b"GET " + base.encode() + b"?offset=0 HTTP/1.1\r\nHost: t\r\n\r\n",
                    _get(base + "?offset=0").replace(TOKEN.encode(), b"produce-only"),
                    _get(base + "?offset=0", b"Connection: close\r\n")):
        assert _fresh(broker.http_port, request) == _from_main(broker.http_port, request)
    # every read but the one of a queue never written (not published: the broker's), and
    # the Connection: close one
    assert _reads_served(broker) - served_before == len(reads) - 1 + 1


@pytest.mark.processes
def test_a_keep_alive_connection_mixes_reads_and_produces(broker: BrokerProcess) -> None:
    """Reads, a produce, reads, pipelined and one by one on one connection: every answer
    comes, in order, and a read after the produce finds its message."""
    read = _get("/v1/topics/RWShut/queues/0/messages?offset=0&max_messages=10"
                "&body_encoding=utf8")
    produce = _post("/v1/topics/RWShut/messages", b'{"body": "mixed", "queue_id": 0}')
    handed_back = sum(_metric(broker, "twinlog_read_worker_handed_back_total"))
    connection = _Connection(broker.http_port)
    try:
        connection.send(read + read)
        assert b'"status":"NO_MATCHED_LOGIC_QUEUE"' in connection.answer()
        assert b'"status":"NO_MATCHED_LOGIC_QUEUE"' in connection.answer()
        connection.send(produce + read)
        assert connection.answer().startswith(b"HTTP/1.1 201")
        connection.answer()  # (the read raced dispatch: either status)
        for _ in range(3):
            connection.send(read)
            answer = connection.answer()
            assert answer.startswith(b"HTTP/1.1 200")
            if b'"body":"mixed"' in answer:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the produced message never showed in a read")
    finally:
        connection.close()
    time.sleep(1.2)  # (workers report every second)
    assert sum(_metric(broker, "twinlog_read_worker_handed_back_total")) == handed_back + 1


@pytest.mark.processes
def test_a_deleted_topic_is_refused_by_the_worker_at_once(broker: BrokerProcess) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    broker.client.post("/v1/topics", headers=headers, json={
        "name": "RWGone", "read_queue_count": 1, "write_queue_count": 1}).raise_for_status()
    broker.client.post("/v1/topics/RWGone/messages", headers=headers,
                       json={"body": "x"}).raise_for_status()
    read = _get("/v1/topics/RWGone/queues/0/messages?offset=0")
    wait_for(lambda: b'"status":"FOUND"' in _fresh(broker.http_port, read), 10.0, "found")
    assert broker.client.delete("/v1/topics/RWGone", headers=headers).status_code == 204
    after = _fresh(broker.http_port, read)
    assert after.startswith(b"HTTP/1.1 404"), after
    assert after == _from_main(broker.http_port, read)


@pytest.mark.processes
@pytest.mark.slow
def test_a_worker_killed_mid_load_costs_no_500_and_no_hang(launch_own: Launcher) -> None:
    """Readers on new connections and one on keep-alive while the worker is killed with -9:
    every answer is a 200 (a connection the worker held may be cut: the reader opens a new
    one), none waits past its deadline; the broker restarts the worker, which serves again."""
    broker = launch_own("kill", "ASYNC_MASTER", read_workers=1, auth_tokens=AUTH_TOKENS)
    broker.client.post("/v1/topics", headers={"Authorization": f"Bearer {TOKEN}"}, json={
        "name": "K", "read_queue_count": 1, "write_queue_count": 1}).raise_for_status()
    broker.client.post("/v1/topics/K/messages:batch",
                       headers={"Authorization": f"Bearer {TOKEN}"},
                       json={"messages": [{"body": "m"}] * 64}).raise_for_status()
    _workers_live(broker, 1)
    read = _get("/v1/topics/K/queues/0/messages?offset=0&max_messages=32")
    statuses: list[bytes] = []
    cut = [0]
    stop = threading.Event()

    def reader(keep_alive: bool) -> None:
        connection: _Connection | None = None
        while not stop.is_set():
            try:
                if connection is None:
                    connection = _Connection(broker.http_port)
                connection.send(read)
                statuses.append(connection.answer()[:12])
                if not keep_alive:
                    connection.close()
                    connection = None
            except (ConnectionError, OSError) as error:
                if isinstance(error, TimeoutError):
                    statuses.append(b"HANG")
                cut[0] += 1
                if connection is not None:
                    connection.close()
                connection = None

    threads = [threading.Thread(target=reader, args=(keep,)) for keep in (False, False, True)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: len(statuses) > 50, 10.0, "reads under way")
        worker_pid = _worker_pid(broker)
        os.kill(worker_pid, signal.SIGKILL)
        killed_at = len(statuses)
        wait_for(lambda: len(statuses) > killed_at + 100, 20.0, "reads after the kill")
        wait_for(lambda: _metric(broker, "twinlog_read_worker_restarts_total") == [1.0]
                 and _metric(broker, "twinlog_read_worker_live") == [1.0], READY_S,
                 "the worker restarted")
        served = _reads_served(broker)
        wait_for(lambda: _reads_served(broker) > served, 20.0, "the new worker serving")
    finally:
        stop.set()
        for thread in threads:
            thread.join(ANSWER_WAIT_S * 2)
    assert set(statuses) == {b"HTTP/1.1 200"}, set(statuses)


def _worker_pid(broker: BrokerProcess) -> int:
    assert broker.process is not None
    children = Path(f"/proc/{broker.process.pid}/task/{broker.process.pid}/children")
    pids = [int(pid) for pid in children.read_text().split()]
    workers = [pid for pid in pids
               if b"read_workers.worker" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(workers) == 1, pids
    return workers[0]

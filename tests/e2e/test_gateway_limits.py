"""A real `twinlog serve` against clients that are unauthenticated, huge, slow or too many:
auth before body, head limits, read deadlines, the connection cap (docs/gateway-limits.md)."""

from __future__ import annotations

import json
import os
import resource
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.brokers import ROOT, BrokerProcess, Launcher, wait_for
from tests.support.raw_http import RawClient, request_head, rss_bytes

pytestmark = pytest.mark.processes

ADMIN_TOKEN = "limits-admin-token"
TOKENS = {"ENVIRONMENT": json.dumps({ADMIN_TOKEN: ["admin", "produce", "consume"]})}
AUTH = {"authorization": f"Bearer {ADMIN_TOKEN}"}
HUGE_BYTES = 150 * 1024 * 1024
METADATA_BODY_MAX = 64 * 1024
# Resident memory a refused request may add: far below the 150 MB / 100 MB it carries.
RSS_GROWTH_MAX = 32 * 1024 * 1024
DEADLINE_S = 1.0
# A deadline is enforced within half a second of passing; the rest is slack for a loaded host.
CUT_WITHIN_S = DEADLINE_S + 4.0

BODY_ROUTES = [
    ("POST", "/v1/topics"),
    ("POST", "/v1/topics:batch"),
    ("POST", "/v1/groups"),
    ("PUT", "/v1/groups/limits-group/offsets/Limits/queues/0"),
    ("POST", "/admin/ha/promote"),
    ("POST", "/admin/ha/demote"),
    ("POST", "/admin/snapshots"),
    ("POST", "/v1/topics/Limits/messages"),
    ("POST", "/v1/topics/Limits/messages:batch"),
]


@pytest.fixture(scope="module")
def broker(launch: Launcher) -> BrokerProcess:
    return launch("limits", "ASYNC_MASTER", environment={"TWINLOG_AUTH_TOKENS": TOKENS[
        "ENVIRONMENT"]}, http_header_timeout_s=DEADLINE_S, http_body_timeout_s=DEADLINE_S,
        http_keep_alive_timeout_s=1, max_metadata_body_size_bytes=METADATA_BODY_MAX)


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[list[RawClient]]:
    opened: list[RawClient] = []
    yield opened
    for client in opened:
        client.close()


def _open(raw: list[RawClient], broker: BrokerProcess) -> RawClient:
    client = RawClient(broker.http_port)
    raw.append(client)
    return client


def _pid(broker: BrokerProcess) -> int:
    assert broker.process is not None
    return broker.process.pid


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_no_token_is_refused_before_the_body(broker: BrokerProcess, raw: list[RawClient],
                                             method: str, path: str) -> None:
    """Every route with a body answers 401 to a request without a token as soon as its head
    arrives: the 150 MB body it announces is never awaited."""
    client = _open(raw, broker)
    client.send(request_head(method, path, {"content-type": "application/json",
                                            "content-length": str(HUGE_BYTES)}))
    assert client.read_answer(timeout_s=5).status == 401


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
def test_declared_size_is_refused_before_the_body(broker: BrokerProcess, raw: list[RawClient],
                                                  method: str, path: str) -> None:
    """With a valid token, a Content-Length over the route's limit answers 413 as soon as the
    head arrives, without reading the body."""
    client = _open(raw, broker)
    client.send(request_head(method, path, {**AUTH, "content-type": "application/json",
                                            "content-length": str(HUGE_BYTES)}))
    answer = client.read_answer(timeout_s=5)
    assert answer.status == 413, answer.body
    assert json.loads(answer.body)["error_code"] == "REQUEST_TOO_LARGE"


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES[:4])
def test_chunked_body_is_cut_at_the_limit(broker: BrokerProcess, raw: list[RawClient],
                                          method: str, path: str) -> None:
    """A metadata body without Content-Length is counted as it arrives and refused with 413
    once past max_metadata_body_size_bytes, though it never ends."""
    client = _open(raw, broker)
    client.send(request_head(method, path, {**AUTH, "content-type": "application/json",
                                            "transfer-encoding": "chunked"}))
    chunk = b"%x\r\n%s\r\n" % (16 * 1024, b" " * 16 * 1024)
    for _ in range(2 * METADATA_BODY_MAX // (16 * 1024)):
        client.send(chunk)
    answer = client.read_answer(timeout_s=5)
    assert answer.status == 413, answer.body
    assert "max_metadata_body_size_bytes" in json.loads(answer.body)["detail"]


def test_auth_then_size_then_content(broker: BrokerProcess, raw: list[RawClient]) -> None:
    """The same malformed body answers 401 without a token, and 400 with one (413 only for
    its size, above)."""
    body = b'{"name": '
    head = {"content-type": "application/json", "content-length": str(len(body))}
    anonymous, admin = _open(raw, broker), _open(raw, broker)
    anonymous.send(request_head("POST", "/v1/topics", head) + body)
    admin.send(request_head("POST", "/v1/topics", {**AUTH, **head}) + body)
    assert anonymous.read_answer().status == 401
    assert admin.read_answer().status == 400


def _stream(client: RawClient, total_bytes: int) -> threading.Thread:
    """Send `total_bytes` of filler in the background until done or cut by the server."""
    def run() -> None:
        block = b"a" * (1 << 20)
        for _ in range(total_bytes // len(block)):
            if not client.send(block):
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_unauthenticated_150_mb_post_answers_401_without_memory(
        broker: BrokerProcess, raw: list[RawClient]) -> None:
    """A 150 MB `POST /v1/topics` without a token, sent whole, answers 401, and the broker's
    resident memory grows by less than RSS_GROWTH_MAX (32 MiB)."""
    pid = _pid(broker)
    rss_before = rss_bytes(pid)
    client = _open(raw, broker)
    client.send(request_head("POST", "/v1/topics", {"content-type": "application/json",
                                                    "content-length": str(HUGE_BYTES)}))
    sender = _stream(client, HUGE_BYTES)
    status = client.read_answer(timeout_s=60).status
    sender.join(60)
    growth = rss_bytes(pid) - rss_before
    print(f"150 MB unauthenticated POST /v1/topics: {status}, broker RSS "
          f"{rss_before / 2**20:.0f} MiB -> {(rss_before + growth) / 2**20:.0f} MiB")
    assert status == 401
    assert growth < RSS_GROWTH_MAX


def test_100_mb_header_is_refused_without_memory(broker: BrokerProcess,
                                                 raw: list[RawClient]) -> None:
    """A header line of 100 MB answers 431 once it passes http_header_bytes_max, and the
    broker's resident memory grows by less than RSS_GROWTH_MAX."""
    pid = _pid(broker)
    rss_before = rss_bytes(pid)
    client = _open(raw, broker)
    client.send(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-filler: ")
    sender = _stream(client, 100 * 1024 * 1024)
    answer = client.read_answer(timeout_s=60)
    sender.join(60)
    growth = rss_bytes(pid) - rss_before
    print(f"100 MB header: {answer.status}, broker RSS grew {growth / 2**20:.1f} MiB")
    assert answer.status == 431
    assert json.loads(answer.body)["error_code"] == "REQUEST_HEADERS_TOO_LARGE"
    assert growth < RSS_GROWTH_MAX


def test_too_many_header_fields_answer_431(broker: BrokerProcess, raw: list[RawClient]) -> None:
    """More header fields than http_headers_max (100) answer 431 and close."""
    client = _open(raw, broker)
    client.send(request_head("GET", "/healthz", {f"x-field-{n}": "v" for n in range(101)}))
    assert client.read_answer().status == 431
    assert client.closed_within(5)


def test_slowloris_heads_and_bodies_are_cut_within_the_deadline(
        broker: BrokerProcess, raw: list[RawClient]) -> None:
    """Connections that stop half-way through their headers, or through a body, or send
    nothing at all, get 408 and are closed within the deadline (plus the sweep's half
    second and slack); a normal request still works meanwhile."""
    partial_heads = [_open(raw, broker) for _ in range(20)]
    for client in partial_heads:
        client.send(b"POST /v1/topics/Limits/messages HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow")
    stalled_bodies = [_open(raw, broker) for _ in range(20)]
    for client in stalled_bodies:
        client.send(request_head("POST", "/v1/topics/Limits/messages", {
            **AUTH, "content-type": "application/octet-stream", "content-length": "1000"})
            + b"0123456789")
    silent = [_open(raw, broker) for _ in range(5)]
    started_s = time.monotonic()
    cut = [client.closed_within(CUT_WITHIN_S - (time.monotonic() - started_s))
           for client in partial_heads + stalled_bodies + silent]
    took_s = time.monotonic() - started_s
    answers = [client.read_answer(timeout_s=0.1).status for client in partial_heads
               + stalled_bodies + silent]
    print(f"45 slowloris connections: {sum(cut)} cut in {took_s:.1f} s, answers {set(answers)}")
    assert all(cut)
    assert set(answers) == {408}
    assert broker.client.get("/healthz").status_code == 200


def test_idle_keep_alive_connection_is_closed(broker: BrokerProcess,
                                              raw: list[RawClient]) -> None:
    """A connection left idle after an answer is closed after http_keep_alive_timeout_s."""
    client = _open(raw, broker)
    client.send(request_head("GET", "/healthz", {}))
    assert client.read_answer().status == 200
    assert client.closed_within(CUT_WITHIN_S)


def _metric_once(broker: BrokerProcess, name: str, **labels: str) -> float:
    """One sample read over a connection of its own that the server closes (Connection: close):
    when the answer has been read whole, the server has already forgotten the connection."""
    client = RawClient(broker.http_port)
    try:
        client.send(request_head("GET", "/metrics", {"connection": "close"}))
        answer = client.read_answer(timeout_s=5)
        assert answer.status == 200, answer
        assert client.closed_within(5)
    finally:
        client.close()
    for family in text_string_to_metric_families(answer.body.decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    raise AssertionError(f"{name} {labels} not in /metrics")


def test_connection_cap_refuses_past_it_and_recovers(launch_own: Launcher) -> None:
    """With http_connections_max 8, of nine connections opened together exactly one gets 503
    with Retry-After and a close (which one depends on which accept path took it first); the
    other eight stay open. Once the holders go, new connections are served again."""
    broker = launch_own("capped", "ASYNC_MASTER", http_connections_max=8,
                        http_header_timeout_s=60)
    broker.client.close()  # its keep-alive connection would hold a slot
    # The close reaches the server asynchronously: start once only the probe itself is open.
    wait_for(lambda: _metric_once(broker, "twinlog_http_connections_open") == 1, 10,
             "the launcher's connection forgotten by the server")
    opened = [RawClient(broker.http_port) for _ in range(9)]
    try:
        readable, _, _ = select.select([client.sock for client in opened], [], [], 5)
        assert len(readable) >= 1, "no connection refused within 5 s"
        refused = [client for client in opened if client.sock in readable]
        assert len(refused) == 1, f"{len(refused)} connections answered, not 1"
        answer = refused[0].read_answer(timeout_s=5)
        assert answer.status == 503
        assert answer.headers["retry-after"] == "1"
        assert json.loads(answer.body)["error_code"] == "TOO_MANY_CONNECTIONS"
        assert refused[0].closed_within(5)
    finally:
        for client in opened:
            client.close()

    def served() -> bool:
        client = RawClient(broker.http_port)
        try:
            client.send(request_head("GET", "/healthz", {}))
            return client.read_answer(timeout_s=5).status == 200
        finally:
            client.close()

    wait_for(served, 10, "a new connection served after the holders left")
    assert _metric_once(broker, "twinlog_http_connections_cut_total",
                        reason="connections_refused") == 1


def test_serve_refuses_a_descriptor_limit_that_starves_the_store(tmp_path: Path) -> None:
    """Under `ulimit -n 600` (soft and hard) `twinlog serve` exits 2 at once, printing the
    arithmetic: 600 descriptors minus the store's reserve of 664 leave no connection."""
    def limit_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (600, 600))

    result = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "serve", "--data-dir", str(tmp_path / "data"),
         "--http-port", "0", "--ha-port", "0", "--set", "ha_secret=test-ha-secret"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, preexec_fn=limit_descriptors,
        env={key: value for key, value in os.environ.items() if not key.startswith("TWINLOG_")})
    assert result.returncode == 2, result.stderr
    assert "RLIMIT_NOFILE 600 - store reserve 664 leaves -64" in result.stderr

"""DLedger append throughput in-process, each figure next to its baseline from the same run.

    python bench/dledger.py            # 5 s per case
    python bench/dledger.py --quick    # 1 s per case

1. The bare node (baseline): three DLedgerNodes wired directly in one thread, messages
   delivered in FIFO order, every write durable at once; 64 appends kept in flight. This is
   the ceiling of the protocol logic itself in this Python.
2. Three DLedgerServers (host loop + peer transport on loopback, in-memory storage) in this
   process, 64 appends kept in flight through the leader's `append`; authenticated (every frame
   tagged) and open (allow_unauthenticated), so the price of the tags shows in the same run.
"""

from __future__ import annotations

import argparse
import functools
import random
import socket
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import header, row  # noqa: E402
from ha.dledger import (  # noqa: E402
    AppendResult,
    AppendStatus,
    CompleteAppend,
    DLedgerConfig,
    DLedgerNode,
    DLedgerServer,
    EntryLog,
    HardState,
    HostConfig,
    MemoryStorage,
    Message,
    Peer,
    Role,
    Send,
    TransportConfig,
)
from ha.dledger.actions import Action, Write  # noqa: E402

IN_FLIGHT = 64
PAYLOAD = b"x" * 100
CONFIG = DLedgerConfig(pending_appends_max=1024, push_entries_max=64)
HOST = HostConfig(tick_ms=10, election_timeout_ms=300, heartbeat_interval_ms=50,
                  push_timeout_ms=200, quorum_deadline_ms=5000, pending_appends_max=1024)


def bare_node_appends_per_s(duration_s: float) -> float:
    ids = ["n0", "n1", "n2"]
    nodes = {node_id: DLedgerNode(node_id, ids, CONFIG, random.Random(i), HardState(),
                                  EntryLog())
             for i, node_id in enumerate(ids)}
    mail: deque[tuple[str, Message]] = deque()
    done: list[int] = []

    def run(node_id: str, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Send):
                mail.append((action.target_id, action.message))
            elif isinstance(action, CompleteAppend):
                done.append(action.request_id)
            elif isinstance(action, Write.__args__):
                run(node_id, nodes[node_id].persisted(action.write_id))

    def deliver() -> None:
        while mail:
            target_id, message = mail.popleft()
            run(target_id, nodes[target_id].receive(message))

    leader = nodes["n0"]
    while leader.role is not Role.LEADER:
        run("n0", leader.tick())
        deliver()
    request_id = 0
    started = time.perf_counter()
    while time.perf_counter() - started < duration_s:
        for _ in range(IN_FLIGHT):
            request_id += 1
            run("n0", leader.client_append(request_id, PAYLOAD))
        deliver()
    elapsed_s = time.perf_counter() - started
    assert len(done) == request_id, (len(done), request_id)
    return request_id / elapsed_s


def _listener() -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    return listener


def group_appends_per_s(duration_s: float, secret: bytes | None) -> tuple[float, float, float]:
    """Appends/s, p50 and p99 latency in ms through three servers on loopback."""
    listeners = [_listener() for _ in range(3)]
    peers = tuple(Peer(f"n{i}", "127.0.0.1", listener.getsockname()[1])
                  for i, listener in enumerate(listeners))
    servers = [DLedgerServer(TransportConfig("bench", peer.node_id, peers, secret,
                                             allow_unauthenticated=secret is None),
                             HOST, MemoryStorage(), listener, random.Random(i), CONFIG)
               for i, (peer, listener) in enumerate(zip(peers, listeners, strict=True))]
    for server in servers:
        server.start()
    try:
        leader = _wait_leader(servers)
        return _drive(leader, duration_s)
    finally:
        for server in servers:
            server.stop()


def _wait_leader(servers: list[DLedgerServer]) -> DLedgerServer:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for server in servers:
            if server.host.status().role == Role.LEADER.value:
                return server
        time.sleep(0.01)
    raise RuntimeError("no leader within 30 s")


def _drive(leader: DLedgerServer, duration_s: float) -> tuple[float, float, float]:
    """Keep IN_FLIGHT appends outstanding; each completion starts the next."""
    slots = threading.Semaphore(IN_FLIGHT)
    latencies_ms: list[float] = []
    failures: list[AppendStatus] = []
    lock = threading.Lock()

    def finished(started: float, future: Future[AppendResult]) -> None:
        with lock:
            latencies_ms.append((time.perf_counter() - started) * 1000)
            if future.result().status is not AppendStatus.OK:
                failures.append(future.result().status)
        slots.release()

    started_at = time.perf_counter()
    count = 0
    while time.perf_counter() - started_at < duration_s:
        slots.acquire()
        began = time.perf_counter()
        future = leader.host.append(lambda: PAYLOAD)
        future.add_done_callback(functools.partial(finished, began))
        count += 1
    for _ in range(IN_FLIGHT):
        slots.acquire()
    elapsed_s = time.perf_counter() - started_at
    if failures:
        raise RuntimeError(f"{len(failures)} appends failed, first {failures[0]}")
    latencies_ms.sort()
    return (count / elapsed_s, latencies_ms[len(latencies_ms) // 2],
            latencies_ms[int(len(latencies_ms) * 0.99)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    duration_s = 1.0 if parser.parse_args().quick else 5.0
    header(f"DLedger appends, 3 members, {IN_FLIGHT} in flight, {len(PAYLOAD)} B payloads")
    bare = bare_node_appends_per_s(duration_s)
    row("bare node (simulated network, baseline)", bare, "appends/s")
    for name, secret in (("3 servers on loopback, authenticated", b"bench-dledger-secret"),
                         ("3 servers on loopback, open", None)):
        per_s, p50_ms, p99_ms = group_appends_per_s(duration_s, secret)
        row(name, per_s, "appends/s", bare)
        print(f"    latency p50 {p50_ms:.2f} ms, p99 {p99_ms:.2f} ms")


if __name__ == "__main__":
    main()

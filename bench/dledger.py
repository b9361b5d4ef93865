"""DLedger throughput and failover, each figure next to its baseline from the same run.

    python bench/dledger.py                      # 5 s per case, 10 failovers, 60 s quiet
    python bench/dledger.py --quick              # 1 s per case, 3 failovers, 5 s quiet
    python bench/dledger.py --cases quiet --quiet-s 300     # the issue's 5-minute count
    python bench/dledger.py --cases sync-master --profile   # where the leader's time goes
    python bench/dledger.py --cases sync-master,http --rounds 5  # the ratios' medians

1. The bare node (baseline): three DLedgerNodes wired directly in one thread, messages
   delivered in FIFO order, every write durable at once; 64 appends kept in flight. This is
   the ceiling of the protocol logic itself in this Python.
2. Three DLedgerServers (host loop + peer transport on loopback, in-memory storage) in this
   process, 64 appends kept in flight through the leader's `append`; authenticated (every frame
   tagged) and open (allow_unauthenticated), so the price of the tags shows in the same run.
3. The broker's log against SYNC_MASTER (issue 11's target, >= 0.6): three store-backed
   members, the leader in this process as the broker runs it (DLedgerCommitLog, 64 asyncio
   producers awaiting their puts) and each follower in its own process
   (bench/dledger_member.py), next to a SYNC_MASTER MessageStore with one live slave
   process and 64 asyncio producers (bench/ha_replication.py), 100-byte bodies, both over
   authenticated links. Each process is given its own listener (bound here, inherited).
   Each flush setting next to its own: DLedger with ASYNC_FLUSH (members answer from the page
   cache, as DLedger does) against SYNC_MASTER with ASYNC_FLUSH (the issue's target), and
   DLedger with SYNC_FLUSH (every member syncs before it answers) against SYNC_MASTER with
   SYNC_FLUSH. --profile prints the leader host's profile.
4. Failover (bench/dledger_failover.py): kill -9 of the leader's process to the first append
   answered OK by the next leader, default timing, p50 and max over --failover-runs.
5. Quiet group: elections after the first leader over --quiet-s seconds of an idle group.
6. log-append (not in the default cases): the stored log's CPU per entry, single-threaded
   with no network, leader and follower paths next to the store's own put
   (bench/dledger_log_append.py).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import os
import pstats
import random
import resource
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import header, process_cpu_s, row  # noqa: E402
from bench.dledger_failover import failover_runs, quiet_elections  # noqa: E402
from bench.dledger_log_append import log_append  # noqa: E402
from bench.dledger_member import FILE_SIZE_BYTES, spawn_member, stop_member  # noqa: E402
from bench.dledger_serve import http_failover_runs, http_produce_loads  # noqa: E402
from bench.ha_replication import SECRET as HA_SECRET  # noqa: E402
from bench.ha_replication import put_rate  # noqa: E402
from bench.http_produce import show  # noqa: E402
from ha.dledger.commit_log import DLedgerCommitLog  # noqa: E402
from ha.dledger.core.actions import (  # noqa: E402
    Action,
    AppendStatus,
    CompleteAppend,
    Send,
    Write,
)
from ha.dledger.core.config import DLedgerConfig  # noqa: E402
from ha.dledger.core.entry_log import EntryLog  # noqa: E402
from ha.dledger.core.member import HardState, Role  # noqa: E402
from ha.dledger.core.messages import Message  # noqa: E402
from ha.dledger.core.node import DLedgerNode  # noqa: E402
from ha.dledger.core.peers import Peer, format_peers  # noqa: E402
from ha.dledger.host.append_future import AppendFuture  # noqa: E402
from ha.dledger.host.host import AppendResult, DLedgerHost  # noqa: E402
from ha.dledger.host.host_config import HostConfig  # noqa: E402
from ha.dledger.host.memory_storage import MemoryStorage  # noqa: E402
from ha.dledger.host.server import DLedgerServer  # noqa: E402
from ha.dledger.host.transport_config import TransportConfig  # noqa: E402
from store import BrokerRole, FlushDiskType, MessageStore, PutMessageStatus, StoreConfig  # noqa: E402
from store import Message as StoreMessage  # noqa: E402

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


@dataclass(frozen=True)
class GroupRun:
    per_s: float
    p50_ms: float
    p99_ms: float
    appends: int
    leader_cpu_s: float  # this process (the leader), start-up and stop included
    followers_cpu_s: float  # both follower processes, from start to exit
    leader_steady_cpu_s: float  # this process while the producers ran, nothing else
    followers_steady_cpu_s: float  # both followers over the same window


def stored_group_appends_per_s(root: Path, duration_s: float,
                               page_cache_acks: bool) -> GroupRun:
    """Puts/s, p50 and p99 ms through three store-backed members: the leader here, as the
    broker runs it (DLedgerCommitLog, 64 asyncio producers awaiting their puts, as the
    SYNC_MASTER case's producers await theirs), the followers in child processes; and the
    CPU each side used (getrusage of this process and of the exited children).
    `page_cache_acks`: sync_before_ack=False on every member (a broker with ASYNC_FLUSH)."""
    self_before = resource.getrusage(resource.RUSAGE_SELF)
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    listeners = [_listener() for _ in range(3)]
    peers = tuple(Peer(f"n{i}", "127.0.0.1", listener.getsockname()[1])
                  for i, listener in enumerate(listeners))
    # The followers' election timeout is long so that this member leads.
    children = [spawn_member(root / f"n{i}", f"n{i}", format_peers(peers), listeners[i],
                             HA_SECRET, election_timeout_ms=60_000,
                             page_cache_acks=page_cache_acks)
                for i in (1, 2)]
    store_config = StoreConfig(data_dir=root / "n0", mapped_file_size_bytes=FILE_SIZE_BYTES,
                               broker_role=BrokerRole.SLAVE)
    leader = DLedgerCommitLog(MessageStore(store_config, commit_limited=True),
                              TransportConfig("bench", "n0", peers, HA_SECRET.encode()),
                              HostConfig(sync_before_ack=not page_cache_acks), listeners[0])
    leader.start()
    try:
        _wait_leader([leader.server])
        window: list[tuple[float, float]] = []  # (leader, followers) CPU s, start and end

        def sample() -> None:
            window.append((time.process_time(),
                           sum(process_cpu_s(child.pid) for child in children)))

        latencies_s, elapsed_s = asyncio.run(_produce(leader, duration_s, sample))
    finally:
        leader.stop()
        for child in children:
            stop_member(child)
    latencies_s.sort()
    (leader_start_s, followers_start_s), (leader_end_s, followers_end_s) = window
    self_after = resource.getrusage(resource.RUSAGE_SELF)
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return GroupRun(len(latencies_s) / elapsed_s, latencies_s[len(latencies_s) // 2] * 1000,
                    latencies_s[int(len(latencies_s) * 0.99)] * 1000, len(latencies_s),
                    _cpu_s(self_after) - _cpu_s(self_before),
                    _cpu_s(children_after) - _cpu_s(children_before),
                    leader_end_s - leader_start_s, followers_end_s - followers_start_s)


def _cpu_s(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


async def _produce(leader: DLedgerCommitLog, duration_s: float,
                   sample: Callable[[], None]) -> tuple[list[float], float]:
    """IN_FLIGHT producers, each putting and awaiting in a loop until the time is up;
    `sample()` runs as they start and once they all ended (the CPU window)."""
    latencies_s: list[float] = []
    sample()
    started = time.perf_counter()
    deadline = started + duration_s

    async def producer(index: int) -> None:
        message = StoreMessage("Bench", b"p%03d" % index * 25)
        while time.perf_counter() < deadline:
            began = time.perf_counter()
            _, status = await leader.put(message)
            if status is not PutMessageStatus.PUT_OK:
                raise RuntimeError(f"a put answered {status.value}")
            latencies_s.append(time.perf_counter() - began)

    await asyncio.gather(*(producer(i) for i in range(IN_FLIGHT)))
    elapsed_s = time.perf_counter() - started
    sample()
    return latencies_s, elapsed_s


def _wait_leader(servers: list[DLedgerServer]) -> DLedgerServer:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for server in servers:
            if server.host.status().role == Role.LEADER.value:
                return server
        time.sleep(0.01)
    raise RuntimeError("no leader within 30 s")


def _drive(leader: DLedgerServer, duration_s: float,
           encode: Callable[[], bytes] = lambda: PAYLOAD) -> tuple[float, float, float]:
    """Keep IN_FLIGHT appends outstanding; each completion starts the next."""
    slots = threading.Semaphore(IN_FLIGHT)
    latencies_ms: list[float] = []
    failures: list[AppendStatus] = []
    lock = threading.Lock()

    def finished(started: float, future: AppendFuture[AppendResult]) -> None:
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
        future = leader.host.append(encode)
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
    parser.add_argument("--quick", action="store_true", help="1 s per case, 3 failover runs")
    parser.add_argument("--cases",
                        default="appends,sync-master,http,failover,http-failover,quiet",
                        help="comma-separated: appends, sync-master, http, failover, "
                             "http-failover, quiet; not by default: log-append, "
                             "dledger-puts (the in-process DLedger puts alone, to profile)")
    parser.add_argument("--failover-runs", type=int, default=10)
    parser.add_argument("--quiet-s", type=float, default=60.0,
                        help="idle period for the election count (the issue asks 300)")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile the DLedger leader's host thread in sync-master")
    parser.add_argument("--rounds", type=int, default=1,
                        help="sync-master and http: this many pairs in turn (SYNC_MASTER, "
                             "then DLedger; page-cache acks in-process), each round's ratio "
                             "and their median")
    arguments = parser.parse_args()
    duration_s = 1.0 if arguments.quick else 5.0
    cases = set(arguments.cases.split(","))
    print(f"load average at start: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    if "log-append" in cases:
        log_append(20_000 if arguments.quick else 100_000)
    if "appends" in cases:
        appends(duration_s)
    if "sync-master" in cases:
        ratios = [versus_sync_master(duration_s, arguments.profile)]
        if arguments.rounds > 1:
            ratios += page_cache_rounds(duration_s, arguments.rounds - 1)
            header(f"DLedger / SYNC_MASTER (page-cache acks) over {len(ratios)} rounds in turn")
            _print_ratios(ratios)
    if "dledger-puts" in cases:
        dledger_puts_alone(duration_s)
    root = Path(tempfile.mkdtemp(prefix="twinlog-bench-dledger-"))
    try:
        if "failover" in cases:
            runs = 3 if arguments.quick else arguments.failover_runs
            header(f"failover: kill -9 of the leader process to the first OK append, {runs} runs")
            _print_timings(failover_runs(root / "failover", runs))
        if "http" in cases:
            header(f"HTTP produce under wrk (64 connections), {duration_s:.0f} s per case")
            http_ratios: list[float] = []
            for round_number in range(1, arguments.rounds + 1):
                sync_master, dledger = http_produce_loads(root / f"http-{round_number}",
                                                          duration_s)
                http_ratios.append(dledger.requests_per_s / sync_master.requests_per_s)
                show("SYNC_MASTER, slave process (baseline)", sync_master, None)
                show("DLedger leader, 3 serve processes", dledger, sync_master,
                     ">= 0.60 of SYNC_MASTER")
            if len(http_ratios) > 1:
                _print_ratios(http_ratios)
        if "http-failover" in cases:
            runs = 3 if arguments.quick else arguments.failover_runs
            header(f"failover of twinlog serve processes: kill -9 of the leader to the first "
                   f"201, {runs} runs")
            _print_timings(http_failover_runs(root / "http-failover", runs))
        if "quiet" in cases:
            quiet_s = 5.0 if arguments.quick else arguments.quiet_s
            header(f"quiet group: elections after the first leader over {quiet_s:.0f} s idle")
            elections, changes = quiet_elections(root / "quiet", quiet_s)
            row("elections after the first", elections, "", None, "0")
            row("leader changes", changes, "", None, "0")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (1 min)")


def _print_ratios(ratios: list[float]) -> None:
    print("    ratios: " + ", ".join(f"{ratio:.2f}" for ratio in ratios))
    print(f"  median ratio {statistics.median(ratios):.2f} (target >= 0.60)")


def _count_per_producer(duration_s: float) -> int:
    """About duration_s of puts at 20,000 msgs/s (a shorter run is mostly noise)."""
    return max(50, int(duration_s * 300))


def _print_timings(timings: list[float]) -> None:
    row("p50", statistics.median(timings) * 1000, "ms", None, "<= 2000 ms")
    row("max", max(timings) * 1000, "ms")
    print("    runs (ms): " + ", ".join(f"{t * 1000:.0f}" for t in timings))


def appends(duration_s: float) -> None:
    header(f"DLedger appends, 3 members, {IN_FLIGHT} in flight, {len(PAYLOAD)} B payloads")
    bare = bare_node_appends_per_s(duration_s)
    row("bare node (simulated network, baseline)", bare, "appends/s")
    for name, secret in (("3 servers on loopback, authenticated", b"bench-dledger-secret"),
                         ("3 servers on loopback, open", None)):
        per_s, p50_ms, p99_ms = group_appends_per_s(duration_s, secret)
        row(name, per_s, "appends/s", bare)
        print(f"    latency p50 {p50_ms:.2f} ms, p99 {p99_ms:.2f} ms")


def page_cache_rounds(duration_s: float, rounds: int) -> list[float]:
    """`rounds` more SYNC_MASTER (ASYNC_FLUSH) then DLedger (page-cache acks) pairs, in turn:
    on a machine whose speed moves between runs a minute apart, one pair's ratio says little."""
    count_per_producer = _count_per_producer(duration_s)
    ratios: list[float] = []
    for round_number in range(2, rounds + 2):
        root = Path(tempfile.mkdtemp(prefix="twinlog-bench-dledger-"))
        try:
            sync_rate = put_rate(root / "async", BrokerRole.SYNC_MASTER, count_per_producer)[0]
            run = stored_group_appends_per_s(root / "dledger", duration_s,
                                             page_cache_acks=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        ratios.append(run.per_s / sync_rate)
        print(f"    round {round_number}: SYNC_MASTER {sync_rate:,.0f} msgs/s, DLedger "
              f"{run.per_s:,.0f} msgs/s, ratio {ratios[-1]:.2f}")
    return ratios


def versus_sync_master(duration_s: float, profile: bool) -> float:
    """The four cases, printed; returns the page-cache ratio (DLedger / SYNC_MASTER)."""
    header(f"DLedger (3 stored members) vs SYNC_MASTER, {IN_FLIGHT} producers, 100 B bodies")
    root = Path(tempfile.mkdtemp(prefix="twinlog-bench-dledger-"))
    count_per_producer = _count_per_producer(duration_s)
    try:
        cpu_s: list[float] = []
        sync_rate, sync_p50, sync_p99 = put_rate(root / "async", BrokerRole.SYNC_MASTER,
                                                 count_per_producer, cpu_s=cpu_s)
        row("SYNC_MASTER, ASYNC_FLUSH (baseline)", sync_rate, "msgs/s")
        print(f"    latency p50 {sync_p50:.2f} ms, p99 {sync_p99:.2f} ms")
        puts = count_per_producer * IN_FLIGHT
        print(f"    CPU while the producers ran: master process {cpu_s[0]:.2f} s, slave "
              f"{cpu_s[1]:.2f} s: {cpu_s[0] / puts * 1e6:.0f} us and "
              f"{cpu_s[1] / puts * 1e6:.0f} us per put")
        flushed_rate, flushed_p50, flushed_p99 = put_rate(
            root / "sync", BrokerRole.SYNC_MASTER, count_per_producer,
            flush_disk_type=FlushDiskType.SYNC_FLUSH)
        row("SYNC_MASTER, SYNC_FLUSH", flushed_rate, "msgs/s", sync_rate)
        print(f"    latency p50 {flushed_p50:.2f} ms, p99 {flushed_p99:.2f} ms")
        profiler = _profile_hosts() if profile else None
        run = stored_group_appends_per_s(root / "dledger-async", duration_s,
                                         page_cache_acks=True)
        row("DLedger, ASYNC_FLUSH (page-cache acks)", run.per_s, "msgs/s", sync_rate,
            ">= 0.60 of SYNC_MASTER")
        _print_group_run(run)
        ratio = run.per_s / sync_rate
        run = stored_group_appends_per_s(root / "dledger-sync", duration_s,
                                         page_cache_acks=False)
        row("DLedger, SYNC_FLUSH (sync before ack)", run.per_s, "msgs/s", flushed_rate,
            "vs SYNC_MASTER, SYNC_FLUSH")
        _print_group_run(run)
        if profiler is not None:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return ratio


def dledger_puts_alone(duration_s: float) -> None:
    """The in-process DLedger case of `sync-master` without its baselines: a run to profile
    (`py-spy record --gil -- python bench/dledger.py --cases dledger-puts`)."""
    header(f"DLedger (3 stored members) alone, {IN_FLIGHT} producers, 100 B bodies")
    root = Path(tempfile.mkdtemp(prefix="twinlog-bench-dledger-"))
    try:
        run = stored_group_appends_per_s(root, duration_s, page_cache_acks=True)
        row("DLedger, ASYNC_FLUSH (page-cache acks)", run.per_s, "msgs/s")
        _print_group_run(run)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _print_group_run(run: GroupRun) -> None:
    print(f"    latency p50 {run.p50_ms:.2f} ms, p99 {run.p99_ms:.2f} ms")
    print(f"    CPU: leader process {run.leader_cpu_s:.2f} s, both followers "
          f"{run.followers_cpu_s:.2f} s (start-up included) for {run.appends:,} appends: "
          f"{run.leader_cpu_s / run.appends * 1e6:.0f} us and "
          f"{run.followers_cpu_s / run.appends / 2 * 1e6:.0f} us per append per follower")
    print(f"    CPU while the producers ran: leader process {run.leader_steady_cpu_s:.2f} s, "
          f"both followers {run.followers_steady_cpu_s:.2f} s: "
          f"{run.leader_steady_cpu_s / run.appends * 1e6:.0f} us and "
          f"{run.followers_steady_cpu_s / run.appends / 2 * 1e6:.0f} us per append per "
          "follower")


def _profile_hosts() -> cProfile.Profile:
    """cProfile every round of the DLedger hosts of this process (the leader, here)."""
    profiler = cProfile.Profile()
    run_once = DLedgerHost.run_once

    def profiled(host: DLedgerHost) -> float:
        profiler.enable()
        try:
            return run_once(host)
        finally:
            profiler.disable()

    DLedgerHost.run_once = profiled  # type: ignore[method-assign]
    return profiler


if __name__ == "__main__":
    main()

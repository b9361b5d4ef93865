"""Redis side by side: a real `redis-server` master with one replica, XADD + WAIT 1 from redis-py.

The same durability shape as twinlog's SYNC_MASTER (in memory on the master, acknowledged by one
replica before the answer; no fsync on either side) and the same 64-way concurrency as wrk:
64 asyncio connections each send a command and wait for its answer, then send the next.
  single: XADD of one 100-byte entry, then WAIT 1 (one replica acknowledged it);
  batch:  a pipeline of 100 XADDs, then WAIT 1.
redis-server comes from the Debian package `redis-server`; redis-py from the `bench` extra.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.common import ensure_debian_tool

READY_TIMEOUT_S = 30.0
WAIT_TIMEOUT_MS = 5000
STREAM = "bench"
# Trimmed so that memory stays bounded whatever the run's length (approximate: cheap).
STREAM_LENGTH_MAX = 100_000


@dataclass(frozen=True, slots=True)
class RedisLoad:
    messages_per_s: float
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int


def ensure_redis_server() -> str:
    return ensure_debian_tool("redis-server", "redis-server")


@contextmanager
def redis_pair(server: str, scratch: Path, master_port: int, replica_port: int) -> Iterator[str]:
    """A master and a replica of it, both without persistence; yields the master's URL."""
    with redis_pair_processes(server, scratch, master_port, replica_port) as (url, _):
        yield url


@contextmanager
def redis_pair_processes(server: str, scratch: Path, master_port: int, replica_port: int
                         ) -> Iterator[tuple[str, list[subprocess.Popen[bytes]]]]:
    """`redis_pair`, yielding the master's URL and both processes (the master first)."""
    common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
              "--protected-mode", "no", "--daemonize", "no"]
    processes = []
    try:
        for port, extra in ((master_port, []),
                            (replica_port, ["--replicaof", "127.0.0.1", str(master_port)])):
            directory = scratch / f"redis-{port}"
            directory.mkdir(parents=True, exist_ok=True)
            processes.append(subprocess.Popen(
                [server, "--port", str(port), "--dir", str(directory), *common, *extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait_replica_linked(master_port)
        yield f"redis://127.0.0.1:{master_port}", processes
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_replica_linked(master_port: int) -> None:
    import redis

    client = redis.Redis(port=master_port, socket_timeout=2)
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            try:
                replication = client.info("replication")
                if replication.get("connected_slaves", 0) >= 1 and \
                        replication.get("slave0", {}).get("state") == "online":
                    return
            except redis.ConnectionError:
                pass
            time.sleep(0.1)
    finally:
        client.close()
    raise RuntimeError(f"redis replica of port {master_port} not online after "
                       f"{READY_TIMEOUT_S} s")


def measure_redis(url: str, connections: int, entries_per_request: int,
                  duration_s: float) -> RedisLoad:
    """XADD (entries_per_request of them, pipelined) + WAIT 1 on `connections` connections."""
    return asyncio.run(_load(url, connections, entries_per_request, duration_s))


async def _load(url: str, connections: int, entries_per_request: int,
                duration_s: float) -> RedisLoad:
    import redis.asyncio as redis_async

    latencies_s: list[float] = []
    errors = [0]
    stop_at = time.monotonic() + duration_s
    body = b"x" * 100

    async def worker() -> None:
        # One connection per worker, like one wrk connection: a pool of exactly one.
        pool = redis_async.BlockingConnectionPool.from_url(url, max_connections=1)
        client = redis_async.Redis(connection_pool=pool)
        try:
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                pipe = client.pipeline(transaction=False)
                for _ in range(entries_per_request):
                    pipe.xadd(STREAM, {"body": body}, maxlen=STREAM_LENGTH_MAX,
                              approximate=True)
                pipe.execute_command("WAIT", 1, WAIT_TIMEOUT_MS)
                replies = await pipe.execute()
                if replies[-1] < 1:
                    errors[0] += 1
                latencies_s.append(time.perf_counter() - started)
        finally:
            await client.aclose()
            await pool.aclose()

    started_s = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    elapsed_s = time.perf_counter() - started_s
    latencies_s.sort()
    requests = len(latencies_s)
    return RedisLoad(requests * entries_per_request / elapsed_s, requests / elapsed_s,
                     latencies_s[requests // 2] * 1000, latencies_s[int(requests * 0.99)] * 1000,
                     errors[0])

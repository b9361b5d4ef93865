"""Replication throughput on loopback, each figure next to its baseline from the same run.

    python bench/ha_replication.py            # 1 GiB catch-up
    python bench/ha_replication.py --quick    # a small smoke run

1. Catch-up: an empty slave (its own process) copies the master's commit log; baseline:
   os.sendfile of the same files to a plain socket reader process.
2. Puts with 64 concurrent asyncio producers in-process: SYNC_MASTER (a live slave process)
   next to ASYNC_MASTER, msgs/s and p50/p99 latency.
3. A SYNC_FLUSH slave (it flushes what it applied before each report) under a SYNC_MASTER,
   next to an ASYNC_FLUSH one, in alternating rounds:

    python bench/ha_replication.py --slave-flush-rounds 3

Both run over an authenticated link (every frame tagged) and over an open one
(ha_allow_unauthenticated), so the price of authentication shows in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import header, process_cpu_s, row  # noqa: E402
from ha import HAConfig, Replication  # noqa: E402
from store import (  # noqa: E402
    BrokerRole,
    FlushDiskType,
    Message,
    MessageStore,
    PutMessageStatus,
    StoreConfig,
)

MIB = 1 << 20
FILE_SIZE_BYTES = 256 * MIB
PRODUCERS = 64
SECRET = "bench-ha-secret"

_READER = """
import socket, sys
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
buffer = bytearray(1 << 20)
total = 0
while True:
    size = sock.recv_into(buffer)
    if not size:
        break
    total += size
print(total, flush=True)
"""


def _master(root: Path, role: BrokerRole, secret: str | None = SECRET,
            flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH,
            ) -> tuple[MessageStore, Replication]:
    store = MessageStore(StoreConfig(data_dir=root, broker_role=role,
                                     mapped_file_size_bytes=FILE_SIZE_BYTES,
                                     flush_disk_type=flush_disk_type))
    store.start()
    replication = Replication(HAConfig(broker_role=role, ha_listen_port=0, ha_secret=secret,
                                       ha_allow_unauthenticated=secret is None), store)
    replication.start()
    return store, replication


def _spawn_slave(data_dir: Path, port: int, secret: str | None,
                 sync_flush: bool = False) -> subprocess.Popen[str]:
    """A slave process, started and recovered, that connects once it reads a line."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("TWINLOG_HA_SECRET", None)
    if secret is not None:
        environment["TWINLOG_HA_SECRET"] = secret
    child = subprocess.Popen(
        [sys.executable, "-m", "ha.standalone", str(data_dir), f"127.0.0.1:{port}",
         str(FILE_SIZE_BYTES), "--wait-for-go", *(["--sync-flush"] if sync_flush else [])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=environment)
    assert child.stdout is not None and child.stdout.readline().strip() == "READY"
    return child


def _go(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.write("go\n")
    child.stdin.flush()


def _stop(child: subprocess.Popen[str]) -> None:
    child.terminate()
    child.wait(30)


def _fill(store: MessageStore, size_bytes: int) -> None:
    body = bytes(4000)
    while store.max_offset < size_bytes:
        store.put_messages([Message("Bench", body) for _ in range(256)])


def catch_up(root: Path, size_bytes: int) -> tuple[float, float, float]:
    """(authenticated catch-up MB/s, open-link catch-up MB/s, raw sendfile MB/s) over the
    same commit-log bytes."""
    store, replication = _master(root / "master", BrokerRole.ASYNC_MASTER)
    try:
        _fill(store, size_bytes)
        store.commit_log.flush()
        assert replication.service is not None
        port = replication.service.listen_address[1]
        authenticated_s = _time_catch_up(store, root / "slave-authenticated", port, SECRET)
    finally:
        replication.stop()
    # The same files behind an open link: restart replication only.
    replication = Replication(HAConfig(broker_role=BrokerRole.ASYNC_MASTER, ha_listen_port=0,
                                       ha_allow_unauthenticated=True), store)
    replication.start()
    try:
        assert replication.service is not None
        port = replication.service.listen_address[1]
        open_s = _time_catch_up(store, root / "slave-open", port, None)
        raw_s = _raw_sendfile(store)
        total_mb = store.max_offset / MIB
        return total_mb / authenticated_s, total_mb / open_s, total_mb / raw_s
    finally:
        replication.stop()
        store.shutdown()


def _time_catch_up(store: MessageStore, data_dir: Path, port: int,
                   secret: str | None) -> float:
    child = _spawn_slave(data_dir, port, secret)
    started = time.perf_counter()
    _go(child)
    assert child.stdout is not None
    for line in child.stdout:
        if int(line) >= store.max_offset:
            break
    elapsed_s = time.perf_counter() - started
    _stop(child)
    shutil.rmtree(data_dir, ignore_errors=True)
    return elapsed_s


def _raw_sendfile(store: MessageStore) -> float:
    listener = socket.create_server(("127.0.0.1", 0))
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(listener.getsockname()[1])],
                              stdout=subprocess.PIPE, text=True)
    started = time.perf_counter()
    sock, _ = listener.accept()
    with sock:
        for mapped in store.commit_log.files.files:
            sent = 0
            while sent < mapped.write_position:
                sent += os.sendfile(sock.fileno(), mapped.fd, sent, mapped.write_position - sent)
    received = int(reader.communicate(timeout=60)[0])
    elapsed_s = time.perf_counter() - started
    listener.close()
    assert received == store.max_offset
    return elapsed_s


def _fresh_page_write_rate(root: Path, size_bytes: int) -> float:
    """MB/s of copying 32 KiB chunks into a fresh mapped file: what any slave pays for new
    pages (allocation and zeroing by the kernel), whatever its protocol."""
    import mmap

    path = root / "fresh-pages"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, size_bytes)
        mapping = mmap.mmap(fd, size_bytes)
        chunk = bytes(32 * 1024)
        started = time.perf_counter()
        for position in range(0, size_bytes, len(chunk)):
            mapping[position : position + len(chunk)] = chunk
        elapsed_s = time.perf_counter() - started
        mapping.close()
    finally:
        os.close(fd)
        path.unlink()
    return size_bytes / MIB / elapsed_s


async def _produce(store: MessageStore, count_per_producer: int,
                   producers: int) -> list[float]:
    latencies: list[float] = []

    async def producer(index: int) -> None:
        message = Message("Bench", b"p%03d" % index * 25)
        for _ in range(count_per_producer):
            started = time.perf_counter()
            _, done = store.put_message(message)
            status = await done
            assert status is PutMessageStatus.PUT_OK, status
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(producer(i) for i in range(producers)))
    return latencies


def put_rate(root: Path, role: BrokerRole, count_per_producer: int,
             producers: int = PRODUCERS, secret: str | None = SECRET,
             flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH,
             cpu_s: list[float] | None = None,
             slave_sync_flush: bool = False) -> tuple[float, float, float]:
    """(msgs/s, p50 ms, p99 ms) with `producers` asyncio producers; `cpu_s` (when given)
    gets the CPU seconds this process and the slave's used while the producers ran."""
    name = (f"{role.value}-{producers}-{'auth' if secret else 'open'}-{flush_disk_type.value}"
            f"{'-slave-sync-flush' if slave_sync_flush else ''}")
    store, replication = _master(root / f"puts-{name}", role, secret, flush_disk_type)
    child = None
    try:
        if role is BrokerRole.SYNC_MASTER:
            assert replication.service is not None
            service = replication.service
            child = _spawn_slave(root / f"puts-slave-{name}", service.listen_address[1],
                                 secret, slave_sync_flush)
            _go(child)
            while not service.is_slave_ok(0):
                time.sleep(0.01)
        cpu_before = (time.process_time(), 0.0 if child is None else process_cpu_s(child.pid))
        started = time.perf_counter()
        latencies = asyncio.run(_produce(store, count_per_producer, producers))
        elapsed_s = time.perf_counter() - started
        if cpu_s is not None:
            cpu_s.append(time.process_time() - cpu_before[0])
            cpu_s.append(0.0 if child is None else process_cpu_s(child.pid) - cpu_before[1])
    finally:
        if child is not None:
            _stop(child)
        replication.stop()
        store.shutdown()
    latencies.sort()
    return (len(latencies) / elapsed_s, latencies[len(latencies) // 2] * 1000,
            latencies[int(len(latencies) * 0.99)] * 1000)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--slave-flush-rounds", type=int, default=0,
                        help="only the SYNC_FLUSH slave against the ASYNC_FLUSH one, in this "
                             "many alternating rounds")
    arguments = parser.parse_args()
    size_bytes = 64 * MIB if arguments.quick else 1 << 30
    count_per_producer = 200 if arguments.quick else 2000
    root = Path(tempfile.mkdtemp(prefix="twinlog-bench-ha-"))
    if arguments.slave_flush_rounds:
        try:
            slave_flush(root, count_per_producer, arguments.slave_flush_rounds)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    try:
        header(f"catch-up of an empty slave, {size_bytes / MIB:,.0f} MiB on loopback")
        slave_mb_s, open_mb_s, raw_mb_s = catch_up(root, size_bytes)
        fresh_mb_s = _fresh_page_write_rate(root, size_bytes)
        row("os.sendfile to a plain reader (baseline)", raw_mb_s, "MB/s")
        row("slave catch-up, authenticated link", slave_mb_s, "MB/s", raw_mb_s,
            ">= 0.50 of sendfile")
        row("slave catch-up, open link", open_mb_s, "MB/s", raw_mb_s)
        row("  ceiling: copy into fresh mapped pages", fresh_mb_s, "MB/s", raw_mb_s)
        row("  authenticated catch-up vs that ceiling", slave_mb_s, "MB/s", fresh_mb_s)
        header(f"puts, {PRODUCERS} asyncio producers, 100-byte bodies")
        async_rate, async_p50, async_p99 = put_rate(root, BrokerRole.ASYNC_MASTER,
                                                    count_per_producer)
        sync_rate, sync_p50, sync_p99 = put_rate(root, BrokerRole.SYNC_MASTER,
                                                 count_per_producer)
        row("ASYNC_MASTER (baseline)", async_rate, "msgs/s")
        row("  p50", async_p50, "ms")
        row("  p99", async_p99, "ms")
        open_rate, open_p50, open_p99 = put_rate(root, BrokerRole.SYNC_MASTER,
                                                 count_per_producer, secret=None)
        row("SYNC_MASTER, live slave, authenticated", sync_rate, "msgs/s", async_rate,
            ">= 0.80 of ASYNC")
        row("  p50", sync_p50, "ms")
        row("  p99", sync_p99, "ms")
        row("SYNC_MASTER, live slave, open link", open_rate, "msgs/s", async_rate)
        row("  p50", open_p50, "ms")
        row("  p99", open_p99, "ms")
        wide = PRODUCERS * 8
        wide_rate, wide_p50, _ = put_rate(root, BrokerRole.SYNC_MASTER,
                                          max(1, count_per_producer // 8), wide)
        row(f"SYNC_MASTER, {wide} producers", wide_rate, "msgs/s", async_rate)
        row("  p50", wide_p50, "ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def slave_flush(root: Path, count_per_producer: int, rounds: int) -> None:
    """SYNC_MASTER puts over an authenticated link, the slave ASYNC_FLUSH (the baseline) then
    SYNC_FLUSH, `rounds` times; each round's pair is printed, then the medians."""
    header(f"SYNC_MASTER puts, {PRODUCERS} producers: a SYNC_FLUSH slave against an "
           "ASYNC_FLUSH one")
    pairs: list[tuple[tuple[float, float, float], tuple[float, float, float]]] = []
    for number in range(1, rounds + 1):
        baseline = put_rate(root / f"round-{number}", BrokerRole.SYNC_MASTER,
                            count_per_producer)
        flushing = put_rate(root / f"round-{number}", BrokerRole.SYNC_MASTER,
                            count_per_producer, slave_sync_flush=True)
        pairs.append((baseline, flushing))
        row(f"round {number}: ASYNC_FLUSH slave (baseline)", baseline[0], "msgs/s")
        row("  p50", baseline[1], "ms")
        row("  p99", baseline[2], "ms")
        row(f"round {number}: SYNC_FLUSH slave", flushing[0], "msgs/s", baseline[0])
        row("  p50", flushing[1], "ms", baseline[1])
        row("  p99", flushing[2], "ms", baseline[2])
        shutil.rmtree(root / f"round-{number}", ignore_errors=True)
    middle = len(pairs) // 2
    async_median = sorted(pair[0][0] for pair in pairs)[middle]
    sync_median = sorted(pair[1][0] for pair in pairs)[middle]
    row("median: ASYNC_FLUSH slave (baseline)", async_median, "msgs/s")
    row("median: SYNC_FLUSH slave", sync_median, "msgs/s", async_median)


if __name__ == "__main__":
    main()

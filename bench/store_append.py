"""Store append throughput against a plain os.write baseline, and crash recovery time.

    python bench/store_append.py            # full run (1 GiB recovery log)
    python bench/store_append.py --quick    # a small smoke run

Figures: put_message msgs/s and MB/s for 100-byte and 4-KiB bodies (ASYNC_FLUSH, dispatch
running), next to os.write of the same already-encoded records to a plain file; puts from 64
concurrent producers awaiting their guarantees under ASYNC_FLUSH and SYNC_FLUSH; the latency
of a put that rolls to a new commit-log file next to the other puts; recovery time after a
crash (SIGKILL-like halt) with a valid checkpoint and with a zeroed one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import header, row, timed  # noqa: E402
from store import FlushDiskType, Message, MessageStore, StoreConfig  # noqa: E402
from store.record import encode_message  # noqa: E402

MIB = 1 << 20


def _store(root: Path, file_size_bytes: int,
           flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH) -> MessageStore:
    # Retention off (ratio 1.0): the shared machine's disk may pass 75 % "used" mid-run.
    store = MessageStore(StoreConfig(data_dir=root, mapped_file_size_bytes=file_size_bytes,
                                     flush_disk_type=flush_disk_type, disk_max_used_ratio=1.0))
    store.start()
    return store


def _put_all(store: MessageStore, messages: list[Message]) -> None:
    """Results are dropped as a gateway drops them once answered."""
    put = store.put_message
    for message in messages:
        put(message)


def _write_all(fd: int, records: list[bytes]) -> None:
    write = os.write
    for record in records:
        write(fd, record)


def append_rate(root: Path, body_size: int, count: int) -> tuple[float, float]:
    """(put_message msgs/s, os.write msgs/s) for `count` messages of `body_size` bytes."""
    messages = [Message("BenchTopic", bytes([i % 256]) * body_size) for i in range(count)]
    store = _store(root / f"store-{body_size}", 1 << 30)
    try:
        put_s = timed(lambda: _put_all(store, messages))
    finally:
        store.shutdown()
        shutil.rmtree(root / f"store-{body_size}")  # files are allocated for real: free them
    records = [encode_message(m, 0, 0, b"\x7f\x00\x00\x01\x00\x00\x00\x00", 4 * MIB)
               for m in messages]
    path = root / f"raw-{body_size}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        raw_s = timed(lambda: _write_all(fd, records))  # type: ignore[arg-type]
    finally:
        os.close(fd)
    return count / put_s, count / raw_s


async def _produce(store: MessageStore, producer_count: int, count: int, body: bytes) -> None:
    """`producer_count` producers, each putting and awaiting its guarantees, as the gateway."""
    per_producer = count // producer_count

    async def producer() -> None:
        for _ in range(per_producer):
            result, completion = store.put_message(Message("BenchTopic", body))
            status = await completion
            assert status.value == "PUT_OK", (result, status)

    await asyncio.gather(*(producer() for _ in range(producer_count)))


def concurrent_rate(root: Path, flush_disk_type: FlushDiskType, producer_count: int,
                    count: int) -> float:
    """Messages/s of 100-byte puts from concurrent producers that await their guarantees."""
    directory = root / f"concurrent-{flush_disk_type.value}"
    store = _store(directory, 1 << 30, flush_disk_type)
    try:
        put_s = timed(lambda: asyncio.run(_produce(store, producer_count, count, bytes(100))))
    finally:
        store.shutdown()
        shutil.rmtree(directory)
    return count // producer_count * producer_count / put_s


def roll_latency(root: Path, file_size_bytes: int,
                 roll_count: int) -> tuple[float, float, float, int]:
    """(p50 and p99 ms of a put that rolls to a new file, p99 ms of the other puts, rolls)."""
    store = _store(root / "roll", file_size_bytes)
    message = Message("BenchTopic", bytes(16 * 1024))
    roll_ns: list[int] = []
    other_ns: list[int] = []
    clock = time.perf_counter_ns
    try:
        current_file = 0
        while len(roll_ns) < roll_count:
            started = clock()
            result, _ = store.put_message(message)
            elapsed = clock() - started
            file_index = result.commit_log_offset // file_size_bytes
            (roll_ns if file_index != current_file else other_ns).append(elapsed)
            current_file = file_index
    finally:
        store.shutdown()
        shutil.rmtree(root / "roll")
    return (_quantile_ms(roll_ns, 0.5), _quantile_ms(roll_ns, 0.99),
            _quantile_ms(other_ns, 0.99), len(roll_ns))


def _quantile_ms(samples_ns: list[int], quantile: float) -> float:
    ordered = sorted(samples_ns)
    return ordered[min(len(ordered) - 1, int(len(ordered) * quantile))] / 1e6


def recovery_time(root: Path, log_bytes: int) -> tuple[float, float, int]:
    """(ms with checkpoint, ms with zeroed checkpoint, records) after a crash."""
    data_dir = root / "recovery"
    store = _store(data_dir, 1 << 30)
    body = bytes(4000)
    count = 0
    while store.max_offset < log_bytes:
        store.put_messages([Message("Recover", body) for _ in range(256)])
        count += 256
    store.halt()  # as a crash: no final flush, no checkpoint, abort marker left
    store = MessageStore(store.config)
    report = store.start()
    with_checkpoint_ms = report.duration_ms
    store.halt()
    checkpoint = data_dir / "checkpoint"
    checkpoint.write_bytes(bytes(checkpoint.stat().st_size))
    store = MessageStore(store.config)
    full = store.start()
    store.shutdown()
    assert full.scanned_record_count == count, (full.scanned_record_count, count)
    return with_checkpoint_ms, full.duration_ms, count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke run")
    arguments = parser.parse_args()
    small_count = 20_000 if arguments.quick else 400_000
    large_count = 5_000 if arguments.quick else 100_000
    log_bytes = 64 * MIB if arguments.quick else 1 << 30
    root = Path(tempfile.mkdtemp(prefix="twinlog-bench-"))
    try:
        header("store append (ASYNC_FLUSH) vs os.write of the same encoded records")
        for body_size, count, target in ((100, small_count, ">= 200,000 msgs/s"),
                                         (4096, large_count, ">= 0.50 of os.write")):
            put_rate, raw_rate = append_rate(root, body_size, count)
            record_bytes = body_size + 101
            row(f"os.write {body_size} B records (baseline)", raw_rate, "msgs/s")
            row(f"put_message {body_size} B", put_rate, "msgs/s", raw_rate, target)
            row(f"put_message {body_size} B", put_rate * record_bytes / MIB, "MB/s",
                raw_rate * record_bytes / MIB)
        header("64 concurrent producers awaiting their guarantees, 100 B bodies")
        concurrent_count = 6_400 if arguments.quick else 64_000
        async_rate = concurrent_rate(root, FlushDiskType.ASYNC_FLUSH, 64, concurrent_count)
        sync_rate = concurrent_rate(root, FlushDiskType.SYNC_FLUSH, 64, concurrent_count)
        row("put + await, ASYNC_FLUSH (baseline)", async_rate, "msgs/s")
        row("put + await, SYNC_FLUSH (group commit)", sync_rate, "msgs/s", async_rate)
        roll_file_bytes = 32 * MIB
        header(f"file roll latency, {roll_file_bytes / MIB:,.0f} MiB files, 16 KiB bodies")
        roll_p50_ms, roll_p99_ms, other_p99_ms, rolls = roll_latency(
            root, roll_file_bytes, 8 if arguments.quick else 48)
        row("put p99, puts that do not roll (baseline)", other_p99_ms, "ms")
        row(f"put p50, puts that roll a file ({rolls} rolls)", roll_p50_ms, "ms", other_p99_ms)
        row(f"put p99, puts that roll a file ({rolls} rolls)", roll_p99_ms, "ms", other_p99_ms)
        header(f"crash recovery, {log_bytes / MIB:,.0f} MiB of commit log")
        checkpoint_ms, full_ms, records = recovery_time(root, log_bytes)
        row("recovery with checkpoint", checkpoint_ms, "ms", None, "target < 3000 ms")
        row(f"recovery, zeroed checkpoint ({records:,} records)", full_ms, "ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

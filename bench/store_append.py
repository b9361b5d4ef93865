"""Store append throughput against a plain os.write baseline, and crash recovery time.

    python bench/store_append.py            # full run (1 GiB recovery log)
    python bench/store_append.py --quick    # a small smoke run

Figures: put_message msgs/s and MB/s for 100-byte and 4-KiB bodies (ASYNC_FLUSH, dispatch
running), next to os.write of the same already-encoded records to a plain file; recovery
time after a crash (SIGKILL-like halt) with a valid checkpoint and with a zeroed one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import header, row, timed  # noqa: E402
from store import Message, MessageStore, StoreConfig  # noqa: E402
from store.record import encode_message  # noqa: E402

MIB = 1 << 20


def _store(root: Path, file_size_bytes: int) -> MessageStore:
    store = MessageStore(StoreConfig(data_dir=root, mapped_file_size_bytes=file_size_bytes))
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
    records = [encode_message(m, 0, 0, b"\x7f\x00\x00\x01\x00\x00\x00\x00", 4 * MIB)
               for m in messages]
    path = root / f"raw-{body_size}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        raw_s = timed(lambda: _write_all(fd, records))  # type: ignore[arg-type]
    finally:
        os.close(fd)
    return count / put_s, count / raw_s


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
        header(f"crash recovery, {log_bytes / MIB:,.0f} MiB of commit log")
        checkpoint_ms, full_ms, records = recovery_time(root, log_bytes)
        row("recovery with checkpoint", checkpoint_ms, "ms", None, "target < 3000 ms")
        row(f"recovery, zeroed checkpoint ({records:,} records)", full_ms, "ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Lookup by key on a log of 1,000,000 messages, next to a full scan of the same log.

    python bench/key_lookup.py                  # 1,000,000 messages, 2,000 lookups
    python bench/key_lookup.py --messages 100000 --lookups 500

Each message has its own key (`order-<n>`), 100-byte bodies, one topic of 8 queues. The
lookups are of random keys through `MessageStore.find_by_key` (the key index: candidates from
the hash chain, each record read and checked); the baseline reads every record of the log
and keeps those with the key, which is what a lookup costs without an index. Target: p99
under 10 ms.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import header, row  # noqa: E402
from store import Message, MessageStore, StoreConfig  # noqa: E402

MIB = 1 << 20
TOPIC = "KeyBench"
BATCH_MESSAGES = 1000
SCAN_SAMPLE_KEYS = 1  # a scan of 1,000,000 records takes about a minute
TARGET_P99_MS = 10.0


def _fill(store: MessageStore, message_count: int) -> None:
    body = b"x" * 100
    for start in range(0, message_count, BATCH_MESSAGES):
        batch = [Message(TOPIC, body, properties={"KEYS": f"order-{n}"})
                 for n in range(start, min(start + BATCH_MESSAGES, message_count))]
        for result, _ in store.put_messages(batch):
            assert result.status.value == "PUT_OK", result
    deadline = time.monotonic() + 600
    while store.dispatch.dispatched_offset < store.max_offset:
        if time.monotonic() > deadline:
            raise RuntimeError("dispatch did not catch up in 600 s")
        time.sleep(0.05)


def _scan_for(store: MessageStore, key: str) -> int:
    """Every record of the log read and checked for `key`: the lookup without an index."""
    found = 0
    offset = store.min_offset
    commit_log = store.commit_log
    file_size = store.config.mapped_file_size_bytes
    while offset < store.max_offset:
        try:
            message = commit_log.read_record(offset)
        except Exception:  # the blank at a file's end: the next record opens the next file
            offset = (offset // file_size + 1) * file_size
            continue
        if message.topic == TOPIC and key in (message.keys or "").split(" "):
            found += 1
        offset += message.total_size
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--lookups", type=int, default=2000)
    args = parser.parse_args()
    header(f"lookup by key: {args.messages:,} messages")
    with tempfile.TemporaryDirectory(prefix="twinlog-keys-") as root:
        store = MessageStore(StoreConfig(data_dir=Path(root), mapped_file_size_bytes=256 * MIB,
                                         disk_max_used_ratio=1.0))
        store.start()
        try:
            started = time.perf_counter()
            _fill(store, args.messages)
            row("fill and dispatch", time.perf_counter() - started, "s")
            chooser = random.Random(13)
            latencies_ms = []
            for _ in range(args.lookups):
                key = f"order-{chooser.randrange(args.messages)}"
                began = time.perf_counter()
                found = store.find_by_key(TOPIC, key, 32)
                latencies_ms.append((time.perf_counter() - began) * 1000)
                assert len(found) == 1 and found[0].keys == key, (key, found)
            latencies_ms.sort()
            p50 = latencies_ms[len(latencies_ms) // 2]
            p99 = latencies_ms[int(len(latencies_ms) * 0.99)]
            scans_ms = []
            for _ in range(SCAN_SAMPLE_KEYS):
                key = f"order-{chooser.randrange(args.messages)}"
                began = time.perf_counter()
                assert _scan_for(store, key) == 1
                scans_ms.append((time.perf_counter() - began) * 1000)
            scan_ms = sorted(scans_ms)[len(scans_ms) // 2]
            row("full scan of the log for one key", scan_ms * 1000, "us")
            row("lookup by key through the index, p50", p50 * 1000, "us", scan_ms * 1000)
            row("lookup by key through the index, p99", p99 * 1000, "us", scan_ms * 1000,
                f"target < {TARGET_P99_MS:g} ms: {'met' if p99 < TARGET_P99_MS else 'MISSED'}")
            row("key-index files", store.key_index.file_count, "files")
        finally:
            store.shutdown()


if __name__ == "__main__":
    main()

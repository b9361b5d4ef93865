"""What a start pays to refill the idempotency window, in-process: a store holding `--messages`
messages stored within the window, a few of them with an Idempotency-Key.

    python bench/idempotency_rebuild.py [--messages 200000] [--keyed 50] [--rounds 3]

Per round, the refill (app/broker/idempotency.py `rebuild`, which reads only the heads whose
properties may hold the key) next to, in the same run, the same scan reading every head
(`read_heads` without a property: what a refill read before). Printed: seconds and us per
stored message of each, and their ratio. The store uses 64 MiB files in a temporary data dir,
removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

if "PYTHONPATH" not in os.environ:  # this checkout's code unless PYTHONPATH names a build
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.api.schemas.produce import PROPERTY_IDEMPOTENCY_KEY  # noqa: E402
from app.broker.idempotency import IdempotencyWindow, rebuild  # noqa: E402
from store import Message, MessageStore, StoreConfig  # noqa: E402
from store.reads import READ_MESSAGES_MAX  # noqa: E402

QUEUES = 4


def _every_head(store: MessageStore) -> int:
    """The baseline: every head of every queue read and checked for the key."""
    keyed = 0
    for queue_id in range(QUEUES):
        low, high = store.queue_offset_range("T", queue_id) or (0, 0)
        for start in range(low, high, READ_MESSAGES_MAX):
            keyed += sum(PROPERTY_IDEMPOTENCY_KEY in head.properties
                         for head in store.read_heads("T", queue_id, start, READ_MESSAGES_MAX))
    return keyed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--keyed", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="twinlog-bench-idem-"))
    store = MessageStore(StoreConfig(data_dir=data_dir, mapped_file_size_bytes=64 << 20,
                                     consume_queue_entries_per_file=300_000,
                                     disk_max_used_ratio=0.99))
    store.start()
    try:
        batch = [Message("T", b"x" * 100, queue_id=index % QUEUES) for index in range(1000)]
        for _ in range(args.messages // len(batch)):
            store.put_messages(batch)
        for index in range(args.keyed):
            store.put_message(Message("T", b"k", {PROPERTY_IDEMPOTENCY_KEY: f"k{index}"},
                                      queue_id=index % QUEUES))
        while store.dispatch.dispatched_offset < store.max_offset:
            time.sleep(0.01)
        total = args.messages + args.keyed
        print(f"{total} messages, {args.keyed} keyed, load {os.getloadavg()[0]:.1f}")
        for round_index in range(args.rounds):
            started = time.perf_counter()
            restored = rebuild(IdempotencyWindow(300.0, 100_000), store)
            refill_s = time.perf_counter() - started
            started = time.perf_counter()
            found = _every_head(store)
            every_s = time.perf_counter() - started
            assert restored == found == args.keyed, (restored, found)
            print(f"round {round_index + 1}: refill {refill_s:.3f} s "
                  f"({refill_s / total * 1e6:.2f} us/message); every head {every_s:.3f} s "
                  f"({every_s / total * 1e6:.2f} us/message); ratio {refill_s / every_s:.2f}")
    finally:
        store.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()

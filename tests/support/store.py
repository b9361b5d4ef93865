"""Stores on small files for tests, and waiting for what their threads do."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from store import Message, MessageStore, StoreConfig
from store.retention import RetentionService

SMALL_FILE_BYTES = 64 * 1024
SMALL_MESSAGE_MAX_BYTES = 16 * 1024
TEST_DISK_MAX_USED_RATIO = 0.95


def small_config(data_dir: Path, **overrides: Any) -> StoreConfig:
    """Small files so that tests roll across several of them."""
    settings: dict[str, Any] = {
        "data_dir": data_dir,
        "mapped_file_size_bytes": SMALL_FILE_BYTES,
        "message_size_max_bytes": SMALL_MESSAGE_MAX_BYTES,
        "consume_queue_entries_per_file": 64,
        "flush_interval_ms": 20,
        "flush_consume_queue_interval_ms": 50,
        # Retention by disk use reads the host's disk: at the default 0.75 a busy host
        # (another suite, a benchmark) made test stores delete their oldest files mid-test.
        # Tests of that retention inject the ratio they need (0.99, 1.0).
        "disk_max_used_ratio": TEST_DISK_MAX_USED_RATIO,
    }
    settings.update(overrides)
    return StoreConfig(**settings)


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll `condition` until it holds; fail the test at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(0.005)


# The longest wait on dispatch's completion before the offsets are read again (a cut of the
# log moves them without completing a wait).
_DISPATCH_LOOK_S = 0.05


def wait_dispatched(store: MessageStore, timeout_s: float = 10.0) -> None:
    """Dispatch has passed every record, and the batch that passed the last has ended: its
    position moves before it lets go of the file it held (a test that then expects
    retention to unlink that file at once would race the release). Woken by dispatch when
    it passes the end (the store's own wait), not by polling: a 5 ms poll slept 7.7 s over
    the 1,541 waits of tests/store, tests/app and tests/ha."""
    deadline = time.monotonic() + timeout_s
    while (end := store.max_offset) > store.dispatch.dispatched_offset:
        remaining_s = deadline - time.monotonic()
        if remaining_s <= 0:
            raise AssertionError(f"dispatch did not reach {end} within {timeout_s} s "
                                 f"(at {store.dispatch.dispatched_offset})")
        reached = store.wait_dispatched(end, int(remaining_s * 1000) + 1)
        with contextlib.suppress(TimeoutError):
            reached.wait(min(remaining_s, _DISPATCH_LOOK_S))
    with store.dispatch._dispatch_lock:
        pass


def fill_across_files(store: MessageStore, topic: str = "T", count: int = 150) -> None:
    """`count` messages of 100 to 1,486 bytes in queue 0 of `topic`, dispatched: with small
    files, they span several log files (and queue files, at 16 entries a file)."""
    for index in range(count):
        store.put_message(Message(topic, bytes([index % 256]) * (100 + (index * 37) % 1387),
                                  queue_id=0))
    wait_dispatched(store)
    assert len(store.commit_log.files.files) >= 3


def remove_oldest_log_files(store: MessageStore) -> None:
    """Retention, the disk nearly full: the oldest log files go; their queue entries stay
    until the queue's files go."""
    retention = RetentionService(store.config, store.commit_log, store.queues, store.dispatch,
                                 used_ratio=lambda _: 0.99)
    retention.delete_expired()
    assert store.min_offset > 0

"""Consume-queue recovery after a power loss: holes and stale entries below the last entry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from store import Message, MessageStore
from store.index.consume_queue import ENTRY_SIZE
from tests.support.store import wait_dispatched

OpenStore = Callable[..., MessageStore]
TOPIC = "Holes"
BEFORE_CHECKPOINT = 30
AFTER_CHECKPOINT = 30
# Only the checkpoints the test writes: the flush thread's would move the recovery start.
QUIET_CHECKPOINTS = {"flush_consume_queue_interval_ms": 3_600_000}


def _put(store: MessageStore, first: int, count: int) -> None:
    for index in range(first, first + count):
        store.put_message(Message(TOPIC, f"message-{index}".encode(), queue_id=0))
    wait_dispatched(store)


def _consumed(store: MessageStore) -> list[bytes]:
    return [message.body for message in store.get_messages(TOPIC, 0, 0, 1000).messages]


def _expected(count: int) -> list[bytes]:
    return [f"message-{index}".encode() for index in range(count)]


def _queue_file(data_dir: Path) -> Path:
    files = sorted((data_dir / "consumequeue" / TOPIC / "0").iterdir())
    assert len(files) == 1  # 60 entries fit in one 64-entry file
    return files[0]


def _crash_after_checkpoint(open_store: OpenStore) -> Path:
    """30 messages checkpointed, 30 more dispatched but not checkpointed, then a crash."""
    store = open_store(**QUIET_CHECKPOINTS)
    _put(store, 0, BEFORE_CHECKPOINT)
    store.flush.checkpoint()
    _put(store, BEFORE_CHECKPOINT, AFTER_CHECKPOINT)
    assert _consumed(store) == _expected(BEFORE_CHECKPOINT + AFTER_CHECKPOINT)
    store.halt()
    return store.config.data_dir


def _zero_entries(path: Path, first: int, end: int) -> None:
    """What a power loss leaves when those entries' page never reached the disk."""
    with path.open("r+b") as file:
        file.seek(first * ENTRY_SIZE)
        file.write(bytes((end - first) * ENTRY_SIZE))


def _copy_entry(path: Path, source: int, target: int) -> None:
    """A stale entry: the bytes of another entry, pointing at a record of another offset."""
    with path.open("r+b") as file:
        file.seek(source * ENTRY_SIZE)
        entry = file.read(ENTRY_SIZE)
        file.seek(target * ENTRY_SIZE)
        file.write(entry)


@pytest.mark.parametrize("hole", [(35, 40), (31, 32)])
def test_a_hole_below_the_last_entry_is_redispatched(open_store: OpenStore,
                                                     hole: tuple[int, int]) -> None:
    """Zeroed entries below the queue's last written entry (written after the checkpoint)
    are found at recovery and rewritten by redispatch: every message is consumable."""
    data_dir = _crash_after_checkpoint(open_store)
    _zero_entries(_queue_file(data_dir), *hole)
    store = open_store(**QUIET_CHECKPOINTS)
    assert _consumed(store) == _expected(BEFORE_CHECKPOINT + AFTER_CHECKPOINT)
    queue = store.queues.get(TOPIC, 0)
    assert queue is not None and queue.max_queue_offset == BEFORE_CHECKPOINT + AFTER_CHECKPOINT


def test_a_hole_reaching_the_binary_search_keeps_later_entries(open_store: OpenStore) -> None:
    """A hole where the search for the last entry probes (it then stops in the hole) still
    ends with every message consumable: this guards the search for data past the hole,
    which also finds the later entries (they are checked, then rewritten or kept)."""
    data_dir = _crash_after_checkpoint(open_store)
    _zero_entries(_queue_file(data_dir), 45, 59)
    store = open_store(**QUIET_CHECKPOINTS)
    assert _consumed(store) == _expected(BEFORE_CHECKPOINT + AFTER_CHECKPOINT)


def test_an_entry_not_matching_the_log_is_rewritten(open_store: OpenStore) -> None:
    """An entry pointing at another record (a stale page) is found at recovery, and the queue
    is rebuilt from it: every message is consumed once, in order."""
    data_dir = _crash_after_checkpoint(open_store)
    _copy_entry(_queue_file(data_dir), source=3, target=42)
    store = open_store(**QUIET_CHECKPOINTS)
    assert _consumed(store) == _expected(BEFORE_CHECKPOINT + AFTER_CHECKPOINT)


def test_a_hole_is_found_when_the_checkpoint_is_lost(open_store: OpenStore) -> None:
    """Without a checkpoint recovery redispatches the whole log, and a hole anywhere in the
    queue is rewritten."""
    data_dir = _crash_after_checkpoint(open_store)
    _zero_entries(_queue_file(data_dir), 5, 9)
    (data_dir / "checkpoint").unlink()
    store = open_store(**QUIET_CHECKPOINTS)
    assert _consumed(store) == _expected(BEFORE_CHECKPOINT + AFTER_CHECKPOINT)

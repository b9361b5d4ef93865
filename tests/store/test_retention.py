from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from store import GetMessageStatus, Message, MessageStore
from store.retention import RetentionService
from tests.support.store import wait_dispatched

OpenStore = Callable[..., MessageStore]


def _fill(store: MessageStore, count: int) -> None:
    for index in range(count):
        store.put_message(Message("Old", bytes([index % 256]) * 1500, queue_id=0))
    wait_dispatched(store)


def _service(store: MessageStore, used_ratio: float = 0.1,
             now_s: Callable[[], float] = time.time) -> RetentionService:
    return RetentionService(store.config, store.commit_log, store.queues, store.dispatch,
                            used_ratio=lambda _: used_ratio, wall_clock_s=now_s)


def test_old_files_go_but_never_the_last(open_store: OpenStore, tmp_path: Path) -> None:
    """Files older than the reserved time are removed, the file being written stays, and
    consume-queue files pointing only below the new min go with them."""
    store = open_store(consume_queue_entries_per_file=16)
    _fill(store, 200)
    files = sorted((tmp_path / "commitlog").iterdir())
    assert len(files) >= 4
    queue_files_before = len(list((tmp_path / "consumequeue" / "Old" / "0").iterdir()))
    old = time.time() - 100 * 3600
    for path in files:
        os.utime(path, (old, old))
    removed = _service(store).delete_expired()
    assert removed == len(files) - 1
    assert sorted((tmp_path / "commitlog").iterdir()) == files[-1:]
    assert store.min_offset == int(files[-1].name)
    queue_files_after = len(list((tmp_path / "consumequeue" / "Old" / "0").iterdir()))
    assert queue_files_after < queue_files_before
    low, high = store.queue_offset_range("Old", 0) or (0, 0)
    first = store.get_messages("Old", 0, 0, 10)
    assert first.status is GetMessageStatus.OFFSET_TOO_SMALL and first.next_offset == low
    readable = store.get_messages("Old", 0, high - 1, 1)
    assert len(readable.messages) == 1


def test_young_files_stay_unless_disk_is_full(open_store: OpenStore, tmp_path: Path) -> None:
    """Young files stay; a disk past the ratio removes the oldest ones anyway."""
    store = open_store()
    _fill(store, 150)
    count = len(list((tmp_path / "commitlog").iterdir()))
    assert _service(store, used_ratio=0.1).delete_expired() == 0
    assert _service(store, used_ratio=0.99).delete_expired() == count - 1


def test_undispatched_files_stay(open_store: OpenStore, tmp_path: Path) -> None:
    """A file whose records have no consume-queue entries yet is never removed."""
    store = open_store()
    store.dispatch.stop(drain=False)
    for _ in range(150):
        store.put_message(Message("Old", bytes(1500)))
    store.dispatch.dispatched_offset = 0
    assert _service(store, used_ratio=0.99).delete_expired() == 0
    store.dispatch.start()


def test_restart_after_retention(open_store: OpenStore, tmp_path: Path) -> None:
    """A store whose first files were removed restarts and serves what is left."""
    store = open_store()
    _fill(store, 200)
    _service(store, used_ratio=0.99).delete_expired()
    min_offset = store.min_offset
    store.shutdown()
    store = open_store()
    assert store.min_offset == min_offset > 0
    store.halt()
    (tmp_path / "checkpoint").unlink()
    store = open_store()
    assert store.min_offset == min_offset
    low, high = store.queue_offset_range("Old", 0) or (0, 0)
    assert len(store.get_messages("Old", 0, high - 1, 1).messages) == 1

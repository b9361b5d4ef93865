"""Bounded consume-queue resources: open files, dispatch isolation, shutdown after a failure."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from store import GetMessageStatus, Message, MessageStore, PutMessageStatus
from store.checkpoint import read_checkpoint
from tests.support.store import wait_dispatched, wait_until

OpenStore = Callable[..., MessageStore]
OPEN_FILES_MAX = 8


def _open_descriptor_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def _bodies(store: MessageStore, topic: str, queue_id: int = 0) -> list[bytes]:
    result = store.get_messages(topic, queue_id, 0, 100)
    return [message.body for message in result.messages]


def _break_topic_directory(data_dir: Path, topic: str) -> Path:
    """A regular file where the topic's queue directory belongs: every write fails (EEXIST
    or ENOTDIR), as a real I/O error would, without touching any other topic."""
    blocker = data_dir / "consumequeue" / topic
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_bytes(b"not a directory")
    return blocker


def _dispatch_alone_meets_the_failure(store: MessageStore) -> None:
    """As on a slave or in a redispatch after a restart: the records are in the log already.
    (A master's put reserves its queue entry first and is refused instead: see below.)"""
    store.commit_log.reserve_queue = None


def test_a_put_whose_queue_cannot_be_written_is_refused(open_store: OpenStore,
                                                        tmp_path: Path) -> None:
    """A master never acknowledges a message that dispatch could not index: the put to the
    broken queue answers CREATE_MAPPED_FILE_FAILED naming the queue, nothing of it is in the
    log, and the other topics' puts around it are PUT_OK and consumable."""
    _break_topic_directory(tmp_path, "Broken")
    store = open_store()
    before, _ = store.put_message(Message("Healthy", b"before", queue_id=0))
    end_before = store.commit_log.max_offset
    refused, _ = store.put_message(Message("Broken", b"never acknowledged", queue_id=0))
    assert refused.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED, refused
    assert "Broken/0" in refused.detail
    assert store.commit_log.max_offset == end_before
    after, _ = store.put_message(Message("Healthy", b"after", queue_id=0))
    assert before.status is after.status is PutMessageStatus.PUT_OK
    wait_until(lambda: _bodies(store, "Healthy") == [b"before", b"after"])
    assert store.dispatch.failures.failed_queues() == []


def test_open_files_stay_bounded_with_many_queues(open_store: OpenStore) -> None:
    """300 queues written and read keep at most consume_queue_open_files_max files mapped,
    and a queue closed as idle reopens with every entry."""
    store = open_store(consume_queue_open_files_max=OPEN_FILES_MAX)
    before = _open_descriptor_count()
    for index in range(300):
        store.put_message(Message(f"Many{index}", f"body-{index}".encode(), queue_id=0))
    wait_dispatched(store)
    for index in range(300):
        store.put_message(Message(f"Many{index}", f"again-{index}".encode(), queue_id=0))
    wait_dispatched(store)
    during = _open_descriptor_count()
    print(f"descriptors: {before} before, {during} with 300 queues written "
          f"(bound {OPEN_FILES_MAX} files)")
    assert store.queues.open_files.open_file_count <= OPEN_FILES_MAX
    # Beyond the queues: the commit log's next file (allocated ahead), the syncfs directory.
    assert during - before <= 2 * OPEN_FILES_MAX + 8
    assert store.queues.open_files.closed_count > 0
    for index in range(0, 300, 7):
        assert _bodies(store, f"Many{index}") == [f"body-{index}".encode(),
                                                  f"again-{index}".encode()]


def test_entries_of_closed_queues_survive_a_restart(open_store: OpenStore,
                                                    tmp_path: Path) -> None:
    """Entries written to queues that were then closed as idle (unflushed) are made durable
    by the checkpoint and found again after a clean restart."""
    store = open_store(consume_queue_open_files_max=2)
    for index in range(40):
        store.put_message(Message(f"Idle{index}", f"body-{index}".encode(), queue_id=0))
    wait_dispatched(store)
    store.shutdown()
    store = open_store(consume_queue_open_files_max=2)
    assert store.recovery is not None
    for index in range(40):
        assert _bodies(store, f"Idle{index}") == [f"body-{index}".encode()]


def test_a_failing_topic_does_not_stop_dispatch_for_the_others(open_store: OpenStore,
                                                               tmp_path: Path) -> None:
    """An I/O error writing one topic's queue sets that queue aside: messages of other topics
    put before and after it are dispatched and consumable, and the failure is listed."""
    _break_topic_directory(tmp_path, "Broken")
    store = open_store()
    _dispatch_alone_meets_the_failure(store)
    store.put_message(Message("Healthy", b"before", queue_id=0))
    store.put_message(Message("Broken", b"lost for now", queue_id=0))
    store.put_message(Message("Healthy", b"after", queue_id=0))
    wait_until(lambda: _bodies(store, "Healthy") == [b"before", b"after"])
    wait_dispatched(store)
    failures = store.dispatch.failures.failed_queues()
    assert [(failure.topic, failure.queue_id) for failure in failures] == [("Broken", 0)]
    assert store.dispatch.failures.error_count == 1
    assert store.get_messages("Broken", 0, 0, 10).status is not GetMessageStatus.FOUND
    # The checkpoint position stays before the failed batch, so a start rebuilds the queue.
    assert store.dispatch.position[0] < store.dispatch.dispatched_offset


def test_shutdown_after_a_dispatch_failure_still_checkpoints(open_store: OpenStore,
                                                             tmp_path: Path) -> None:
    """A shutdown whose final dispatch hits a failing queue still flushes, writes the
    checkpoint and removes the abort marker; the next start rebuilds the failed queue."""
    blocker = _break_topic_directory(tmp_path, "Broken")
    store = open_store()
    _dispatch_alone_meets_the_failure(store)
    store.dispatch.stop(drain=False)  # the final drain, in shutdown, meets the failure
    store.put_message(Message("Healthy", b"kept", queue_id=0))
    store.put_message(Message("Broken", b"rebuilt later", queue_id=0))
    written_offset = store.max_offset
    store.shutdown()
    assert not (tmp_path / "abort").exists()
    checkpoint = read_checkpoint(tmp_path / "checkpoint")
    assert checkpoint is not None and checkpoint.commit_log_flushed_offset == written_offset
    blocker.unlink()
    store = open_store()
    assert store.recovery is not None and not store.recovery.crashed
    assert _bodies(store, "Healthy") == [b"kept"]
    assert _bodies(store, "Broken") == [b"rebuilt later"]


def test_puts_past_the_queue_file_dispatch_fills_are_counted(open_store: OpenStore) -> None:
    """While dispatch is held (as a DLedger member's is until commit, or a lagging one),
    a put whose entry lies past the queue's last file reserves only its own entry: each
    such put is counted (the slow path /metrics shows), the first file's puts are not."""
    store = open_store(consume_queue_entries_per_file=8)
    store.dispatch.limit_offset = store.commit_log.max_offset  # dispatch holds still
    for index in range(20):
        result, _ = store.put_message(Message("Lagging", f"m{index}".encode(), queue_id=0))
        assert result.status is PutMessageStatus.PUT_OK
    assert store.commit_log.single_entry_reservation_count == 12  # entries 8..19
    store.dispatch.limit_offset = None
    store.dispatch.wake()
    wait_until(lambda: len(_bodies(store, "Lagging")) == 20)
    for index in range(20, 24):  # the queue's files exist now: reserved ahead again
        store.put_message(Message("Lagging", f"m{index}".encode(), queue_id=0))
    assert store.commit_log.single_entry_reservation_count == 12

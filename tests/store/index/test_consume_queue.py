from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from store import GetMessageStatus, Message, MessageStore, PutMessageStatus
from store.record import tags_code
from tests.support.store import wait_dispatched

OpenStore = Callable[..., MessageStore]


def _queues_agree_with_log(store: MessageStore) -> int:
    """Walk the commit log record by record; every record has its entry, and no more."""
    seen = 0
    offset = store.min_offset
    mapped_size = store.config.mapped_file_size_bytes
    while offset < store.max_offset:
        try:
            record = store.commit_log.read_record(offset)
        except Exception:
            offset = (offset // mapped_size + 1) * mapped_size  # a blank: next file
            continue
        queue = store.queues.get(record.topic, record.queue_id)
        assert queue is not None
        entry = queue.get(record.queue_offset)
        assert entry == (offset, record.total_size, tags_code(record.tags or "") if record.tags
                         else 0)
        offset += record.total_size
        seen += 1
    entries = sum(q.max_queue_offset - q.min_queue_offset for q in store.queues.all())
    assert entries == seen
    return seen


def test_round_robin_and_explicit_queues(open_store: OpenStore) -> None:
    """Queues are chosen round-robin unless given, and queue offsets count per queue."""
    store = open_store()
    chosen = [store.put_message(Message("RR", b"x"))[0].queue_id for _ in range(8)]
    assert chosen == [0, 1, 2, 3, 0, 1, 2, 3]
    result, _ = store.put_message(Message("RR", b"y", queue_id=2))
    assert (result.queue_id, result.queue_offset) == (2, 2)
    store.set_queue_count("Wide", 6)
    assert {store.put_message(Message("Wide", b"z"))[0].queue_id for _ in range(6)} == set(
        range(6))


def test_queues_agree_after_rolls_and_restarts(open_store: OpenStore, tmp_path: Path) -> None:
    """Consume queues point at exactly the records of the commit log, before and after
    clean and unclean restarts, across commit-log and consume-queue file rolls."""
    store = open_store()
    for index in range(400):
        body = bytes([index % 251]) * (50 + index * 7 % 900)
        tags = {"TAGS": f"tag{index % 3}"} if index % 2 else {}
        store.put_message(Message(f"Topic{index % 3}", body, tags))
    wait_dispatched(store)
    assert _queues_agree_with_log(store) == 400
    store.shutdown()
    store = open_store()
    assert store.recovery is not None and not store.recovery.crashed
    assert _queues_agree_with_log(store) == 400
    for index in range(100):
        store.put_message(Message("Topic0", b"after restart %d" % index))
    wait_dispatched(store)
    store.halt()
    store = open_store()
    assert store.recovery is not None and store.recovery.crashed
    assert _queues_agree_with_log(store) == 500


def test_reads_are_bounded(open_store: OpenStore) -> None:
    """A read returns at most max_count messages and about max_bytes, with the next offset."""
    store = open_store()
    for _ in range(50):
        store.put_message(Message("R", bytes(500), queue_id=0))
    wait_dispatched(store)
    first = store.get_messages("R", 0, 0, 10)
    assert (first.status, len(first.messages), first.next_offset) == (
        GetMessageStatus.FOUND, 10, 10)
    small = store.get_messages("R", 0, 10, 100, max_bytes=2000)
    assert 1 <= len(small.messages) <= 3 and small.next_offset == 10 + len(small.messages)
    assert store.get_messages("R", 0, 50, 10).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert store.get_messages("R", 0, 99, 10).status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
    assert store.get_messages("R", 3, 0, 10).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.queue_offset_range("R", 0) == (0, 50)


def test_put_result_names_where_it_went(open_store: OpenStore) -> None:
    """A put's result reads back at its commit-log offset and queue offset."""
    store = open_store()
    result, done = store.put_message(Message("W", b"where", {"KEYS": "k"}))
    assert done.result(5) is PutMessageStatus.PUT_OK
    assert len(result.msg_id) == 32
    wait_dispatched(store)
    read = store.get_messages("W", result.queue_id, result.queue_offset, 1).messages[0]
    assert read.commit_log_offset == result.commit_log_offset
    assert read.msg_id == result.msg_id
    assert read.total_size == result.wrote_bytes

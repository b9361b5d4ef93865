"""A read-only view of a running store's files (store/shared_reads/): its reads answer what
the store's own reads answer, within what the store published, through retention, topic
deletes and changes under way."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from store import GetMessageStatus, Message, MessageStore
from store.encoded_reads import EncodedRead
from store.retention import RetentionService
from store.shared_reads.ends_table import SLOTS_MAX, EndsReader, EndsWriter, QueueEnds
from store.shared_reads.publisher import EndsPublisher
from store.shared_reads.read_view import StoreReadView
from tests.support.store import wait_dispatched

OpenStore = Callable[..., MessageStore]


def _encoder(messages: list) -> list[bytes]:  # type: ignore[type-arg]
    return [orjson.dumps({"offset": message.queue_offset, "body": message.body.hex()})
            for message in messages]


@pytest.fixture
def published(open_store: OpenStore, tmp_path: Path
              ) -> Iterator[tuple[MessageStore, EndsPublisher, StoreReadView]]:
    """A store publishing its ends (as the broker wires it: app/server/read_workers/setup.py)
    and a view reading its files."""
    store = open_store(consume_queue_entries_per_file=16)
    publisher = EndsPublisher(tmp_path / "read_ends", store.queues, lambda _t, _q: True,
                              lambda: store.commit_log.min_offset)
    store.arrivals.listener = publisher.entries_written
    store.dispatch.changes.listener = publisher.changing
    view = StoreReadView(tmp_path, tmp_path / "read_ends", 1 << 20)
    yield store, publisher, view
    view.close()
    store.dispatch.changes.listener = None
    store.arrivals.listener = None
    publisher.close()


def _fill(store: MessageStore, topic: str, count: int, size_bytes: int = 1500) -> None:
    for index in range(count):
        store.put_message(Message(topic, bytes([index % 256]) * size_bytes, queue_id=0))
    wait_dispatched(store)


def _same(view_read: EncodedRead | None, store_read: EncodedRead) -> None:
    assert view_read is not None
    assert (view_read.status, view_read.next_offset, view_read.min_offset,
            view_read.max_offset) == (store_read.status, store_read.next_offset,
                                      store_read.min_offset, store_read.max_offset)
    assert [record.data for record in view_read.records] \
        == [record.data for record in store_read.records]


def _both(store: MessageStore, view: StoreReadView, topic: str, offset: int,
          count: int) -> tuple[EncodedRead | None, EncodedRead]:
    return (view.get_encoded(topic, 0, offset, count, _encoder, 1024),
            store.get_encoded(topic, 0, offset, count, _encoder, 1024))


def test_reads_answer_what_the_store_answers(
        published: tuple[MessageStore, EndsPublisher, StoreReadView]) -> None:
    """Reads across files, at the end, past it and of a queue never written: the same
    statuses, offsets and records as the store's own reads."""
    store, _, view = published
    _fill(store, "T", 100)
    for offset, count in ((0, 1), (0, 32), (10, 50), (95, 32), (99, 5), (100, 3), (140, 1)):
        _same(*_both(store, view, "T", offset, count))
    assert view.get_encoded("Never", 0, 0, 1, _encoder, 1024) is None


def test_new_records_and_files_are_seen_once_published(
        published: tuple[MessageStore, EndsPublisher, StoreReadView]) -> None:
    """A view that mapped the first files finds the ones the store rolls to later."""
    store, _, view = published
    _fill(store, "T", 5)
    _same(*_both(store, view, "T", 0, 32))
    _fill(store, "T", 120)
    _same(*_both(store, view, "T", 100, 32))
    _same(*_both(store, view, "T", 0, 32))


def test_a_read_after_retention_answers_as_the_store_does(
        published: tuple[MessageStore, EndsPublisher, StoreReadView], tmp_path: Path) -> None:
    """The view mapped the oldest files; retention removes them: a read of those offsets
    answers OFFSET_TOO_SMALL as the store's does, not the records the mapping still holds."""
    store, _, view = published
    _fill(store, "T", 200)
    before, _ = _both(store, view, "T", 0, 8)
    assert before is not None and len(before.records) == 8  # mapped now
    old = time.time() - 100 * 3600
    for path in (tmp_path / "commitlog").iterdir():
        os.utime(path, (old, old))
    retention = RetentionService(store.config, store.commit_log, store.queues, store.dispatch,
                                 used_ratio=lambda _: 0.1)
    assert retention.delete_expired() > 0
    after, store_after = _both(store, view, "T", 0, 8)
    assert store_after.status is GetMessageStatus.OFFSET_TOO_SMALL
    _same(after, store_after)
    low = store_after.next_offset
    _same(*_both(store, view, "T", low, 32))


def test_a_deleted_topic_is_not_readable_at_once(
        published: tuple[MessageStore, EndsPublisher, StoreReadView]) -> None:
    store, _, view = published
    _fill(store, "T", 10)
    assert view.get_encoded("T", 0, 0, 1, _encoder, 1024) is not None
    store.delete_topic("T")
    assert view.get_encoded("T", 0, 0, 1, _encoder, 1024) is None


def test_a_change_under_way_shows_in_the_sequence(
        published: tuple[MessageStore, EndsPublisher, StoreReadView]) -> None:
    """While the store changes other than by appending, the sequence is odd, and it moved
    once the change ended (a read made meanwhile is thrown away: app/server/read_workers/
    reads.py); changes that overlap keep it odd until the last ends."""
    _, publisher, view = published
    before = view.ends.change_sequence()
    assert before % 2 == 0
    with publisher.changing():
        assert view.ends.change_sequence() % 2 == 1
        with publisher.changing():
            pass
        assert view.ends.change_sequence() % 2 == 1
    after = view.ends.change_sequence()
    assert after % 2 == 0 and after > before


def test_ends_are_published_after_the_entries(
        published: tuple[MessageStore, EndsPublisher, StoreReadView]) -> None:
    """Every published max is one the store's queue had already reached: an entry a view
    finds below it is whole."""
    store, publisher, view = published
    seen: list[tuple[int, int]] = []
    publish = publisher.entries_written

    def checked(topic: str, queue_id: int, max_offset: int) -> None:
        queue = store.queues.get(topic, queue_id)
        assert queue is not None
        seen.append((max_offset, queue.max_queue_offset))
        publish(topic, queue_id, max_offset)

    store.arrivals.listener = checked
    _fill(store, "T", 50)
    assert seen and all(published_max <= written for published_max, written in seen)
    ends = view.ends.ends("T", 0)
    assert ends == QueueEnds(True, 0, 50)


def test_a_full_table_leaves_the_queue_unpublished(tmp_path: Path) -> None:
    writer = EndsWriter(tmp_path / "ends")
    reader = EndsReader(tmp_path / "ends")
    for queue_id in range(SLOTS_MAX):
        assert writer.publish("T", queue_id, QueueEnds(True, 0, queue_id))
    assert not writer.publish("U", 0, QueueEnds(True, 0, 1))
    assert reader.ends("T", SLOTS_MAX - 1) == QueueEnds(True, 0, SLOTS_MAX - 1)
    assert reader.ends("U", 0) is None
    reader.close()
    writer.close()

"""What a read worker answers (app/server/read_workers/reads.py), over a real store's files:
the broker's document for a plain read, and None (the broker answers) for what it must not
answer: a read made while the store changed, a long poll, a tag filter, a bad token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.api.routes.consume import ENCODERS, answer_document
from app.server.read_workers.reads import ReadLimits, WorkerReads
from store import Message, MessageStore
from store.property_names import PROPERTY_TAGS
from store.shared_reads.publisher import EndsPublisher
from store.shared_reads.read_view import StoreReadView
from tests.support.store import small_config, wait_dispatched

PATH = "/v1/topics/T/queues/0/messages"
TOKEN_HEADERS = [(b"authorization", b"Bearer t")]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[MessageStore, EndsPublisher, WorkerReads]]:
    store = MessageStore(small_config(tmp_path))
    store.start()
    publisher = EndsPublisher(tmp_path / "read_ends", store.queues, lambda _t, _q: True,
                              lambda: store.commit_log.min_offset)
    store.arrivals.listener = publisher.entries_written
    store.dispatch.changes.listener = publisher.changing
    view = StoreReadView(tmp_path, tmp_path / "read_ends", 1 << 20)
    for index in range(10):
        store.put_message(Message("T", f"m{index}".encode(), {PROPERTY_TAGS: "a"}, queue_id=0))
    wait_dispatched(store)
    yield store, publisher, WorkerReads(ReadLimits({"t": ["consume"]}, 1000), view)
    view.close()
    store.shutdown()
    publisher.close()


def test_a_plain_read_is_the_brokers_document(
        served: tuple[MessageStore, EndsPublisher, WorkerReads]) -> None:
    store, _, reads = served
    expected = answer_document("T", 0, store.get_encoded("T", 0, 2, 5, ENCODERS["utf8"], 1024))
    assert reads.answer(PATH, b"offset=2&max_messages=5&body_encoding=utf8",
                        TOKEN_HEADERS) == expected


def test_a_read_made_while_the_store_changes_is_left_to_the_broker(
        served: tuple[MessageStore, EndsPublisher, WorkerReads]) -> None:
    _, publisher, reads = served
    with publisher.changing():
        assert reads.answer(PATH, b"offset=0", TOKEN_HEADERS) is None
    assert reads.answer(PATH, b"offset=0", TOKEN_HEADERS) is not None


def test_a_change_during_the_read_throws_it_away(
        served: tuple[MessageStore, EndsPublisher, WorkerReads],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The seam: the store changes (a retention round) between the read and its answer."""
    _, publisher, reads = served
    view = reads._view  # noqa: SLF001 - the seam is the view's read
    read = view.get_encoded

    def read_then_change(*args: object, **kwargs: object) -> object:
        found = read(*args, **kwargs)  # type: ignore[arg-type]
        with publisher.changing():
            pass
        return found

    monkeypatch.setattr(view, "get_encoded", read_then_change)
    assert reads.answer(PATH, b"offset=0", TOKEN_HEADERS) is None


@pytest.mark.parametrize("query, headers", [
    (b"offset=10&wait_ms=500", TOKEN_HEADERS),  # would wait: a long poll
    (b"offset=0&tags=a", TOKEN_HEADERS),  # a tag filter
    (b"offset=-1", TOKEN_HEADERS),  # the broker's 400
    (b"offset=0", []),  # the broker's 401
    (b"offset=0", [(b"authorization", b"Bearer other")]),
])
def test_what_the_broker_answers_gets_none(
        served: tuple[MessageStore, EndsPublisher, WorkerReads], query: bytes,
        headers: list[tuple[bytes, bytes]]) -> None:
    _, _, reads = served
    assert reads.answer(PATH, query, headers) is None

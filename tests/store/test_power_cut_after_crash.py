"""A process crash keeps unflushed bytes in the page cache, and the restarted store recovers
them; they are still not on disk. A power cut after the restart must not lose what the
restarted store promised: its SYNC_FLUSH PUT_OKs and its checkpoint."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from store import FlushDiskType, Message, MessageStore, PutMessageStatus
from store.files import durability
from tests.support.power import DurableImage
from tests.support.store import SMALL_FILE_BYTES, wait_dispatched

BODY_BYTES = 3000
NO_TIMED_FLUSH = {"flush_interval_ms": 3_600_000, "flush_consume_queue_interval_ms": 3_600_000,
                  "default_queue_count": 1}


@pytest.fixture
def image() -> Iterator[DurableImage]:
    image = DurableImage()
    durability.add_listener(image)
    yield image
    durability.remove_listener(image)


def _put(store: MessageStore, bodies: list[bytes]) -> None:
    for body in bodies:
        result, done = store.put_message(Message("Cut", body))
        assert done.result(5) is PutMessageStatus.PUT_OK


def _bodies(store: MessageStore) -> list[bytes]:
    wait_dispatched(store)
    return [m.body for m in store.get_messages("Cut", 0, 0, 1000, 1 << 30).messages]


def _body(index: int) -> bytes:
    return bytes([index % 256]) * BODY_BYTES


def test_sync_flush_put_after_a_crash_restart_survives_a_power_cut(
    open_store: Callable[..., Any], image: DurableImage, tmp_path: Path
) -> None:
    """A SYNC_FLUSH PUT_OK answered after a crash restart survives a power cut: the records
    recovered from the page cache, in every file before it, were made durable at recovery."""
    store = open_store(**NO_TIMED_FLUSH)
    crashed = [_body(index) for index in range(SMALL_FILE_BYTES * 3 // 2 // BODY_BYTES)]
    _put(store, crashed)  # across a roll: the first file is full, nothing of it synced
    files = store.commit_log.files.files
    assert len(files) == 2 and files[0].flushed_position == 0
    store.halt()
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, default_queue_count=1)
    result, done = store.put_message(Message("Cut", b"acknowledged"))
    assert done.result(5) is PutMessageStatus.PUT_OK
    store.halt()
    image.cut(tmp_path)
    store = open_store(**NO_TIMED_FLUSH)
    assert store.recovery is not None
    assert store.recovery.end_offset >= result.commit_log_offset + result.wrote_bytes
    assert store.commit_log.read_record(result.commit_log_offset).body == b"acknowledged"
    assert _bodies(store) == [*crashed, b"acknowledged"]


def test_checkpoint_after_a_crash_restart_holds_after_a_power_cut(
    open_store: Callable[..., Any], image: DurableImage, tmp_path: Path
) -> None:
    """The checkpoint a restart writes after a crash claims the consume-queue entries it
    found in the page cache; after a power cut the queue still serves their messages."""
    store = open_store(**NO_TIMED_FLUSH)
    _put(store, [_body(0)])
    wait_dispatched(store)
    store.flush.checkpoint()  # entry 0 is durable, and the queue exists on disk
    _put(store, [_body(1), _body(2)])
    wait_dispatched(store)  # entries 1 and 2 are written, only to the page cache
    store.halt()
    store = open_store(**NO_TIMED_FLUSH)  # recovery checkpoints past entries 1 and 2
    assert _bodies(store) == [_body(0), _body(1), _body(2)]
    store.halt()
    image.cut(tmp_path)
    store = open_store(**NO_TIMED_FLUSH)
    assert _bodies(store) == [_body(0), _body(1), _body(2)]


def test_record_torn_inside_its_topic_is_cut_at_recovery(
    open_store: Callable[..., Any], tmp_path: Path
) -> None:
    """A record whose page was lost from inside its topic name (body and sizes intact, so
    the body CRC and the size checks pass) is a torn record: recovery cuts the log there."""
    store = open_store(**NO_TIMED_FLUSH)
    _put(store, [_body(0)])
    result, _ = store.put_message(Message("Torn", b"body"))
    store.halt()
    topic_at = result.commit_log_offset + 88 + len(b"body") + 1  # header, body, topic size
    with (tmp_path / "commitlog" / f"{0:020d}").open("r+b") as file:
        file.seek(topic_at + 2)
        file.write(bytes(2))  # "To\0\0": the page holding the rest of the name never arrived
    store = open_store(**NO_TIMED_FLUSH)
    assert store.recovery is not None
    assert store.recovery.end_offset == result.commit_log_offset
    assert _bodies(store) == [_body(0)]

"""The key index on a real store: lookups by key, collisions, many messages per key, rolled
files, and recovery (a crash, a damaged file, a deleted topic)."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

from store import Message, MessageStore
from store.index.index_file import ENTRY, HEADER_SIZE, SLOT, file_size_bytes
from tests.support.disk import RecordingDisk
from tests.support.store import small_config, wait_dispatched

SMALL_INDEX = {"key_index_slot_count": 16, "key_index_entries_per_file": 100}


def _put(store: MessageStore, topic: str, keys: str, body: bytes) -> int:
    result, _ = store.put_message(Message(topic, body, properties={"KEYS": keys}))
    assert result.status.value == "PUT_OK"
    return result.commit_log_offset


def _bodies(store: MessageStore, topic: str, key: str, count_max: int = 1024) -> list[bytes]:
    return [m.body for m in store.find_by_key(topic, key, count_max)]


def test_lookup_by_key_newest_first_and_bounded(
        open_store: Callable[..., MessageStore]) -> None:
    """Messages with a key come back newest first, only the topic's, at most count_max; a
    message with two keys is found by either."""
    store = open_store(**SMALL_INDEX)
    for index in range(5):
        _put(store, "Orders", f"order-{index % 2}", f"o{index}".encode())
    _put(store, "Orders", "a b", b"both")
    _put(store, "Other", "order-0", b"other topic")
    wait_dispatched(store)
    assert _bodies(store, "Orders", "order-0") == [b"o4", b"o2", b"o0"]
    assert _bodies(store, "Orders", "order-0", count_max=2) == [b"o4", b"o2"]
    assert _bodies(store, "Orders", "a") == _bodies(store, "Orders", "b") == [b"both"]
    assert _bodies(store, "Orders", "missing") == []


def test_time_range(open_store: Callable[..., MessageStore]) -> None:
    """Only messages stored in [begin, end) are answered."""
    store = open_store(**SMALL_INDEX)
    for index in range(3):
        _put(store, "Timed", "k", f"t{index}".encode())
    wait_dispatched(store)
    stamps = [m.store_timestamp_ms for m in store.find_by_key("Timed", "k", 10)]
    assert store.find_by_key("Timed", "k", 10, end_timestamp_ms=min(stamps)) == []
    after = store.find_by_key("Timed", "k", 10, begin_timestamp_ms=max(stamps))
    assert all(m.store_timestamp_ms == max(stamps) for m in after) and after


def test_hash_collisions_never_answer_another_message(
        open_store: Callable[..., MessageStore]) -> None:
    """With every key hashing alike, a lookup still answers only the messages whose key is
    the one asked for (each candidate record is read and checked)."""
    store = open_store(**SMALL_INDEX)
    store.key_index.hash_function = lambda topic, key: 7
    for index in range(30):
        _put(store, "Clash", f"key-{index % 3}", f"c{index}".encode())
    wait_dispatched(store)
    assert _bodies(store, "Clash", "key-1") == [f"c{i}".encode() for i in range(28, 0, -3)]


def test_a_key_on_many_messages_across_rolled_files(
        open_store: Callable[..., MessageStore]) -> None:
    """A key on 1,000 messages over ten rolled files answers the newest ones first, bounded
    by count_max, and all 1,000 when asked (at most 1,024)."""
    store = open_store(**SMALL_INDEX)
    for index in range(1000):
        _put(store, "Hot", "hot", str(index).encode())
    wait_dispatched(store)
    assert store.key_index.file_count >= 10
    assert _bodies(store, "Hot", "hot", 32) == [str(i).encode() for i in range(999, 967, -1)]
    assert len(_bodies(store, "Hot", "hot", 5000)) == 1000


def test_a_crash_rebuilds_what_the_index_had_not_flushed(
        open_store: Callable[..., MessageStore], tmp_path: Path) -> None:
    """After a crash (no flush, no checkpoint since the puts), the restarted store finds
    every message by key: the index is rebuilt from what its header says is covered."""
    store = open_store(**SMALL_INDEX)
    store.flush.checkpoint()
    for index in range(250):
        _put(store, "Crash", f"k{index % 5}", str(index).encode())
    wait_dispatched(store)
    store.halt()
    again = open_store(**SMALL_INDEX)
    assert len(_bodies(again, "Crash", "k3")) == 50
    assert _bodies(again, "Crash", "k3", 1) == [b"248"]


def test_a_damaged_index_file_is_rebuilt_not_trusted(
        open_store: Callable[..., MessageStore], tmp_path: Path) -> None:
    """A file whose entries go backwards in the log (damage: entry 10 names the first
    record again) is deleted at start and rebuilt from the commit log: lookups answer every
    message, none twice."""
    store = open_store(**SMALL_INDEX)
    for index in range(150):
        _put(store, "Torn", "k", str(index).encode())
    wait_dispatched(store)
    store.shutdown()
    first = sorted((tmp_path / "index").iterdir())[0]
    with first.open("r+b") as damaged:  # entry 10's commit-log offset: the first record's
        damaged.seek(HEADER_SIZE + 16 * SLOT.size + 10 * ENTRY.size + 8)
        damaged.write((0).to_bytes(8, "big"))
    again = open_store(**SMALL_INDEX)
    bodies = _bodies(again, "Torn", "k")
    assert bodies == [str(i).encode() for i in range(149, -1, -1)]


def test_a_torn_header_is_rebuilt(open_store: Callable[..., MessageStore],
                                  tmp_path: Path) -> None:
    """A file whose header is zeroed (torn) is not trusted either."""
    store = open_store(**SMALL_INDEX)
    for index in range(40):
        _put(store, "Head", "k", str(index).encode())
    wait_dispatched(store)
    store.shutdown()
    (only,) = (tmp_path / "index").iterdir()
    with only.open("r+b") as damaged:
        damaged.write(bytes(HEADER_SIZE))
    again = open_store(**SMALL_INDEX)
    assert len(_bodies(again, "Head", "k")) == 40


def test_a_deleted_topic_has_no_index_entries(
        open_store: Callable[..., MessageStore]) -> None:
    """After a topic is deleted its keys find nothing, also after a restart that redispatches
    the whole log; a new topic of the same name finds only its own messages."""
    store = open_store(**SMALL_INDEX)
    _put(store, "Old", "k", b"before")
    wait_dispatched(store)
    store.delete_topic("Old")
    assert _bodies(store, "Old", "k") == []
    _put(store, "Old", "k", b"after")
    wait_dispatched(store)
    assert _bodies(store, "Old", "k") == [b"after"]


class _NoRoomForIndexFiles(RecordingDisk):
    """Allocation of a key-index file fails with ENOSPC; everything else is done for real."""

    def allocate(self, fd: int, size_bytes: int) -> None:
        if size_bytes == file_size_bytes(16, 100):
            raise OSError(errno.ENOSPC, "No space left on device")
        super().allocate(fd, size_bytes)


def test_a_key_index_that_cannot_grow_does_not_stop_dispatch(tmp_path: Path) -> None:
    """When no index file can be made (a full disk), dispatch still writes the consume
    queues; the index error is kept and lookups answer nothing rather than failing."""
    store = MessageStore(small_config(tmp_path, **SMALL_INDEX), disk=_NoRoomForIndexFiles())
    store.start()
    try:
        for index in range(5):
            _put(store, "Full", "k", str(index).encode())
        wait_dispatched(store)
        read = store.get_messages("Full", 0, 0, 10).messages + store.get_messages(
            "Full", 1, 0, 10).messages + store.get_messages("Full", 2, 0, 10).messages \
            + store.get_messages("Full", 3, 0, 10).messages
        assert len(read) == 5
        assert store.dispatch.key_index_error is not None
        assert "ENOSPC" in store.dispatch.key_index_error or "No space" in \
            store.dispatch.key_index_error
        assert store.find_by_key("Full", "k", 10) == []
    finally:
        store.shutdown()

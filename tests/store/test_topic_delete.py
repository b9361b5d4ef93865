"""Deleting a topic in the store: queues gone, log kept, and no redispatch brings them back;
and the reset-by-time search over a queue."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from store import Message, MessageStore
from tests.support.store import wait_dispatched


def _put(store: MessageStore, topic: str, count: int, queue_id: int = 0) -> None:
    for index in range(count):
        result, _ = store.put_message(Message(topic, f"{topic}-{index}".encode(),
                                              queue_id=queue_id))
        assert result.status.value == "PUT_OK"


def test_delete_removes_queues_and_keeps_the_log(
        open_store: Callable[..., MessageStore], tmp_path: Path) -> None:
    """After delete_topic the topic's queues and directory are gone, the commit log is as it
    was, other topics keep theirs, and a new topic of that name starts at queue offset 0."""
    store = open_store()
    _put(store, "Gone", 5)
    _put(store, "Kept", 3)
    wait_dispatched(store)
    max_offset = store.max_offset
    assert store.delete_topic("Gone") == 1
    assert store.queues.get("Gone", 0) is None
    assert not (tmp_path / "consumequeue" / "Gone").exists()
    assert store.max_offset == max_offset
    assert store.queue_offset_range("Kept", 0) == (0, 3)
    result, _ = store.put_message(Message("Gone", b"again", queue_id=0))
    assert result.queue_offset == 0
    wait_dispatched(store)
    read = store.get_messages("Gone", 0, 0, 10)
    assert [m.body for m in read.messages] == [b"again"]


def test_a_full_redispatch_after_a_crash_does_not_rebuild_a_deleted_topic(
        open_store: Callable[..., MessageStore], tmp_path: Path) -> None:
    """A crash after the delete, with the checkpoint lost so that recovery redispatches the
    whole log, leaves the deleted topic without queues: its tombstone was durable first."""
    store = open_store()
    _put(store, "Dead", 4)
    _put(store, "Alive", 2)
    wait_dispatched(store)
    store.delete_topic("Dead")
    store.halt()
    (tmp_path / "checkpoint").unlink(missing_ok=True)
    again = open_store()
    assert again.recovery is not None and not again.recovery.checkpoint_used
    assert again.queues.get("Dead", 0) is None
    assert again.queue_offset_range("Alive", 0) == (0, 2)
    result, _ = again.put_message(Message("Dead", b"reborn", queue_id=0))
    assert result.queue_offset == 0


def test_offset_at_time_is_the_first_message_stored_at_or_after_it(
        open_store: Callable[..., MessageStore]) -> None:
    """For each store time t in a queue, the offset found for t is the first message stored
    at or after t; before every message it is the min offset, after all the max offset."""
    store = open_store()
    times: list[int] = []
    for index in range(2000):  # until the messages span a few milliseconds
        result, _ = store.put_message(Message("Times", str(index).encode(), queue_id=0))
        assert result.status.value == "PUT_OK"
        if len(set(times)) >= 4 and index >= 20:
            break
        wait_dispatched(store)
        (message,) = store.get_messages("Times", 0, index, 1).messages
        times.append(message.store_timestamp_ms)
    wait_dispatched(store)
    stored = [m.store_timestamp_ms for m in store.get_messages("Times", 0, 0, 1024).messages]
    assert len(set(stored)) >= 4
    for stamp in sorted(set(stored)):
        expected = next(i for i, t in enumerate(stored) if t >= stamp)
        assert store.queue_offset_at_time("Times", 0, stamp) == expected
    assert store.queue_offset_at_time("Times", 0, stored[0] - 1) == 0
    assert store.queue_offset_at_time("Times", 0, stored[-1] + 1) == len(stored)
    assert store.queue_offset_at_time("Nothing", 0, 0) is None


def _delete_record(store: MessageStore, topic: str) -> int:
    """A topic-delete record (as the metadata layer writes one); returns its offset."""
    from app.broker.metadata_log import record_of
    from store.metadata.log_records import TopicDelete
    result, _ = store.put_system_message(record_of(TopicDelete(topic, 1)))
    assert result.status.value == "PUT_OK"
    wait_dispatched(store)
    return result.commit_log_offset


def test_a_cut_that_removes_a_delete_revives_the_topic_on_the_slave(
        open_store: Callable[..., MessageStore], tmp_path: Path) -> None:
    """A slave dispatched a delete of T, which its new master never had: cut back below the
    delete, the slave serves T's messages at their queue offsets again (as its new master
    does), and the next delete record still works."""
    from store import BrokerRole
    master = open_store(data_dir=tmp_path / "master")
    slave = open_store(data_dir=tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    _put(master, "T", 3)
    agreed = master.max_offset
    _delete_record(master, "T")
    _put(master, "T", 1)  # the next incarnation's first message, at queue offset 0
    assert slave.append_raw(0, master.commit_log.read_bytes(0, master.max_offset)).value == "OK"
    wait_dispatched(slave)
    assert [m.body for m in slave.get_messages("T", 0, 0, 10).messages] == [b"T-0"]
    slave.truncate_log(agreed)
    assert [m.body for m in slave.get_messages("T", 0, 0, 10).messages] == \
        [b"T-0", b"T-1", b"T-2"]
    assert slave.tombstones.dead_below("T") == 0


def test_recovery_revives_a_topic_whose_delete_the_log_lost(
        open_store: Callable[..., MessageStore], tmp_path: Path) -> None:
    """The delete's tombstone is durable before its record is (a power cut between): the log
    the store recovers ends before the delete, so T's messages are served again."""
    store = open_store()
    _put(store, "T", 3)
    kept = store.max_offset
    _delete_record(store, "T")
    assert store.get_messages("T", 0, 0, 10).messages == []
    store.halt()
    first = min((tmp_path / "commitlog").iterdir())
    with open(first, "r+b") as log_file:  # the delete record's bytes never reached the disk
        log_file.seek(kept)
        log_file.write(bytes(4096))
    (tmp_path / "checkpoint").unlink(missing_ok=True)
    again = open_store()
    assert again.max_offset == kept
    assert [m.body for m in again.get_messages("T", 0, 0, 10).messages] == \
        [b"T-0", b"T-1", b"T-2"]

"""Metadata records in the commit log: a topic delete applies on every replica in log order,
and the metadata layer gets every record once, in order, live or caught up after a start."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from store import BrokerRole, Message, MessageStore, PutMessageStatus
from store.dispatch import SystemRecord
from store.system_topics import METADATA_TOPIC, OP_TOPIC_DELETE, PROPERTY_OP, PROPERTY_SUBJECT_TOPIC
from tests.support.store import wait_dispatched


def _delete_record(topic: str) -> Message:
    return Message(METADATA_TOPIC, b'{"op": "topic.delete"}', queue_id=0,
                   properties={PROPERTY_OP: OP_TOPIC_DELETE, PROPERTY_SUBJECT_TOPIC: topic})


def _note(body: bytes) -> Message:
    return Message(METADATA_TOPIC, body, queue_id=0, properties={PROPERTY_OP: "note"})


def _bodies(store: MessageStore, topic: str) -> list[tuple[int, bytes]]:
    low, high = store.queue_offset_range(topic, 0) or (0, 0)
    result = store.get_messages(topic, 0, low, 1000)
    return [(message.queue_offset, message.body) for message in result.messages]


def _replicate(master: MessageStore, slave: MessageStore) -> None:
    data = master.commit_log.read_bytes(slave.max_offset, master.max_offset)
    assert slave.append_raw(slave.max_offset, data).name == "OK"


def _put(store: MessageStore, topic: str, body: bytes) -> int:
    result, _ = store.put_message(Message(topic, body, queue_id=0))
    assert result.status is PutMessageStatus.PUT_OK
    return result.queue_offset


def test_a_re_created_topic_starts_at_zero_on_the_master_and_on_a_slave(
        open_store: Callable[..., MessageStore], tmp_path: Path) -> None:
    master = open_store(data_dir=tmp_path / "master", default_queue_count=1)
    slave = open_store(data_dir=tmp_path / "slave", default_queue_count=1,
                       broker_role=BrokerRole.SLAVE)
    for number in range(4):
        _put(master, "D", b"old-%d" % number)
    result, _ = master.put_system_message(_delete_record("D"))
    assert result.status is PutMessageStatus.PUT_OK
    assert [_put(master, "D", b"new-%d" % number) for number in range(2)] == [0, 1]
    _replicate(master, slave)
    for store in (master, slave):
        wait_dispatched(store)
        assert _bodies(store, "D") == [(0, b"new-0"), (1, b"new-1")]
        assert store.find_by_key("D", "anything", 10) == []
    # after a restart (recovery redispatches), still the new incarnation only
    master.shutdown()
    again = open_store(data_dir=tmp_path / "master", default_queue_count=1)
    wait_dispatched(again)
    assert _bodies(again, "D") == [(0, b"new-0"), (1, b"new-1")]
    assert _put(again, "D", b"new-2") == 2


def test_records_reach_the_handler_once_in_order_live_and_caught_up(
        open_store: Callable[..., MessageStore], tmp_path: Path) -> None:
    store = open_store(default_queue_count=1)
    for number in range(3):
        store.put_system_message(_note(b"early-%d" % number))
        _put(store, "T", b"user")
    wait_dispatched(store)
    seen: list[SystemRecord] = []
    assert store.attach_system_records(seen.append, from_queue_offset=1) == 2
    assert [record.body for record in seen] == [b"early-1", b"early-2"]
    result, _ = store.put_system_message(_note(b"live"))
    assert store.wait_dispatched(result.commit_log_offset + result.wrote_bytes,
                                 5000).wait(5.0) is PutMessageStatus.PUT_OK
    assert [record.body for record in seen] == [b"early-1", b"early-2", b"live"]
    assert [record.queue_offset for record in seen] == [1, 2, 3]
    assert all(record.op == "note" for record in seen)
    assert seen[-1].commit_log_offset == result.commit_log_offset


def test_a_failing_handler_holds_dispatch_at_the_record_until_it_applies(
        open_store: Callable[..., MessageStore]) -> None:
    store = open_store(default_queue_count=1)
    failures = [2]
    applied: list[bytes] = []

    def flaky(record: SystemRecord) -> None:
        if failures[0]:
            failures[0] -= 1
            raise RuntimeError("database busy")
        applied.append(record.body)

    store.attach_system_records(flaky, from_queue_offset=0)
    result, _ = store.put_system_message(_note(b"once"))
    _put(store, "T", b"after")
    wait_dispatched(store, timeout_s=10.0)
    assert applied == [b"once"]
    assert _bodies(store, "T") == [(0, b"after")]


def test_a_slave_refuses_a_system_record(open_store: Callable[..., MessageStore]) -> None:
    slave = open_store(broker_role=BrokerRole.SLAVE)
    result, _ = slave.put_system_message(_note(b"x"))
    assert result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_a_run_of_records_failing_midway_keeps_the_ones_before_and_retries_from_it(
        open_store: Callable[..., MessageStore]) -> None:
    """Metadata records appended together are dispatched as one batch: when the third one's
    apply fails, the two before it are applied once and indexed, and dispatch stays at the
    third until it applies; the user record after the run waits for it."""
    store = open_store(default_queue_count=1)
    failures = [1]
    applied: list[bytes] = []

    def flaky_third(record: SystemRecord) -> None:
        if record.body == b"run-2" and failures[0]:
            failures[0] -= 1
            raise RuntimeError("database busy")
        applied.append(record.body)

    store.attach_system_records(flaky_third, from_queue_offset=0)

    def append_run() -> int:
        for number in range(5):
            store.put_system_message(_note(b"run-%d" % number))
        return _put(store, "T", b"after")

    store.dispatch.hold_still(append_run)  # the run waits whole for dispatch
    wait_dispatched(store, timeout_s=10.0)
    assert applied == [b"run-%d" % number for number in range(5)]
    assert _bodies(store, METADATA_TOPIC) == [(number, b"run-%d" % number)
                                              for number in range(5)]
    assert _bodies(store, "T") == [(0, b"after")]
    assert store.dispatch.error_count == 1


def test_records_applied_ahead_wake_replication_not_dispatch_and_are_dispatched(
        open_store: Callable[..., MessageStore], monkeypatch: pytest.MonkeyPatch) -> None:
    """A pop decision's records (applied by their writer) wake the replication listeners but
    not the parked dispatch thread: it takes them at its idle round. Others wake it."""
    store = open_store()
    wakes, appends = [], []
    monkeypatch.setattr(store, "_wake_dispatch", lambda: wakes.append(1))
    store.add_append_listener(lambda: appends.append(1))
    results = store.put_system_messages([_note(b"ahead")], applied_ahead=True)
    assert results[0][0].status is PutMessageStatus.PUT_OK
    assert (wakes, appends) == ([], [1])
    wait_dispatched(store)  # the dispatch thread's idle round, woken by nobody
    assert _bodies(store, METADATA_TOPIC)[-1][1] == b"ahead"
    store.put_system_messages([_note(b"plain")])
    assert (wakes, appends) == ([1], [1, 1])

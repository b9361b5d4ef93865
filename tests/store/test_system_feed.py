"""The metadata tables never keep what the log lost (store/system_feed.py), on real stores and
the real MetadataStore: a slave cut back to agree with a new master, and tables that applied
a record their log no longer holds (a power cut took it) when the store starts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from app.broker.metadata_log import record_of
from store import BrokerRole, Message, MessageStore, PutMessageStatus
from store.metadata import MetadataStore
from store.metadata.log_records import OffsetSet, TopicDelete, TopicPut
from store.status import AppendRawStatus
from tests.support.store import wait_dispatched

OpenStore = Callable[[str, BrokerRole], MessageStore]


@pytest.fixture
def opened(open_store: Callable[..., MessageStore], tmp_path: Path) -> OpenStore:
    def open_named(name: str, role: BrokerRole) -> MessageStore:
        return open_store(data_dir=tmp_path / name, broker_role=role)

    return open_named


def _put(store: MessageStore, change: TopicPut | TopicDelete | OffsetSet) -> None:
    result, _ = store.put_system_message(record_of(change))
    assert result.status is PutMessageStatus.PUT_OK
    wait_dispatched(store)


def _attach(store: MessageStore, metadata: MetadataStore) -> int:
    applied = metadata.log_position
    return store.attach_system_records(metadata.apply_record, applied.queue_offset,
                                       applied.commit_log_offset,
                                       reset=metadata.reset_applied_state)


def _masters_sharing_a(opened: OpenStore) -> tuple[MessageStore, MessageStore, int]:
    """An old master whose log holds topic A's record, and a new one (its other slave,
    promoted) holding the same bytes; and where they end."""
    old = opened("old", BrokerRole.ASYNC_MASTER)
    new = opened("new", BrokerRole.SLAVE)
    _put(old, TopicPut("A", 4, 4, 6, 1, 1))
    agreed = old.max_offset
    assert new.append_raw(0, old.commit_log.read_bytes(0, agreed)) is AppendRawStatus.OK
    new.change_role(BrokerRole.ASYNC_MASTER)
    return old, new, agreed


def _topics(metadata: MetadataStore) -> set[str]:
    return {topic.name for topic in metadata.list_topics()}


def test_a_slave_cut_back_to_its_new_master_holds_that_masters_tables(
        opened: OpenStore, metadata: MetadataStore) -> None:
    """The slave applied the old master's records (A, OLD_ONLY, a delete of A and an offset);
    the new master shares only A's, then writes NEW_ONLY. Cut back and streamed the new
    master's log, the slave's tables are what that log says: A and NEW_ONLY, no offset."""
    old, new, agreed = _masters_sharing_a(opened)
    slave = opened("slave", BrokerRole.SLAVE)
    _attach(slave, metadata)
    _put(old, TopicPut("OLD_ONLY", 4, 4, 6, 2, 2))
    _put(old, OffsetSet("g", "OLD_ONLY", 0, 7, False, 3))
    _put(old, TopicDelete("A", 4))
    _put(new, TopicPut("NEW_ONLY", 4, 4, 6, 3, 3))
    assert slave.append_raw(0, old.commit_log.read_bytes(0, old.max_offset)) is \
        AppendRawStatus.OK
    wait_dispatched(slave)
    assert _topics(metadata) == {"OLD_ONLY"}
    metadata.flush_consumer_offsets()
    assert [offset.topic for offset in metadata.list_consumer_offsets()] == ["OLD_ONLY"]
    slave.truncate_log(agreed)  # where it agrees with the new master (ha/client.py)
    assert _topics(metadata) == {"A"}
    new_log = new.commit_log.read_bytes(0, new.max_offset)
    assert slave.append_raw(agreed, new_log[agreed:]) is AppendRawStatus.OK
    wait_dispatched(slave)
    assert _topics(metadata) == {"A", "NEW_ONLY"}
    metadata.flush_consumer_offsets()
    assert metadata.list_consumer_offsets() == []
    assert slave.system_feed.rebuild_count == 1


def test_a_cut_above_every_applied_record_rebuilds_nothing(
        opened: OpenStore, metadata: MetadataStore) -> None:
    """A cut that removes only user messages leaves the tables alone (no rebuild)."""
    master = opened("master", BrokerRole.ASYNC_MASTER)
    slave = opened("slave", BrokerRole.SLAVE)
    _attach(slave, metadata)
    _put(master, TopicPut("A", 4, 4, 6, 1, 1))
    kept = master.max_offset
    master.put_message(Message("A", b"user message", queue_id=0))
    assert slave.append_raw(0, master.commit_log.read_bytes(0, master.max_offset)) is \
        AppendRawStatus.OK
    wait_dispatched(slave)
    slave.truncate_log(kept)
    assert _topics(metadata) == {"A"} and slave.system_feed.rebuild_count == 0


def test_tables_ahead_of_their_log_at_start_are_rebuilt(
        opened: OpenStore, metadata: MetadataStore) -> None:
    """The tables applied A then B; the log the broker starts with holds only A's record (a
    power cut took B's, which was not flushed): attaching rebuilds the tables to {A}."""
    before = opened("before", BrokerRole.ASYNC_MASTER)
    _attach(before, metadata)
    _put(before, TopicPut("A", 4, 4, 6, 1, 1))
    only_a = before.max_offset
    _put(before, TopicPut("B", 4, 4, 6, 2, 2))
    assert _topics(metadata) == {"A", "B"}
    before.detach_system_records()
    after = opened("after", BrokerRole.SLAVE)  # the same log, without B's record
    assert after.append_raw(0, before.commit_log.read_bytes(0, only_a)) is AppendRawStatus.OK
    wait_dispatched(after)
    assert _attach(after, metadata) == 1
    assert _topics(metadata) == {"A"} and after.system_feed.rebuild_count == 1
    assert metadata.log_position.queue_offset == 1


def test_a_slave_started_with_its_tables_caught_up_follows_a_cut_below_them(
        opened: OpenStore, metadata: MetadataStore) -> None:
    """The classic simulation's seed 0 (after the feed): the slave's tables applied A and
    OLD_ONLY, then it started again with nothing left to catch up (no record handed since the
    start). The new master shares only A's record: cut back to it and streamed the new
    master's, the slave's tables must be A and NEW_ONLY, as its log says."""
    old, new, agreed = _masters_sharing_a(opened)
    first = opened("slave", BrokerRole.SLAVE)
    _attach(first, metadata)
    _put(old, TopicPut("OLD_ONLY", 4, 4, 6, 2, 2))
    _put(new, TopicPut("NEW_ONLY", 4, 4, 6, 3, 3))
    assert first.append_raw(0, old.commit_log.read_bytes(0, old.max_offset)) is \
        AppendRawStatus.OK
    wait_dispatched(first)
    metadata.flush_consumer_offsets()  # the position as the periodic flush persists it
    first.detach_system_records()
    first.shutdown()
    slave = opened("slave", BrokerRole.SLAVE)  # the same data directory, started again
    assert _attach(slave, metadata) == 0
    assert _topics(metadata) == {"A", "OLD_ONLY"}
    slave.truncate_log(agreed)
    new_log = new.commit_log.read_bytes(0, new.max_offset)
    assert slave.append_raw(agreed, new_log[agreed:]) is AppendRawStatus.OK
    wait_dispatched(slave)
    assert _topics(metadata) == {"A", "NEW_ONLY"}


def test_a_wait_for_dispatch_past_a_cut_waits_until_dispatch_gets_there_again(
        opened: OpenStore) -> None:
    """After a cut, dispatch's waits for an end past it wait until dispatch passes that end
    again (old: answered at once, from the offset dispatch had reached before the cut)."""
    master = opened("master", BrokerRole.ASYNC_MASTER)
    _put(master, TopicPut("A", 4, 4, 6, 1, 1))
    cut = master.max_offset
    _put(master, TopicPut("B", 4, 4, 6, 2, 2))
    end = master.max_offset
    slave = opened("slave", BrokerRole.SLAVE)
    first = slave.wait_dispatched(end, 60_000)  # a waiter: the waits note how far dispatch got
    assert slave.append_raw(0, master.commit_log.read_bytes(0, end)) is AppendRawStatus.OK
    assert first.wait(10) is PutMessageStatus.PUT_OK
    slave.truncate_log(cut)
    pending = slave.wait_dispatched(end, 60_000)
    assert not pending.done()
    assert slave.append_raw(cut, master.commit_log.read_bytes(cut, end)) is AppendRawStatus.OK
    assert pending.wait(10) is PutMessageStatus.PUT_OK

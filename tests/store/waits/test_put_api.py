from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from store import (
    BrokerRole,
    FlushDiskType,
    Lifecycle,
    Message,
    MessageStore,
    PutMessageStatus,
    StoreStateError,
)
from store.waits.completion import PutCompletion
from store.waits.offset_waits import OffsetWaits
from tests.support.stalled_flush import stalled_flush
from tests.support.store import small_config, wait_dispatched

OpenStore = Callable[..., MessageStore]


def test_async_flush_answers_done(open_store: OpenStore) -> None:
    """Under ASYNC_FLUSH with no replication, a put's completion is done at once."""
    store = open_store()
    _, done = store.put_message(Message("A", b"x"))
    assert done.is_done and done.result() is PutMessageStatus.PUT_OK


def test_sync_flush_group_commit(open_store: OpenStore) -> None:
    """Many concurrent SYNC_FLUSH puts are served by far fewer flushes than puts."""
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)

    async def produce() -> list[PutMessageStatus]:
        completions = [store.put_message(Message("G", b"m%d" % i))[1] for i in range(2000)]
        return list(await asyncio.gather(*[_await(c) for c in completions]))

    statuses = asyncio.run(produce())
    assert statuses == [PutMessageStatus.PUT_OK] * 2000
    assert store.commit_log.flushed_offset == store.max_offset
    assert 1 <= store.flush.fsync_count < 200


async def _await(completion: object) -> PutMessageStatus:
    return await completion  # type: ignore[no-any-return,misc]


def test_flush_disk_timeout_while_fsync_is_stuck(open_store: OpenStore) -> None:
    """A flush that hangs past the deadline answers FLUSH_DISK_TIMEOUT on time; the message
    itself is stored."""
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=200)
    with stalled_flush(store):
        started = time.monotonic()
        result, done = store.put_message(Message("S", b"slow disk"))
        status = done.result(5)
        elapsed_s = time.monotonic() - started
    assert status is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert status.is_stored and result.commit_log_offset == 0
    # At the deadline, not at the end of the stall (STALL_MAX_S); the upper bound leaves
    # room for a loaded 2-core machine.
    assert 0.15 < elapsed_s < 3.0


def test_pending_puts_are_bounded(open_store: OpenStore) -> None:
    """Past max_pending_puts a put is refused with OS_PAGE_CACHE_BUSY and not written."""
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, max_pending_puts=3)
    store.flush.stop()  # nothing completes the waits now
    statuses = [store.put_message(Message("B", b"x"))[0].status for _ in range(5)]
    assert statuses == [PutMessageStatus.PUT_OK] * 3 + [PutMessageStatus.OS_PAGE_CACHE_BUSY] * 2
    assert store.commit_log.read_record(0).body == b"x"
    max_offset = store.max_offset
    store.put_message(Message("B", b"y"))
    assert store.max_offset == max_offset
    store.flush.start()


class FakeReplication:
    """A replication guard driven by the test."""

    def __init__(self, slave_ok: bool) -> None:
        self.slave_ok = slave_ok
        self.waits = OffsetWaits(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    def replication_completion(self, end_offset: int) -> PutCompletion:
        if not self.slave_ok:
            return PutCompletion.done(PutMessageStatus.SLAVE_NOT_AVAILABLE)
        return PutCompletion(pending=self.waits.add(
            end_offset, deadline_ms=time.monotonic_ns() // 10**6 + 10_000))

    @property
    def pending_count(self) -> int:
        return len(self.waits)


def test_sync_master_waits_for_the_slave(open_store: OpenStore) -> None:
    """A SYNC_MASTER put completes when replication reaches its end offset, not before."""
    store = open_store(broker_role=BrokerRole.SYNC_MASTER)
    guard = FakeReplication(slave_ok=True)
    store.set_replication(guard)
    first, first_done = store.put_message(Message("M", b"one"))
    second, second_done = store.put_message(Message("M", b"two"))
    assert not first_done.is_done and not second_done.is_done
    guard.waits.advance(first.end_offset)
    assert first_done.result(1) is PutMessageStatus.PUT_OK
    assert not second_done.is_done
    guard.waits.advance(second.end_offset)
    assert second_done.result(1) is PutMessageStatus.PUT_OK


def test_replication_status_wins_over_flush(open_store: OpenStore) -> None:
    """SLAVE_NOT_AVAILABLE wins over a flush that went fine (RocketMQ's order)."""
    store = open_store(broker_role=BrokerRole.SYNC_MASTER,
                       flush_disk_type=FlushDiskType.SYNC_FLUSH)
    store.set_replication(FakeReplication(slave_ok=False))
    result, done = store.put_message(Message("M", b"x"))
    assert result.status is PutMessageStatus.PUT_OK
    assert done.result(5) is PutMessageStatus.SLAVE_NOT_AVAILABLE


def test_async_master_never_waits_for_a_slave(open_store: OpenStore) -> None:
    """ASYNC_MASTER ignores the replication guard."""
    store = open_store(broker_role=BrokerRole.ASYNC_MASTER)
    store.set_replication(FakeReplication(slave_ok=False))
    _, done = store.put_message(Message("M", b"x"))
    assert done.result() is PutMessageStatus.PUT_OK


def test_lifecycle_misuse_is_refused(open_store: OpenStore) -> None:
    """Start twice, or put after stop, is refused clearly."""
    store = open_store()
    with pytest.raises(StoreStateError, match="RUNNING"):
        store.start()
    store.shutdown()
    assert store.state is Lifecycle.STOPPED
    assert store.put_message(Message("A", b"x"))[0].status is (
        PutMessageStatus.SERVICE_NOT_AVAILABLE)
    with pytest.raises(StoreStateError):
        store.shutdown()


def test_read_heads_are_the_records_without_bodies(tmp_path: Path) -> None:
    """read_heads answers the same offsets, keys and properties as get_messages, in queue
    order from the offset asked, at most max_count, and nothing past the queue's end."""
    store = MessageStore(small_config(tmp_path))
    store.start()
    try:
        for index in range(5):
            store.put_message(Message("T", b"x" * 100, {"n": str(index)}, queue_id=0))
        wait_dispatched(store)
        heads = store.read_heads("T", 0, 1, 3)
        messages = store.get_messages("T", 0, 1, 3).messages
        assert [(h.queue_offset, h.commit_log_offset, h.properties, h.msg_id, h.total_size)
                for h in heads] == [(m.queue_offset, m.commit_log_offset, m.properties,
                                     m.msg_id, m.total_size) for m in messages]
        assert [h.queue_offset for h in store.read_heads("T", 0, 3, 10)] == [3, 4]
        assert store.read_heads("T", 0, 5, 10) == [] and store.read_heads("T", 1, 0, 10) == []
    finally:
        store.shutdown()


def test_read_heads_with_a_property_decode_only_the_messages_that_may_carry_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """read_heads(property_name=K) answers the heads of the messages carrying K, in queue order
    across files, as read_heads does, and passes over the others without decoding their
    properties: a body holding K's encoded name is not a match, and a message without K costs
    no property decode (what makes a start's idempotency refill cheap)."""
    from store import record as record_module

    store = MessageStore(small_config(tmp_path))
    store.start()
    try:
        marker = b"K\x01"
        for index in range(40):
            properties = {"K": f"v{index}"} if index % 7 == 3 else {"other": "K"}
            store.put_message(Message("T", b"body K" + marker * 3, properties, queue_id=0))
        wait_dispatched(store)
        decoded: list[int] = []
        real_decode = record_module.decode_properties

        def counting_decode(raw: bytes | memoryview) -> dict[str, str]:
            decoded.append(1)
            return real_decode(raw)

        monkeypatch.setattr(record_module, "decode_properties", counting_decode)
        heads = store.read_heads("T", 0, 0, 40, property_name="K")
        assert [h.queue_offset for h in heads] == [3, 10, 17, 24, 31, 38]
        assert [h.properties["K"] for h in heads] == ["v3", "v10", "v17", "v24", "v31", "v38"]
        assert len(decoded) == len(heads)
        assert [h.properties for h in heads] == [
            h.properties for h in store.read_heads("T", 0, 0, 40) if "K" in h.properties]
    finally:
        store.shutdown()

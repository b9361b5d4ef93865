"""SYNC_MASTER against real HA with a slave that is connected and acking but behind: a
scripted slave receives every byte and acks at most what the test lets through. What PUT_OK
promises (a slave acknowledged the message's end offset) and the other outcomes of a pending
wait."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from ha.service import HAService
from store import BrokerRole, FlushDiskType, Message, PutMessageStatus
from store.waits.completion import PutCompletion
from tests.support.ha import FAST_HA, Node
from tests.support.lagging_slave import LaggingSlave
from tests.support.stalled_flush import stalled_flush
from tests.support.store import wait_until

StartNode = Callable[..., Node]
# Long enough that no wait in these tests ends by its deadline unless the test wants it to.
LONG_SLAVE_TIMEOUT_MS = 20_000
SHORT_SLAVE_TIMEOUT_MS = 500


class LaggingPair:
    def __init__(self, master: Node, slave: LaggingSlave) -> None:
        self.master = master
        self.slave = slave

    @property
    def service(self) -> HAService:
        service = self.master.replication.service
        assert service is not None
        return service

    def master_heard(self, offset: int) -> bool:
        """The master's one connection holds exactly `offset` as the slave's ack."""
        return [c.ack_offset for c in self.service.connections] == [offset]

    def received(self, offset: int) -> bool:
        assert self.slave.error is None, self.slave.error
        return self.slave.received_offset >= offset

    def put(self, body: bytes) -> tuple[int, PutCompletion]:
        result, done = self.master.store.put_message(Message("Lag", body))
        assert result.status is PutMessageStatus.PUT_OK
        return result.commit_log_offset + result.wrote_bytes, done


@pytest.fixture
def lagging_pair(start_node: StartNode) -> Iterator[Callable[..., LaggingPair]]:
    slaves: list[LaggingSlave] = []

    def start(slave_timeout_ms: int = LONG_SLAVE_TIMEOUT_MS,
              store_overrides: dict[str, object] | None = None,
              **master_overrides: object) -> LaggingPair:
        master = start_node("master", BrokerRole.SYNC_MASTER, store_overrides,
                            slave_timeout_ms=slave_timeout_ms, **master_overrides)
        slave = LaggingSlave(master.ha_port, FAST_HA["ha_secret"])
        slaves.append(slave)
        pair = LaggingPair(master, slave)
        wait_until(lambda: pair.service.is_slave_ok(0))
        return pair

    yield start
    for slave in slaves:
        slave.close()


def test_slave_holding_the_message_but_not_acking_it_times_out(
        lagging_pair: Callable[..., LaggingPair]) -> None:
    """A slave that receives the message and keeps acking an older offset gives
    FLUSH_SLAVE_TIMEOUT: PUT_OK needs the slave's ack of the end offset, not the log's end."""
    pair = lagging_pair(slave_timeout_ms=SHORT_SLAVE_TIMEOUT_MS)
    end_offset, done = pair.put(b"held but not acked")
    assert pair.service.is_slave_ok(end_offset)  # connected, in sync, eligible
    wait_until(lambda: pair.received(end_offset))  # the slave has it, and acks 0
    assert done.result(10) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    assert pair.master_heard(0)


def test_put_completes_at_its_end_offset_not_before(
        lagging_pair: Callable[..., LaggingPair]) -> None:
    """With acks let through step by step, a wait stays pending while the ack is one byte
    short of its end offset, and completes PUT_OK once the ack reaches it; a later put stays
    pending until its own end offset is acknowledged."""
    pair = lagging_pair()
    first_end, first = pair.put(b"first")
    second_end, second = pair.put(b"second")
    wait_until(lambda: pair.received(second_end))
    pair.slave.raise_to(first_end - 1)
    wait_until(lambda: pair.master_heard(first_end - 1))
    assert not first.is_done and not second.is_done
    pair.slave.raise_to(first_end)
    assert first.result(10) is PutMessageStatus.PUT_OK
    assert pair.master_heard(first_end) and not second.is_done
    pair.slave.raise_to(second_end - 1)
    wait_until(lambda: pair.master_heard(second_end - 1))
    assert not second.is_done
    pair.slave.raise_to(second_end)
    assert second.result(10) is PutMessageStatus.PUT_OK


def test_pending_replication_waits_are_bounded(
        lagging_pair: Callable[..., LaggingPair]) -> None:
    """Past max_pending_puts waiting for the slave, a put is refused with OS_PAGE_CACHE_BUSY
    and not written; once the acks arrive the waits complete and puts are taken again."""
    pair = lagging_pair(store_overrides={"max_pending_puts": 3})
    waiting = [pair.put(b"w%d" % index) for index in range(3)]
    max_offset = pair.master.store.max_offset
    refused, done = pair.master.store.put_message(Message("Lag", b"one too many"))
    assert refused.status is PutMessageStatus.OS_PAGE_CACHE_BUSY
    assert done.result(0) is PutMessageStatus.OS_PAGE_CACHE_BUSY
    assert pair.master.store.max_offset == max_offset
    assert pair.service.pending_count == 3
    pair.slave.raise_to(max_offset)
    assert {done.result(10) for _, done in waiting} == {PutMessageStatus.PUT_OK}
    _, accepted = pair.put(b"room again")
    pair.slave.raise_to(pair.master.store.max_offset)
    assert accepted.result(10) is PutMessageStatus.PUT_OK


def test_stopping_with_waits_pending_answers_each_of_them(
        lagging_pair: Callable[..., LaggingPair]) -> None:
    """Stopping replication while puts wait for acks gives every one of them
    FLUSH_SLAVE_TIMEOUT at once, long before their deadline; none hangs."""
    pair = lagging_pair()
    waiting = [pair.put(b"p%d" % index)[1] for index in range(5)]
    assert pair.service.pending_count == 5
    started = time.monotonic()
    pair.master.replication.stop()
    statuses = [done.result(10) for done in waiting]
    elapsed_ms = (time.monotonic() - started) * 1000
    assert statuses == [PutMessageStatus.FLUSH_SLAVE_TIMEOUT] * 5
    assert elapsed_ms < LONG_SLAVE_TIMEOUT_MS / 4


def test_flush_disk_timeout_with_replication(start_node: StartNode) -> None:
    """SYNC_MASTER with SYNC_FLUSH and a stalled fsync: the slave acknowledges the message,
    and the put answers FLUSH_DISK_TIMEOUT (stored and replicated, not durable here)."""
    master = start_node("master", BrokerRole.SYNC_MASTER,
                        {"flush_disk_type": FlushDiskType.SYNC_FLUSH,
                         "sync_flush_timeout_ms": 300},
                        slave_timeout_ms=LONG_SLAVE_TIMEOUT_MS)
    slave = start_node("slave", BrokerRole.SLAVE,
                       ha_master_address=f"127.0.0.1:{master.ha_port}")
    service = master.replication.service
    assert service is not None
    wait_until(lambda: service.is_slave_ok(0))
    with stalled_flush(master.store):
        result, done = master.store.put_message(Message("Lag", b"replicated, not flushed"))
        end_offset = result.commit_log_offset + result.wrote_bytes
        assert done.result(10) is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert service.replicated_offset() >= end_offset
        assert slave.store.max_offset >= end_offset


from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from store import BrokerRole, Message, PutMessageStatus
from tests.support.ha import Node, wait_caught_up
from tests.support.store import wait_until
from tests.support.tcp_proxy import TcpProxy

StartNode = Callable[..., Node]
SLAVE_TIMEOUT_MS = 400
DEADLINE_SLACK_MS = 2000


@pytest.fixture
def proxy_to() -> Iterator[Callable[[int], TcpProxy]]:
    proxies: list[TcpProxy] = []

    def make(port: int) -> TcpProxy:
        proxy = TcpProxy(("127.0.0.1", port))
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


def _pair(start_node: StartNode, proxy: Callable[[int], TcpProxy] | None = None,
          **master_overrides: object) -> tuple[Node, Node, TcpProxy | None]:
    master = start_node("master", BrokerRole.SYNC_MASTER, slave_timeout_ms=SLAVE_TIMEOUT_MS,
                        **master_overrides)
    link = proxy(master.ha_port) if proxy else None
    address = link.address if link else f"127.0.0.1:{master.ha_port}"
    slave = start_node("slave", BrokerRole.SLAVE, ha_master_address=address)
    assert master.replication.service is not None
    wait_until(lambda: master.replication.service.is_slave_ok(0))  # type: ignore[union-attr]
    return master, slave, link


def test_put_ok_with_a_live_slave(start_node: StartNode) -> None:
    """SYNC_MASTER answers PUT_OK once the slave holds the message."""
    master, slave, _ = _pair(start_node)
    result, done = master.store.put_message(Message("S", b"replicated"))
    assert done.result(5) is PutMessageStatus.PUT_OK
    assert slave.store.max_offset >= result.end_offset


def test_slave_not_available_without_a_slave(start_node: StartNode) -> None:
    """With no slave connected a SYNC_MASTER put is stored and answers SLAVE_NOT_AVAILABLE."""
    master = start_node("master", BrokerRole.SYNC_MASTER)
    result, done = master.store.put_message(Message("S", b"alone"))
    assert result.status is PutMessageStatus.PUT_OK
    assert done.result(1) is PutMessageStatus.SLAVE_NOT_AVAILABLE
    assert master.store.commit_log.read_record(result.commit_log_offset).body == b"alone"


def test_slave_not_available_when_too_far_behind(
    start_node: StartNode, proxy_to: Callable[[int], TcpProxy]
) -> None:
    """A connected slave further behind than ha_slave_fall_behind_bytes_max does not count."""
    master, slave, link = _pair(start_node, proxy_to, ha_slave_fall_behind_bytes_max=20_000)
    assert link is not None
    link.stall()
    for _ in range(30):
        master.store.put_message(Message("S", bytes(1000)))  # 30 KB nobody acks
    _, done = master.store.put_message(Message("S", b"late"))
    assert done.result(2) is PutMessageStatus.SLAVE_NOT_AVAILABLE
    link.resume()
    wait_caught_up(master.store, slave.store)
    service = master.replication.service
    assert service is not None
    # The slave holding every byte is not enough: eligibility is judged on the acks the
    # master has heard, which arrive after the bytes (is_slave_ok(0) held all along).
    wait_until(lambda: service.replicated_offset() == master.store.max_offset)
    _, done = master.store.put_message(Message("S", b"back in sync"))
    assert done.result(5) is PutMessageStatus.PUT_OK


def test_flush_slave_timeout_when_the_slave_stops_acking(
    start_node: StartNode, proxy_to: Callable[[int], TcpProxy]
) -> None:
    """A blackholed slave makes puts answer FLUSH_SLAVE_TIMEOUT within slave_timeout_ms plus a
    small margin, never hanging; puts in flight all get their answer."""
    master, _, link = _pair(start_node, proxy_to)
    assert link is not None
    link.stall()
    started = time.monotonic()
    completions = [master.store.put_message(Message("S", b"m%d" % i))[1] for i in range(20)]
    statuses = {done.result(5) for done in completions}
    elapsed_ms = (time.monotonic() - started) * 1000
    assert statuses == {PutMessageStatus.FLUSH_SLAVE_TIMEOUT}
    # Not before the deadline (less 1 ms: deadlines are kept on a whole-millisecond clock, so
    # one set at t fires at floor(t) + timeout); after it, slack for a loaded 2-core machine
    # (the deadline thread, the flush and two stores' threads share the cores), well short of
    # "hanging".
    assert SLAVE_TIMEOUT_MS - 1 <= elapsed_ms < SLAVE_TIMEOUT_MS + DEADLINE_SLACK_MS


def test_one_ack_completes_every_earlier_wait(start_node: StartNode) -> None:
    """No head-of-line blocking: many waits complete together from the acks that cover them."""
    master, _, _ = _pair(start_node)
    completions = [master.store.put_message(Message("S", b"x" * 100))[1] for _ in range(500)]
    assert {done.result(5) for done in completions} == {PutMessageStatus.PUT_OK}


def test_two_slaves_needed(start_node: StartNode) -> None:
    """With in_sync_replicas=3, one slave is not enough: acks are counted per distinct slave."""
    master = start_node("master", BrokerRole.SYNC_MASTER, in_sync_replicas=3,
                        slave_timeout_ms=SLAVE_TIMEOUT_MS)
    start_node("slave1", BrokerRole.SLAVE, ha_master_address=f"127.0.0.1:{master.ha_port}")
    service = master.replication.service
    assert service is not None
    wait_until(lambda: service.connection_count == 1 and service.replicated_offset() < 0)
    _, done = master.store.put_message(Message("S", b"needs two"))
    assert done.result(2) is PutMessageStatus.SLAVE_NOT_AVAILABLE
    start_node("slave2", BrokerRole.SLAVE, ha_master_address=f"127.0.0.1:{master.ha_port}")
    wait_until(lambda: service.is_slave_ok(0))
    _, done = master.store.put_message(Message("S", b"has two"))
    assert done.result(5) is PutMessageStatus.PUT_OK


def test_confirmed_offset_follows_the_slave(start_node: StartNode) -> None:
    """A SYNC_MASTER's confirmed offset (what snapshots stop at) is what its slave has
    acknowledged: records stored without a slave are not confirmed until one holds them."""
    master = start_node("master", BrokerRole.SYNC_MASTER)
    result, done = master.store.put_message(Message("S", b"alone"))
    assert done.result(1) is PutMessageStatus.SLAVE_NOT_AVAILABLE
    master.store.commit_log.flush()
    assert master.store.confirmed_offset == 0
    slave = start_node("slave", BrokerRole.SLAVE,
                       ha_master_address=f"127.0.0.1:{master.ha_port}")
    wait_caught_up(master.store, slave.store)
    wait_until(lambda: master.store.confirmed_offset == result.end_offset)

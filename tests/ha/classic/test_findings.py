"""What the simulation found, shown on the real IO (sockets, stores, threads): a SYNC_FLUSH
slave acknowledges only what it flushed, and an empty slave streamed from a retained min
offset never completes a put that retention removed while it waited."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ha.protocol import encode_report
from store import BrokerRole, FlushDiskType, Message, MessageStore, PutMessageStatus
from store.retention import RetentionService
from tests.support.ha import Node
from tests.support.ha_peer import ScriptedSlave, started_master_service
from tests.support.store import small_config, wait_dispatched, wait_until

StartNode = Callable[..., Node]
SECRET = "findings-test-secret"


def test_a_sync_flush_slave_reports_only_what_it_flushed(
        start_node: StartNode, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each report of a SYNC_FLUSH slave is at most its flushed offset when it is sent (it
    flushes what it applied first), so a SYNC_MASTER's PUT_OK rests on the slave's disk."""
    master = start_node("master", BrokerRole.SYNC_MASTER, slave_timeout_ms=5000)
    slave = start_node("slave", BrokerRole.SLAVE,
                       store_overrides={"flush_disk_type": FlushDiskType.SYNC_FLUSH},
                       ha_master_address=f"127.0.0.1:{master.ha_port}")
    reported: list[tuple[int, int]] = []
    def recording(offset: int) -> bytes:
        reported.append((offset, slave.store.commit_log.flushed_offset))
        return encode_report(offset)

    monkeypatch.setattr("ha.client.encode_report", recording)
    service = master.replication.service
    assert service is not None
    wait_until(lambda: service.is_slave_ok(0))
    for index in range(20):
        _, done = master.store.put_message(Message("F", bytes([index]) * 2000))
        assert done.result(10) is PutMessageStatus.PUT_OK
    assert reported and all(offset <= flushed for offset, flushed in reported)
    assert reported[-1][0] == master.store.max_offset


def test_an_empty_slave_from_a_retained_offset_never_completes_a_put_below_it(
        tmp_path: Path) -> None:
    """A put waits (its slave went away); retention removes its file; an empty slave then
    starts at the master's new min offset and acks past the put's end. The put answers
    FLUSH_SLAVE_TIMEOUT when that slave starts (it is stored, never replicated), not PUT_OK."""
    store = MessageStore(small_config(tmp_path / "master", broker_role=BrokerRole.SYNC_MASTER))
    store.start()
    service = started_master_service(store, SECRET, slave_timeout_ms=60_000,
                                     ha_slave_fall_behind_bytes_max=1 << 30)
    try:
        first = ScriptedSlave(service.listen_address[1], SECRET).handshake()
        first.report(0)
        wait_until(lambda: service.is_slave_ok(0))
        result, waiting = store.put_message(Message("R", b"x" * 1000))
        assert not waiting.is_done
        first.close()
        wait_until(lambda: service.connection_count == 0)
        for _ in range(300):
            store.put_message(Message("R", b"y" * 1000))
        wait_dispatched(store)
        RetentionService(store.config, store.commit_log, store.queues, store.dispatch,
                         used_ratio=lambda _: 1.0).delete_expired()
        assert store.min_offset > result.end_offset
        empty = ScriptedSlave(service.listen_address[1], SECRET).handshake()
        empty.report(0)
        assert waiting.result(10) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        empty.receive_until(store.min_offset + 1)
        empty.report(store.min_offset + 1)
        wait_until(lambda: service.replicated_offset() == store.min_offset + 1)
        empty.close()
    finally:
        service.stop()
        store.shutdown()

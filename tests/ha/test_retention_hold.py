"""Retention by disk use keeps what a slave in sync still reads (issue 26: under load a slave
one file behind was refused as needs_reset, "agrees with the master only up to 1054932992,
which the master no longer holds"): the master's oldest file goes only once no slave within
ha_slave_fall_behind_bytes_max still needs it."""

from __future__ import annotations

from pathlib import Path

import pytest

import ha.service
from store import BrokerRole, Message, MessageStore
from tests.support.ha_peer import ScriptedSlave, started_master_service
from tests.support.store import SMALL_FILE_BYTES, small_config, wait_dispatched, wait_until

SECRET = "retention-hold-secret"


def test_a_full_disk_keeps_the_file_a_slave_in_sync_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk is "too full" (any use is past the ratio): with a slave acked inside the
    first file and less than the bound behind, retention removes nothing; once that slave is
    gone, the old files go. (Every ack refreshes the hold here: the refresh interval is
    what a busy link saves, not what is tested.)"""
    monkeypatch.setattr(ha.service, "HOLD_REFRESH_MS", 0)
    store = MessageStore(small_config(tmp_path / "master", broker_role=BrokerRole.ASYNC_MASTER,
                                      disk_max_used_ratio=1e-6))
    store.start()
    service = started_master_service(store, SECRET, ha_slave_fall_behind_bytes_max=1 << 20)
    try:
        slave = ScriptedSlave(service.listen_address[1], SECRET).handshake()
        slave.report(0)
        for _ in range(4 * SMALL_FILE_BYTES // 1000):
            store.put_message(Message("R", b"r" * 900))
        wait_dispatched(store)
        slave.receive_until(1000)
        slave.report(1000)
        wait_until(lambda: store.retention.hold_offset == 1000)
        assert store.retention.delete_expired() == 0
        assert store.min_offset == 0
        slave.close()
        wait_until(lambda: store.retention.hold_offset is None)
        assert store.retention.delete_expired() >= 3
        assert store.min_offset > 1000
    finally:
        service.stop()
        store.shutdown()

"""Classic master/slave nodes in one process for tests, and checks that their logs agree."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ha import Replication
from store import MessageStore
from tests.support.store import wait_until


@dataclass
class Node:
    store: MessageStore
    replication: Replication
    data_dir: Path

    @property
    def ha_port(self) -> int:
        assert self.replication.service is not None
        return self.replication.service.listen_address[1]

    def stop(self) -> None:
        self.replication.stop()
        self.store.shutdown()


FAST_HA: dict[str, Any] = {
    "ha_send_heartbeat_interval_ms": 200,
    "ha_housekeeping_interval_ms": 2000,
    "ha_reconnect_interval_ms": 100,
    "ha_connect_timeout_ms": 1000,
    "ha_diff_log_interval_s": 0.5,
    "ha_secret": "test-ha-secret",
}


def wait_caught_up(master: MessageStore, slave: MessageStore, timeout_s: float = 20.0) -> None:
    wait_until(lambda: slave.max_offset == master.max_offset, timeout_s)


def same_bytes(master: MessageStore, slave: MessageStore) -> bool:
    """The slave's commit log is byte-identical to the master's over [min, max)."""
    offset = master.min_offset
    while offset < master.max_offset:
        chunk = master.commit_log.read_bytes(offset, master.max_offset)
        if slave.commit_log.read_bytes(offset, offset + len(chunk)) != chunk:
            return False
        offset += len(chunk)
    return slave.max_offset == master.max_offset

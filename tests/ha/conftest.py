from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ha import HAConfig, Replication
from store import BrokerRole, MessageStore
from tests.store.conftest import small_config, wait_until


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


@pytest.fixture
def start_node(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """Start a store plus its replication by role; everything still running is stopped."""
    nodes: list[Node] = []

    def start(name: str, role: BrokerRole, store_overrides: dict[str, Any] | None = None,
              **ha_overrides: Any) -> Node:
        data_dir = tmp_path / name
        store = MessageStore(small_config(data_dir, broker_role=role,
                                          **(store_overrides or {})))
        store.start()
        settings = {**FAST_HA, "broker_role": role, "ha_listen_port": 0, **ha_overrides}
        replication = Replication(HAConfig(**settings), store)
        replication.start()
        node = Node(store, replication, data_dir)
        nodes.append(node)
        return node

    yield start
    for node in reversed(nodes):
        if node.store.state.value == "RUNNING":
            node.stop()


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

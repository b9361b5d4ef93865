from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ha import HAConfig, Replication
from store import BrokerRole, MessageStore
from tests.support.ha import FAST_HA, Node
from tests.support.store import small_config


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

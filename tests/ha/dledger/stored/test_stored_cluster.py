"""Three members on real sockets over the store-backed log: the host encodes on the leader's
log, a failover and a restart later every member holds byte-identical commit-log files and
reads the same committed messages."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ha.dledger.core.actions import AppendStatus
from ha.dledger.host.append_future import AppendFuture
from ha.dledger.host.host import AppendResult
from ha.dledger.stored.stored_log import StoredLog
from ha.dledger.stored.stored_storage import StoredDLedgerStorage
from store import Message
from tests.support.dledger.cluster import Cluster
from tests.support.dledger.net import WAIT_S
from tests.support.dledger.stored import (
    INDEX_ENTRIES_PER_FILE,
    body,
    commit_log_files,
    dledger_config,
)
from tests.support.store import wait_until


class StoredCluster(Cluster):
    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.stored = {node_id: StoredDLedgerStorage(
            dledger_config(root / node_id, default_queue_count=1),
            index_entries_per_file=INDEX_ENTRIES_PER_FILE) for node_id in self.ids}
        self.storages = dict(self.stored)

    def produce(self, message: Message) -> AppendResult:
        """Through whoever leads now, encoded on its log; a refusal is tried again."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            leader = self.wait_leader()
            log = self.stored[leader].log
            future: AppendFuture[AppendResult] = self.servers[leader].host.append(
                lambda log=log: _encoded(log, message))
            result = future.result(WAIT_S)
            if result.status is AppendStatus.OK:
                return result
        raise AssertionError(f"no append of {message.body!r} committed within {WAIT_S} s")


def _encoded(log: StoredLog, message: Message) -> bytes:
    encoded = log.encode(message)
    assert isinstance(encoded, bytes), encoded
    return encoded


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StoredCluster]:
    stored = StoredCluster(tmp_path)
    yield stored
    stored.stop_all()


def _readable(cluster: StoredCluster, node_id: str) -> list[bytes]:
    store = cluster.stored[node_id].store
    result = store.get_messages("T", 0, 0, 1000, max_bytes=1 << 30)
    return [m.body for m in result.messages]


def test_a_stored_group_fails_over_and_converges_byte_identical(cluster: StoredCluster,
                                                                tmp_path: Path) -> None:
    """Messages committed before and after the leader stops are readable on every member once
    the old leader is back, and the three commit logs are byte copies of each other."""
    cluster.start_all()
    bodies = [body(number, 50 if number % 3 else 3000) for number in range(45)]
    for item in bodies[:30]:
        cluster.produce(Message("T", item))
    old_leader = cluster.wait_leader()
    cluster.stop(old_leader)
    for item in bodies[30:]:
        cluster.produce(Message("T", item))
    cluster.start(old_leader)
    for node_id in cluster.ids:
        wait_until(lambda n=node_id: _readable(cluster, n) == bodies, WAIT_S)
    leader = cluster.wait_leader()
    end = cluster.servers[leader].host.status().end_index
    wait_until(lambda: all(server.host.status().committed_index == end
                           for server in cluster.servers.values()), WAIT_S)
    cluster.stop_all()
    files = [commit_log_files(tmp_path / node_id) for node_id in cluster.ids]
    assert len(files[0]) >= 2 and files[0] == files[1] == files[2]

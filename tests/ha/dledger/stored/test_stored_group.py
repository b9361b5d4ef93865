"""The pure node over the store-backed log: a hand-driven group of three whose writes go to
StoredDLedgerStorage (sync, persist term and vote, set_committed), as the host runs them."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from ha.dledger.core.actions import Action, AdvanceCommit, AppendStatus, PersistTermVote
from ha.dledger.core.config import DLedgerConfig
from ha.dledger.core.member import Role
from ha.dledger.core.node import DLedgerNode
from ha.dledger.stored.stored_log import StoredLog
from ha.dledger.stored.stored_storage import StoredDLedgerStorage
from store import Message
from tests.support.dledger.harness import WRITE_TYPES, Group
from tests.support.dledger.stored import (
    INDEX_ENTRIES_PER_FILE,
    body,
    commit_log_files,
    dledger_config,
)
from tests.support.store import wait_until

IDS = ["n0", "n1", "n2"]


class StoredGroup(Group):
    """Group whose writes reach each node's storage before `persisted` (one sync per write:
    the host's group commit would batch them)."""

    def __init__(self, storages: dict[str, StoredDLedgerStorage],
                 nodes: list[DLedgerNode]) -> None:
        super().__init__(nodes)
        self.storages = storages

    def run(self, node_id: str, actions: list[Action]) -> None:
        storage = self.storages[node_id]
        for action in actions:
            if isinstance(action, PersistTermVote):
                storage.persist_term_vote(action.term, action.voted_for)
            elif isinstance(action, WRITE_TYPES):
                storage.sync()
            elif isinstance(action, AdvanceCommit):
                storage.set_committed(action.commit_index)
            super().run(node_id, [action])


@pytest.fixture
def group(tmp_path: Path) -> Iterator[StoredGroup]:
    storages: dict[str, StoredDLedgerStorage] = {}
    nodes = []
    for number, node_id in enumerate(IDS):
        storage = StoredDLedgerStorage(dledger_config(tmp_path / node_id, default_queue_count=1),
                                       index_entries_per_file=INDEX_ENTRIES_PER_FILE)
        hard_state, log = storage.open()
        storages[node_id] = storage
        nodes.append(DLedgerNode(node_id, IDS, DLedgerConfig(), random.Random(number),
                                 hard_state, log))
    yield StoredGroup(storages, nodes)
    for storage in storages.values():
        storage.close()


def _produce(group: StoredGroup, leader_id: str, first_request: int, count: int) -> None:
    log = group.nodes[leader_id].log
    assert isinstance(log, StoredLog)
    for number in range(first_request, first_request + count):
        payload = log.encode(Message("T", body(number, random.Random(number).choice([50, 3000]))))
        assert isinstance(payload, bytes)
        group.append(leader_id, number, payload)
        group.deliver()


def _wait_leader(group: StoredGroup, candidates: list[str], ticks_max: int = 500) -> str:
    for _ in range(ticks_max):
        group.tick_all()
        leaders = [c for c in candidates if group.nodes[c].role is Role.LEADER]
        if leaders:
            return leaders[0]
    raise AssertionError(f"no leader among {candidates} in {ticks_max} ticks")


def _bodies(storage: StoredDLedgerStorage) -> list[bytes]:
    store = storage.store
    limit = store.commit_limit
    assert limit is not None
    wait_until(lambda: store.dispatch.dispatched_offset >= limit)
    return [m.body for m in store.get_messages("T", 0, 0, 1000, max_bytes=1 << 30).messages]


def test_a_group_replicates_byte_identical_commit_logs(group: StoredGroup,
                                                       tmp_path: Path) -> None:
    """Appends committed by a stored group leave the same commit-log bytes and the same
    readable messages on every member."""
    group.elect("n0")
    _produce(group, "n0", 1, 40)
    group.tick_all(3)  # heartbeats carry the final commit index to the followers
    assert [c.status for c in group.completed] == [AppendStatus.OK] * 40
    expected = [body(n, random.Random(n).choice([50, 3000])) for n in range(1, 41)]
    for storage in group.storages.values():
        assert _bodies(storage) == expected
        storage.sync()
    files = [commit_log_files(tmp_path / node_id) for node_id in IDS]
    assert len(files[0]) >= 2 and files[0] == files[1] == files[2]


def test_a_deposed_leaders_uncommitted_records_are_truncated_and_it_converges(
        group: StoredGroup, tmp_path: Path) -> None:
    """An isolated leader's uncommitted records are never read, are truncated when it
    rejoins under the new leader, and its commit log ends byte-identical to the others."""
    group.elect("n0")
    _produce(group, "n0", 1, 5)
    group.isolate("n0")
    _produce(group, "n0", 100, 4)  # appended on n0 only: never committed
    assert len(_bodies(group.storages["n0"])) == 5
    new_leader = _wait_leader(group, ["n1", "n2"])
    _produce(group, new_leader, 200, 6)
    group.cut.clear()
    group.tick_all(40)
    for node_id in IDS:
        node = group.nodes[node_id]
        assert node.commit_index == group.nodes[new_leader].commit_index, node_id
    expected = [body(n, random.Random(n).choice([50, 3000]))
                for n in list(range(1, 6)) + list(range(200, 206))]
    for storage in group.storages.values():
        assert _bodies(storage) == expected
        storage.sync()
    files = [commit_log_files(tmp_path / node_id) for node_id in IDS]
    assert files[0] == files[1] == files[2]

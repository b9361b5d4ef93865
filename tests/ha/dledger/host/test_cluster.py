"""Three DLedger members in one process on real loopback sockets, each with its own in-memory
storage: election, replication, failover and catch-up through the real host and transport."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from ha.dledger.core.actions import AppendStatus, TransferStatus
from ha.dledger.core.member import Role
from ha.dledger.core.messages import Message
from tests.support.dledger.cluster import Cluster
from tests.support.dledger.net import WAIT_S
from tests.support.store import wait_until


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    cluster = Cluster()
    yield cluster
    cluster.stop_all()


def payloads(cluster: Cluster, node_id: str) -> list[bytes]:
    return [entry.payload for entry in cluster.storages[node_id].durable_entries()]


def holds_committed(cluster: Cluster, node_id: str, payload: bytes) -> bool:
    """`node_id` durably holds `payload` at or below its committed index."""
    storage = cluster.storages[node_id]
    return any(entry.payload == payload and entry.index <= storage.committed_index
               for entry in storage.durable_entries())


def test_a_leader_is_elected_and_appends_commit_on_all_three(cluster: Cluster) -> None:
    """One leader emerges, and appends it answers OK are committed on every member."""
    cluster.start_all()
    leader = cluster.wait_leader()
    followers = [node_id for node_id in cluster.ids if node_id != leader]
    wait_until(lambda: all(cluster.servers[f].host.status().leader_id == leader
                           for f in followers), WAIT_S)
    results = [cluster.append(b"m%d" % i) for i in range(20)]
    assert all(result.status is AppendStatus.OK for result in results)
    for node_id in cluster.ids:
        wait_until(lambda n=node_id: all(holds_committed(cluster, n, b"m%d" % i)
                                         for i in range(20)), WAIT_S)
    assert len({tuple(payloads(cluster, node_id)) for node_id in cluster.ids}) == 1
    status = cluster.servers[leader].host.status()
    assert status.role == Role.LEADER.value and status.committed_index == status.end_index
    # A follower may hold the entries before the leader has its answer: the lag follows.
    wait_until(lambda: all(peer.lag_entries == 0
                           for peer in cluster.servers[leader].host.status().peers), WAIT_S)


def test_stopping_the_leader_elects_another_that_commits(cluster: Cluster) -> None:
    """With the leader stopped the two others elect a new one, and a new append commits."""
    cluster.start_all()
    cluster.append(b"before")
    old_leader = cluster.wait_leader()
    old_term = cluster.servers[old_leader].host.status().term
    cluster.stop(old_leader)
    new_leader = cluster.wait_leader()
    assert new_leader != old_leader
    assert cluster.servers[new_leader].host.status().term > old_term
    cluster.append(b"after")
    for node_id in cluster.servers:
        wait_until(lambda n=node_id: holds_committed(cluster, n, b"before")
                   and holds_committed(cluster, n, b"after"), WAIT_S)


def test_a_restarted_member_catches_up(cluster: Cluster) -> None:
    """A member stopped while the others commit gets every entry once it is back."""
    cluster.start_all()
    leader = cluster.wait_leader()
    lagging = next(node_id for node_id in cluster.ids if node_id != leader)
    cluster.stop(lagging)
    for i in range(30):
        cluster.append(b"while-away-%d" % i)
    assert not holds_committed(cluster, lagging, b"while-away-0")
    cluster.start(lagging)
    wait_until(lambda: all(holds_committed(cluster, lagging, b"while-away-%d" % i)
                           for i in range(30)), WAIT_S)
    current = cluster.wait_leader()
    assert payloads(cluster, lagging) == payloads(cluster, current)


def test_leadership_transfer_over_the_wire(cluster: Cluster) -> None:
    """The leader hands over to a caught-up follower (TimeoutNow on the real transport); the
    target leads in a higher term and commits a new append."""
    cluster.start_all()
    cluster.append(b"before-transfer")
    leader = cluster.wait_leader()
    term = cluster.servers[leader].host.status().term
    target = next(node_id for node_id in cluster.ids if node_id != leader)
    status = cluster.servers[leader].host.transfer_leadership(target).result(WAIT_S)
    assert status is TransferStatus.OK
    wait_until(lambda: cluster.leader() == target, WAIT_S)
    assert cluster.servers[target].host.status().term > term
    cluster.append(b"after-transfer")
    wait_until(lambda: all(holds_committed(cluster, n, b"after-transfer")
                           for n in cluster.ids), WAIT_S)


def test_peer_messages_reach_the_node_on_the_host_thread(cluster: Cluster) -> None:
    """Every peer message is read and handed to the node by the member's host thread itself:
    no reading or sending thread sits between the socket and the node."""
    cluster.start_all()
    seen: dict[str, set[str]] = {node_id: set() for node_id in cluster.ids}
    for node_id, server in cluster.servers.items():
        receive = server.host.receive

        def recording(message: Message, receive: Callable[[Message], None] = receive,
                      names: set[str] = seen[node_id]) -> None:
            names.add(threading.current_thread().name)
            receive(message)

        server.transport.deliver = recording
    cluster.wait_leader()
    assert cluster.append(b"one").status is AppendStatus.OK
    assert all(seen[node_id] == {f"dledger-host-{node_id}"} for node_id in cluster.ids), seen
    names = {thread.name for thread in threading.enumerate()}
    assert not any(name.startswith(("dledger-read", "dledger-send")) for name in names), names

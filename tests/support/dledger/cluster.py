"""Three (or more) DLedger members in one test process on real loopback sockets, each with its
own in-memory storage, stopped and restarted by hand."""

from __future__ import annotations

import random

from ha.dledger.core.member import Role
from ha.dledger.core.peers import Peer
from ha.dledger.host.append_future import AppendFuture
from ha.dledger.host.host import AppendResult
from ha.dledger.host.host_config import HostConfig
from ha.dledger.host.memory_storage import MemoryStorage
from ha.dledger.host.server import DLedgerServer
from ha.dledger.host.transport_config import TransportConfig
from tests.support.dledger.net import SECRET, WAIT_S, bound_listener
from tests.support.store import wait_until

FAST_HOST = HostConfig(tick_ms=10, election_timeout_ms=150, heartbeat_interval_ms=30,
                       push_timeout_ms=100, quorum_deadline_ms=5000)


class Cluster:
    def __init__(self, size: int = 3, secret: bytes | None = SECRET,
                 host_config: HostConfig = FAST_HOST) -> None:
        self.ids = [f"n{i}" for i in range(size)]
        self.storages = {node_id: MemoryStorage() for node_id in self.ids}
        # Ports stay ours between restarts: each member's listener is bound once up front and
        # a restart binds the same port again (SO_REUSEADDR).
        listeners = [bound_listener() for _ in self.ids]
        self.peers = tuple(Peer(node_id, "127.0.0.1", listener.getsockname()[1])
                           for node_id, listener in zip(self.ids, listeners, strict=True))
        self._listeners = dict(zip(self.ids, listeners, strict=True))
        self.secret = secret
        self.host_config = host_config
        self.servers: dict[str, DLedgerServer] = {}

    def transport_config(self, node_id: str) -> TransportConfig:
        return TransportConfig("g0", node_id, self.peers, self.secret,
                               allow_unauthenticated=self.secret is None,
                               reconnect_backoff_max_ms=100)

    def start(self, node_id: str, seed: int | None = None) -> DLedgerServer:
        listener = self._listeners.pop(node_id, None) \
            or bound_listener(self.peers[self.ids.index(node_id)].port)
        rng = random.Random(seed if seed is not None else self.ids.index(node_id))
        server = DLedgerServer(self.transport_config(node_id), self.host_config,
                               self.storages[node_id], listener, rng)
        server.start()
        self.servers[node_id] = server
        return server

    def start_all(self) -> None:
        for node_id in self.ids:
            self.start(node_id)

    def stop(self, node_id: str) -> None:
        self.servers.pop(node_id).stop()

    def stop_all(self) -> None:
        for node_id in list(self.servers):
            self.stop(node_id)
        for listener in self._listeners.values():
            listener.close()

    def leader(self) -> str | None:
        """The one running member that is leader in the highest term among leaders."""
        leaders = [(server.host.status().term, node_id)
                   for node_id, server in self.servers.items()
                   if server.host.status().role == Role.LEADER.value]
        return max(leaders)[1] if leaders else None

    def wait_leader(self) -> str:
        wait_until(lambda: self.leader() is not None, WAIT_S)
        leader = self.leader()
        assert leader is not None
        return leader

    def append(self, payload: bytes) -> AppendResult:
        """Append through whoever leads now, retrying a refusal until one commits."""
        import time

        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            leader = self.wait_leader()
            future: AppendFuture[AppendResult] = self.servers[leader].host.append(lambda: payload)
            result = future.result(WAIT_S)
            if result.status.name == "OK":
                return result
        raise AssertionError(f"no append of {payload!r} committed within {WAIT_S} s")

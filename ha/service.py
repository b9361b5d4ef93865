"""The master's HA service: accepts slaves, tracks each slave's ack, and completes SYNC_MASTER
waits when enough distinct slaves have acknowledged an offset. Implements the store's
`ReplicationGuard`.

What it fixes from the seed's HAService (reference section 7): acks are per slave id (a
slave that reconnects replaces its old connection and never counts twice) and a closed
connection's ack stops counting; an ack beyond what a connection was sent closes it; waits
have real deadlines and one ack completes every wait below it.

Admission: a new connection first joins the bounded set of connections still in the
handshake (when that set is full the oldest is dropped, so idle sockets cannot starve a real
slave), and takes one of `ha_connections_max` slots only once the handshake succeeded.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from ha.config import HAConfig
from ha.connection import ConnectionState, HAConnection, SlaveView
from ha.epochs import (
    Agreement,
    Decision,
    Epoch,
    begin_epoch,
    decide,
    load_history,
    save_history,
)
from ha.identity import load_or_create_node_id
from store.clock import monotonic_ms
from store.message_store import MessageStore
from store.paths import StorePaths
from store.service import ServiceThread
from store.status import PutMessageStatus
from store.waits.completion import Pending
from store.waits.offset_waits import OffsetWaits

log = logging.getLogger(__name__)

_REJECTED_MAX = 32
_ACCEPT_POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class RejectedSlave:
    address: str
    state: str
    reason: str
    request_offset: int


class HAService:
    def __init__(self, config: HAConfig, store: MessageStore) -> None:
        self.config = config
        self.store = store
        self.waits = OffsetWaits(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self._connections: list[HAConnection] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._accept = _AcceptThread(self)
        self.rejected: deque[RejectedSlave] = deque(maxlen=_REJECTED_MAX)
        self.refused_connection_count = 0
        self.handshake_evicted_count = 0
        self.ack_beyond_max_count = 0
        self.protocol_error_count = 0
        self._replicated = -1
        self._fall_behind_bytes_max = config.ha_slave_fall_behind_bytes_max
        self._slave_timeout_ms = config.slave_timeout_ms
        self.node_id = b""
        self.epochs: list[Epoch] = []

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        # Every start as master is a new epoch: recovery may have cleared bytes a slave holds.
        paths = StorePaths(self.store.config.data_dir)
        self.node_id = load_or_create_node_id(self.store.config.data_dir)
        self.epochs = begin_epoch(load_history(paths.ha_epochs), self.store.max_offset,
                                  self.node_id)
        save_history(paths.ha_epochs, self.epochs)
        log.info("ha: master epoch %d from offset %d", self.epochs[-1].number,
                 self.epochs[-1].start_offset)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.config.ha_listen_host, self.config.ha_listen_port))
        listener.listen(self.config.ha_connections_max + self.config.ha_handshakes_max)
        listener.settimeout(_ACCEPT_POLL_S)
        self._listener = listener
        self.store.deadlines.watch(self.waits)
        self.store.add_append_listener(self._wake_writers)
        self.store.set_replication(self)
        self._accept.start()
        log.info("ha: master listening on %s:%d", *self.listen_address)

    def stop(self) -> None:
        self.store.set_replication(None)
        self.store.remove_append_listener(self._wake_writers)
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept() at once
            except OSError:
                pass
        self._accept.stop()
        if self._listener is not None:
            self._listener.close()
        for connection in self.connections:
            connection.close("master stopping")
            connection.join()
        self.waits.fail_all(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self.store.deadlines.unwatch(self.waits)

    @property
    def listen_address(self) -> tuple[str, int]:
        assert self._listener is not None
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def connections(self) -> list[HAConnection]:
        with self._lock:
            return list(self._connections)

    @property
    def connection_count(self) -> int:
        """Slaves holding a slot (past the handshake)."""
        return sum(1 for c in self.connections if c.state is not ConnectionState.HANDSHAKE)

    def _admit(self, sock: socket.socket, address: str) -> None:
        """Start the handshake of a new connection; it holds no slot yet."""
        connection = HAConnection(sock, address, self.config, self.store.commit_log,
                                  on_ack=self._on_ack, on_close=self._on_close,
                                  on_handshake=self._on_handshake, agree=self._agree)
        with self._lock:
            waiting = [c for c in self._connections if c.state is ConnectionState.HANDSHAKE]
            oldest = waiting[0] if len(waiting) >= self.config.ha_handshakes_max else None
            self._connections.append(connection)
        if oldest is not None:
            self.handshake_evicted_count += 1
            oldest.close("dropped: too many connections in the handshake")
        connection.start()

    def _on_handshake(self, connection: HAConnection) -> str:
        """A slot for a slave that finished the handshake; a reason to close it otherwise.

        The same slave id on an older connection is that slave's stale link (a reconnect
        after a cut, a half-open socket): the old one is closed so the slave counts once.
        """
        with self._lock:
            stale = [c for c in self._connections
                     if c is not connection and c.slave_id == connection.slave_id]
            slotted = [c for c in self._connections if c is not connection
                       and c not in stale and c.state is not ConnectionState.HANDSHAKE]
            full = len(slotted) >= self.config.ha_connections_max
            if not full:  # the slot is taken under the lock: two handshakes cannot share it
                connection.state = ConnectionState.WAITING_REPORT
        if full:
            self.refused_connection_count += 1
            log.warning("ha: refusing slave %s at %s: all %d slots are taken",
                        connection.slave_id, connection.address, len(slotted))
            return f"no slot: {len(slotted)} slaves connected already"
        for old in stale:
            old.close(f"replaced by a new connection of the same slave from "
                      f"{connection.address}")
        return ""

    def _agree(self, slave_history: Sequence[Epoch],
               slave_max: int) -> tuple[Decision, Sequence[Epoch]]:
        history = self.epochs
        decision = decide(history, self.store.max_offset, self.store.min_offset, slave_history,
                          slave_max)
        if decision.agreement is Agreement.AGREED and decision.agreed_offset < slave_max:
            log.warning("ha: slave at %d holds bytes this master does not; it cuts back to %d",
                        slave_max, decision.agreed_offset)
        return decision, history

    # -- acks and waits --------------------------------------------------------------------

    def _on_ack(self, connection: HAConnection) -> None:
        self._replicated = self.replicated_offset()
        self.waits.advance(self._replicated)

    def _on_close(self, connection: HAConnection, reason: str) -> None:
        with self._lock:
            if connection in self._connections:
                self._connections.remove(connection)
        self._replicated = self.replicated_offset()
        if connection.ack_beyond_max:
            self.ack_beyond_max_count += 1
        if reason.startswith("protocol error"):
            self.protocol_error_count += 1
        if connection.state in (ConnectionState.NEEDS_RESET, ConnectionState.AHEAD_OF_MASTER,
                                ConnectionState.DIVERGED):
            self.rejected.append(RejectedSlave(connection.address, connection.state.value,
                                               reason, connection.request_offset))
            log.error("ha: slave %s rejected (%s): %s", connection.address,
                      connection.state.value, reason)

    def replicated_offset(self) -> int:
        """The offset that `slaves_needed` distinct connected slaves have all acknowledged."""
        ack_by_slave: dict[str, int] = {}
        for c in self.connections:
            if c.is_open and c.state is ConnectionState.TRANSFERRING:
                ack_by_slave[c.slave_id] = max(c.ack_offset, ack_by_slave.get(c.slave_id, -1))
        acks = sorted(ack_by_slave.values(), reverse=True)
        needed = self.config.slaves_needed
        return acks[needed - 1] if len(acks) >= needed else -1

    def is_slave_ok(self, end_offset: int) -> bool:
        """Enough slaves connected and less than ha_slave_fall_behind_bytes_max behind.

        `_replicated` is the offset the needed number of distinct slaves have acked (kept by
        every ack and every close), so the question costs O(1) on the put path.
        """
        replicated = self._replicated
        return replicated >= 0 and end_offset - replicated < self._fall_behind_bytes_max

    def wait_replicated(self, end_offset: int) -> Pending:
        # The append already woke the writers (append listener): nothing more to do here.
        return self.waits.add(end_offset, monotonic_ms() + self._slave_timeout_ms)

    @property
    def pending_count(self) -> int:
        return len(self.waits)

    def _wake_writers(self) -> None:
        for connection in self._connections:
            connection.wake()

    # -- views -----------------------------------------------------------------------------

    def slave_views(self) -> list[SlaveView]:
        master_max = self.store.max_offset
        return [c.view(master_max, self.config.ha_slave_fall_behind_bytes_max)
                for c in self.connections]


class _AcceptThread(ServiceThread):
    name = "ha-accept"

    def __init__(self, service: HAService) -> None:
        super().__init__()
        self._service = service

    def run_once(self) -> float:
        listener = self._service._listener
        assert listener is not None
        try:
            sock, peer = listener.accept()
        except TimeoutError:
            return 0.0  # the accept timeout is the loop's bound
        except OSError as error:  # closed by stop(), or out of file descriptors
            self.last_error = str(error)
            return 0.1
        self._service._admit(sock, f"{peer[0]}:{peer[1]}")
        return 0.0

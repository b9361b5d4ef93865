"""The master's HA service (the seed's HAService, AcceptSocketService and the put side of its
GroupTransferService): the IO around `MasterCore` (ha/classic/core/master.py), which makes the
decisions. It accepts slaves (one HAConnection each), tells the core what happens to them
under one lock, completes SYNC_MASTER waits at every new replicated offset, and implements the
store's `ReplicationGuard`.

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

from ha.classic.core.master import MasterCore
from ha.classic.core.master import RejectedSlave as RejectedSlave
from ha.config import HAConfig
from ha.connection import HAConnection, SlaveView
from ha.epochs import (
    Agreement,
    Decision,
    Epoch,
    begin_epoch,
    load_history,
    save_history,
)
from ha.identity import load_or_create_node_id
from store.clock import monotonic_ms
from store.message_store import MessageStore
from store.paths import StorePaths
from store.service import ServiceThread
from store.status import PutMessageStatus
from store.waits.completion import PutCompletion
from store.waits.offset_waits import OffsetWaits

log = logging.getLogger(__name__)

_ACCEPT_POLL_S = 0.5
# How often acks refresh the retention hold (a close always does): below retention's own
# interval, and far above the ack rate of a busy link.
HOLD_REFRESH_MS = 500
_SLAVE_NOT_AVAILABLE = PutCompletion.done(PutMessageStatus.SLAVE_NOT_AVAILABLE)


class HAService:
    def __init__(self, config: HAConfig, store: MessageStore) -> None:
        self.config = config
        self.store = store
        self.waits = OffsetWaits(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self._hold_updated_ms = -HOLD_REFRESH_MS
        self.core: MasterCore[HAConnection] = MasterCore(config, [])
        self._lock = threading.Lock()  # every call into the core holds it
        self._listener: socket.socket | None = None
        self._accept = _AcceptThread(self)
        self.node_id = b""

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        # Every start as master is a new epoch: recovery may have cleared bytes a slave holds.
        paths = StorePaths(self.store.config.data_dir)
        self.node_id = load_or_create_node_id(self.store.config.data_dir)
        epochs = begin_epoch(load_history(paths.ha_epochs), self.store.max_offset, self.node_id)
        save_history(paths.ha_epochs, epochs)
        self.core.epochs = epochs
        log.info("ha: master epoch %d from offset %d", epochs[-1].number,
                 epochs[-1].start_offset)
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
        self.store.retention.hold_offset = None

    @property
    def listen_address(self) -> tuple[str, int]:
        assert self._listener is not None
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    # -- what the core keeps, read by the views, metrics and tests -------------------------

    @property
    def epochs(self) -> list[Epoch]:
        return self.core.epochs

    @property
    def rejected(self) -> deque[RejectedSlave]:
        return self.core.rejected

    @property
    def refused_connection_count(self) -> int:
        return self.core.refused_connection_count

    @property
    def handshake_evicted_count(self) -> int:
        return self.core.handshake_evicted_count

    @property
    def ack_beyond_max_count(self) -> int:
        return self.core.ack_beyond_max_count

    @property
    def protocol_error_count(self) -> int:
        return self.core.protocol_error_count

    @property
    def connections(self) -> list[HAConnection]:
        with self._lock:
            return list(self.core.connections)

    @property
    def connection_count(self) -> int:
        """Slaves holding a slot (past the handshake)."""
        with self._lock:
            return self.core.slot_count

    # -- connections: the core decides, the connections carry it out -----------------------

    def _admit(self, sock: socket.socket, address: str) -> None:
        """Start the handshake of a new connection; it holds no slot yet."""
        connection = HAConnection(sock, address, self.config, self.store.commit_log,
                                  on_ack=self._on_ack, on_close=self._on_close,
                                  on_handshake=self._on_handshake, agree=self._agree)
        with self._lock:
            oldest = self.core.opened(connection)
        if oldest is not None:
            oldest.close("dropped: too many connections in the handshake")
        connection.start()

    def _on_handshake(self, connection: HAConnection) -> str:
        """A slot for a slave that finished the handshake; a reason to close it otherwise.

        The same slave id on an older connection is that slave's stale link (a reconnect
        after a cut, a half-open socket): the old one is closed so the slave counts once.
        """
        with self._lock:  # the slot is taken under the lock: two handshakes cannot share it
            refusal, stale = self.core.handshake_done(connection)
        if refusal:
            log.warning("ha: refusing slave %s at %s: %s", connection.slave_id,
                        connection.address, refusal)
            return refusal
        for old in stale:
            old.close(f"replaced by a new connection of the same slave from "
                      f"{connection.address}")
        return ""

    def _agree(self, slave_history: Sequence[Epoch],
               slave_max: int) -> tuple[Decision, Sequence[Epoch]]:
        decision = self.core.agree(slave_history, slave_max, self.store.max_offset,
                                   self.store.min_offset)
        if decision.agreement is Agreement.AGREED and decision.agreed_offset < slave_max:
            log.warning("ha: slave at %d holds bytes this master does not; it cuts back to %d",
                        slave_max, decision.agreed_offset)
        return decision, self.core.epochs

    def _on_ack(self, connection: HAConnection) -> None:
        with self._lock:
            step = self.core.acked(connection)
            if step.unreplicable_end_offset:  # rare: before any other ack can count it
                self.waits.complete_through(step.unreplicable_end_offset,
                                            PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
            now_ms = monotonic_ms()
            if now_ms - self._hold_updated_ms >= HOLD_REFRESH_MS:
                self._hold_updated_ms = now_ms
                self._hold_for_slaves()
        self.waits.advance(step.replicated_offset)

    def _hold_for_slaves(self) -> None:
        """Retention keeps what the slaves in sync still read (MasterCore.retention_hold).
        Refreshed at most every HOLD_REFRESH_MS on acks (and at every close): a hold a
        little old is lower, so retention only keeps more."""
        self.store.retention.hold_offset = self.core.retention_hold(self.store.max_offset)

    def _on_close(self, connection: HAConnection, reason: str) -> None:
        with self._lock:
            rejected = self.core.closed(connection)
            self._hold_for_slaves()
        if rejected is not None:
            log.error("ha: slave %s rejected (%s): %s", rejected.address, rejected.state,
                      reason)

    # -- the store's ReplicationGuard ------------------------------------------------------

    def replicated_offset(self) -> int:
        """The offset that `slaves_needed` distinct connected slaves have all acknowledged."""
        return self.core.replicated_offset

    def is_slave_ok(self, end_offset: int) -> bool:
        """Enough slaves connected and less than ha_slave_fall_behind_bytes_max behind (O(1):
        the core keeps the replicated offset at every ack and every close)."""
        return self.core.is_slave_ok(end_offset)

    def replication_completion(self, end_offset: int) -> PutCompletion:
        """What a SYNC_MASTER put ending at `end_offset` awaits: SLAVE_NOT_AVAILABLE at once,
        or PUT_OK when replicated, FLUSH_SLAVE_TIMEOUT at its deadline. The append already
        woke the writers (append listener): nothing more to do here."""
        deadline_ms = self.core.put_deadline_ms(end_offset, monotonic_ms())
        if deadline_ms is None:
            return _SLAVE_NOT_AVAILABLE
        return PutCompletion(pending=self.waits.add(end_offset, deadline_ms))

    @property
    def pending_count(self) -> int:
        return len(self.waits)

    def _wake_writers(self) -> None:
        for connection in self.core.connections:
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

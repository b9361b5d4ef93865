"""A broker in the classic-replication simulation: the glue that ha/service.py,
ha/connection.py and ha/client.py are around the real cores, with the simulated disk and
network in place of files and sockets.

`MasterSide` runs `MasterCore` and one `SlaveLink` per accepted connection (the reader's
events, the writer's batches and heartbeats, housekeeping), the store's real `OffsetWaits`
for SYNC_MASTER and SYNC_FLUSH puts, and `PutCompletion.combine` for their answer.
`SlaveSide` runs `SlaveCore` through each connection's life. Both call back into the
simulation (`World`) for time, randomness, sending and the invariants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ha.classic.core.epochs import Epoch, begin_epoch
from ha.classic.core.link import LinkState, SlaveLink
from ha.classic.core.master import MasterCore
from ha.classic.core.slave import ApplyOutcome, SlaveCore
from ha.classic.simulation.disk import FILE_SIZE_BYTES, SimDisk
from ha.classic.simulation.network import Agreed, Answer, Connection, Frame, Hello, Message, Report
from ha.config import HAConfig
from store.status import BrokerRole, PutMessageStatus
from store.waits.completion import PutCompletion
from store.waits.offset_waits import OffsetWaits

WRITER_IDLE_WAIT_MS = 100  # ha/connection.py's idle poll
CLIENT_POLL_MS = 100  # ha/client.py's recv timeout
FLUSH_TIMEOUT_MS = 5000


class World(Protocol):
    """What a broker needs from the simulation."""

    now_ms: int

    def schedule(self, delay_ms: int, label: str, action: Callable[[], None]) -> None: ...

    def send(self, connection: Connection, to_master: bool, message: Message) -> None: ...

    def hang_up(self, connection: Connection, from_master: bool) -> None: ...

    def accept(self, slave: SlaveSide) -> Connection | None: ...

    def put_answered(self, master: MasterSide, put: Put, status: PutMessageStatus) -> None: ...

    def link_event(self, master: MasterSide, conn: MasterConn) -> None: ...

    def slave_reported(self, slave: SlaveSide, offset: int, first: bool) -> None: ...

    def slave_cut(self, slave: SlaveSide, old_end: int, new_end: int,
                  cleared_bytes: int) -> None: ...

    def records_arrived(self, broker_name: str, start: int) -> None: ...

    def bootstrap_metadata(self, slave: SlaveSide) -> None: ...


@dataclass(frozen=True, slots=True)
class Put:
    message_id: int
    start: int
    end: int
    payload: bytes
    epoch: Epoch  # the answering master's: (number, start offset, leader)


@dataclass(eq=False)
class MasterConn:
    """One accepted connection on the master: its link and the IO state around it."""

    link: SlaveLink
    connection: Connection
    last_read_ms: int
    writer_busy: bool = False
    writer_scheduled: bool = False
    verified_offset: int = -1  # the invariants compared its acked bytes up to here


class MasterSide:
    def __init__(self, world: World, name: str, node_id: bytes, disk: SimDisk,
                 config: HAConfig, sync_flush: bool, batch_size_bytes: int) -> None:
        self.world = world
        self.name = name
        self.disk = disk
        self.config = config
        self.sync_flush = sync_flush
        self.batch_size_bytes = batch_size_bytes
        # Every start as master is a new epoch (ha/service.py's start).
        disk.epochs = begin_epoch(disk.epochs, disk.end, node_id)
        self.core: MasterCore[MasterConn] = MasterCore(config, disk.epochs)
        self.waits = OffsetWaits(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self.flush_waits = OffsetWaits(PutMessageStatus.FLUSH_DISK_TIMEOUT)
        self.running = True
        self.flush_scheduled = False

    @property
    def epoch(self) -> Epoch:
        return self.core.epochs[-1]

    @property
    def is_sync_master(self) -> bool:
        return self.config.broker_role is BrokerRole.SYNC_MASTER

    # -- puts ------------------------------------------------------------------------------

    def put(self, message_id: int, topic: int, queue_id: int, payload_size: int,
            op: str = "", body: bytes = b"") -> Put:
        """A message, or a metadata record (`op` and its `body`), appended and dispatched."""
        start, end = self.disk.append_record(message_id, topic, queue_id, payload_size, op,
                                             body)
        self.disk.dispatch()
        put = Put(message_id, start, end, bytes(self.disk.data[start:end]), self.epoch)
        flushed = PutCompletion.done(PutMessageStatus.PUT_OK)
        if self.sync_flush:
            flushed = PutCompletion(pending=self.flush_waits.add(
                end, self.world.now_ms + FLUSH_TIMEOUT_MS))
            self._schedule_flush(1)
        replicated = PutCompletion.done(PutMessageStatus.PUT_OK)
        if self.is_sync_master:  # ha/service.py's replication_completion
            deadline_ms = self.core.put_deadline_ms(end, self.world.now_ms)
            replicated = (PutCompletion.done(PutMessageStatus.SLAVE_NOT_AVAILABLE)
                          if deadline_ms is None
                          else PutCompletion(pending=self.waits.add(end, deadline_ms)))
        answer = PutCompletion.combine(flushed, replicated)
        answer.add_callback(lambda status: self.world.put_answered(self, put, status))
        for conn in self.core.connections:  # the append listener wakes every writer
            self._wake_writer(conn)
        return put

    def _schedule_flush(self, delay_ms: int) -> None:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.world.schedule(delay_ms, f"{self.name} flush", self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        if self.running:
            self.flush_waits.advance(self.disk.flush())

    def expire(self) -> None:
        """The deadline service's round."""
        if self.running:
            self.waits.expire(self.world.now_ms)
            self.flush_waits.expire(self.world.now_ms)

    # -- connections -----------------------------------------------------------------------

    def accept(self, connection: Connection) -> None:
        conn = MasterConn(SlaveLink(connection.slave_name, self.world.now_ms), connection,
                          self.world.now_ms)
        oldest = self.core.opened(conn)
        if oldest is not None:
            self.close(oldest, "dropped: too many connections in the handshake")
        self.world.send(connection, False, Hello())

    def conn_of(self, connection: Connection) -> MasterConn | None:
        for conn in self.core.connections:
            if conn.connection is connection:
                return conn
        return None

    def receive(self, connection: Connection, message: Message) -> None:
        conn = self.conn_of(connection)
        if conn is None or not conn.link.is_open:
            return
        conn.last_read_ms = self.world.now_ms
        if isinstance(message, Answer):
            self._on_answer(conn, message)
        elif isinstance(message, Report):
            self._on_report(conn, message.offset)

    def _on_answer(self, conn: MasterConn, answer: Answer) -> None:
        if not answer.proves_secret:
            self.close(conn, "protocol error: handshake failed: the slave did not prove the "
                             "secret")
            return
        conn.link.identified(answer.slave_id)
        refusal, stale = self.core.handshake_done(conn)
        if refusal:
            self.close(conn, refusal)
            return
        for old in stale:
            self.close(old, "replaced by a new connection of the same slave")
        conn.link.slotted()
        decision = self.core.agree(answer.epochs, answer.max_offset, self.disk.end,
                                   self.disk.min_offset)
        self.world.send(conn.connection, False, Agreed(decision, tuple(self.core.epochs)))
        refusal = conn.link.agreed(decision, answer.max_offset)
        if refusal:
            self.close(conn, refusal)

    def _on_report(self, conn: MasterConn, offset: int) -> None:
        outcome = conn.link.report(offset, self.disk.end, self.disk.min_offset,
                                   self.world.now_ms)
        if outcome.close_reason:
            self.close(conn, outcome.close_reason)
            return
        self.world.link_event(self, conn)
        step = self.core.acked(conn)
        if step.unreplicable_end_offset:
            self.waits.complete_through(step.unreplicable_end_offset,
                                        PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self.waits.advance(step.replicated_offset)
        if outcome.started:
            self._wake_writer(conn)

    def close(self, conn: MasterConn, reason: str, state: LinkState = LinkState.CLOSED) -> None:
        if not conn.link.close(reason, state):
            return
        self.core.closed(conn)
        self.world.hang_up(conn.connection, True)

    def peer_gone(self, connection: Connection, reason: str) -> None:
        conn = self.conn_of(connection)
        if conn is not None:
            self.close(conn, reason)

    def housekeeping(self) -> None:
        """The readers' socket timeouts: a handshake past its deadline, a silent slave."""
        now = self.world.now_ms
        for conn in list(self.core.connections):
            if conn.link.state is LinkState.HANDSHAKE:
                if now - conn.link.connected_ms >= self.config.ha_handshake_timeout_ms:
                    self.close(conn, "protocol error: handshake not finished in time")
            elif now - conn.last_read_ms >= self.config.ha_housekeeping_interval_ms:
                self.close(conn, f"no report for {self.config.ha_housekeeping_interval_ms} ms "
                                 "(housekeeping)")

    # -- the writer ------------------------------------------------------------------------

    def _wake_writer(self, conn: MasterConn) -> None:
        if not conn.writer_busy and not conn.writer_scheduled and conn.link.is_open:
            conn.writer_scheduled = True
            self.world.schedule(0, f"{self.name} write {conn.connection.connection_id}",
                                lambda: self.write(conn))

    def write(self, conn: MasterConn) -> None:
        """One turn of the writer loop: a batch, a heartbeat, or an idle wait."""
        conn.writer_scheduled = False
        link = conn.link
        if not link.is_open or not self.running or conn.writer_busy:
            return
        if link.state is not LinkState.TRANSFERRING:
            self._poll_writer(conn, WRITER_IDLE_WAIT_MS)
            return
        if link.bytes_to_send(self.disk.end):
            self._send_batch(conn)
            return
        if link.heartbeat_due(self.world.now_ms, self.config.ha_send_heartbeat_interval_ms):
            self.world.send(conn.connection, False, Frame(link.transfer_from_offset, b""))
            link.heartbeat_sent(self.world.now_ms)
        self._poll_writer(conn, min(WRITER_IDLE_WAIT_MS,
                                    self.config.ha_send_heartbeat_interval_ms))

    def _poll_writer(self, conn: MasterConn, delay_ms: int) -> None:
        conn.writer_scheduled = True
        self.world.schedule(delay_ms, f"{self.name} write-poll {conn.connection.connection_id}",
                            lambda: self.write(conn))

    def _send_batch(self, conn: MasterConn) -> None:
        link = conn.link
        start = link.transfer_from_offset
        if start < self.disk.min_offset:  # the transfer source is gone (retention)
            self.close(conn, link.source_gone(start))
            return
        size = min(self.batch_size_bytes, self.disk.end - start,
                   FILE_SIZE_BYTES - start % FILE_SIZE_BYTES)
        link.sending(start, size)
        body = bytes(self.disk.data[start:start + size])
        self.world.send(conn.connection, False, Frame(start, body))
        conn.writer_busy = True
        # The send returns once the peer's buffer took the bytes: later when the pipe stalls.
        pipe = conn.connection.to_slave
        done_ms = max(self.world.now_ms, pipe.stalled_until_ms)
        if done_ms - self.world.now_ms >= self.config.ha_housekeeping_interval_ms:
            self.world.schedule(self.config.ha_housekeeping_interval_ms,
                                f"{self.name} send-timeout {conn.connection.connection_id}",
                                lambda: self.close(conn, "send failed: slave took no bytes"))
            return
        self.world.schedule(done_ms - self.world.now_ms,
                            f"{self.name} sent {conn.connection.connection_id}",
                            lambda: self._sent(conn, start, size))

    def _sent(self, conn: MasterConn, start: int, size: int) -> None:
        conn.writer_busy = False
        if not conn.link.is_open or not self.running:
            return
        conn.link.sent(start, size, self.world.now_ms)
        self._wake_writer(conn)

    # -- stopping --------------------------------------------------------------------------

    def stop(self, crashed: bool) -> None:
        """A clean stop answers waiting puts FLUSH_SLAVE_TIMEOUT (they are stored); a crash
        answers nothing: the producers see their connections drop. The connections close
        (whether their peers hear of it is the network's business)."""
        self.running = False
        for conn in list(self.core.connections):
            self.close(conn, "master stopping")
        if not crashed:
            self.waits.fail_all(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
            self.flush_waits.fail_all(PutMessageStatus.FLUSH_DISK_TIMEOUT)


@dataclass
class SlaveSide:
    """A slave's HA client: one connection at a time to the master it is pointed at."""

    world: World
    name: str
    slave_id: str
    disk: SimDisk
    config: HAConfig
    master_name: str
    sync_flush: bool
    liar: bool = False  # reports more than it was sent (a fake ack)
    proves_secret: bool = True
    core: SlaveCore = field(init=False)
    connection: Connection | None = None
    reconnect_scheduled: bool = False
    first_report_pending: bool = False
    running: bool = True
    cut_bytes_total: int = 0  # what the invariants saw it cut back, this process

    def __post_init__(self) -> None:
        self.core = SlaveCore(self.config, sync_flush=self.sync_flush)

    def connect(self) -> None:
        self.reconnect_scheduled = False
        if not self.running or self.connection is not None:
            return
        self.connection = self.world.accept(self)
        if self.connection is None:  # nobody listens there: try again later
            self._reconnect_later()
            return
        connection = self.connection
        self.world.schedule(self.config.ha_handshake_timeout_ms, f"{self.name} handshake-deadline",
                            lambda: self._handshake_deadline(connection))

    def _handshake_deadline(self, connection: Connection) -> None:
        if self.connection is connection and not self.core.connected:
            self.drop("handshake not finished in time")

    def _reconnect_later(self) -> None:
        if not self.reconnect_scheduled and self.running:
            self.reconnect_scheduled = True
            self.world.schedule(self.config.ha_reconnect_interval_ms, f"{self.name} reconnect",
                                self.connect)

    def drop(self, reason: str) -> None:
        """This end closes its connection (an error, a refusal, silence) and reconnects."""
        connection = self.connection
        if connection is None:
            return
        self.connection = None
        self.core.disconnected()
        self.world.hang_up(connection, False)
        self._reconnect_later()

    def receive(self, connection: Connection, message: Message) -> None:
        if connection is not self.connection or not self.running:
            return
        if isinstance(message, Hello):
            self.world.send(connection, True, Answer(self.slave_id, self.proves_secret,
                                                     tuple(self.disk.epochs), self.disk.end))
        elif isinstance(message, Agreed):
            self._on_agreed(message)
        elif isinstance(message, Frame):
            self._on_frame(message)

    def _on_agreed(self, agreed: Agreed) -> None:
        step = self.core.agreement(agreed.decision, agreed.epochs, self.disk.end,
                                   self.disk.min_offset)
        if step.refusal is not None:
            self.drop(f"refused: {step.refusal}")
            return
        if step.cut_to_offset is not None:
            old_end = self.disk.end
            cleared_bytes = self.disk.truncate(step.cut_to_offset)
            self.world.slave_cut(self, old_end, self.disk.end, cleared_bytes)
        self.disk.epochs = list(step.history)
        self.core.linked(self.world.now_ms)
        self.first_report_pending = True
        self.report()
        connection = self.connection
        self.world.schedule(CLIENT_POLL_MS, f"{self.name} poll", lambda: self.poll(connection))

    def _on_frame(self, frame: Frame) -> None:
        core = self.core
        core.received(self.world.now_ms)
        if not core.frame(frame.offset, len(frame.body)):
            return
        if self.disk.is_empty and frame.offset % FILE_SIZE_BYTES == 0 and frame.offset > 0:
            self.world.bootstrap_metadata(self)  # retention removed records it lacks
        outcome = core.applied(self.disk.append_raw(frame.offset, frame.body), len(frame.body))
        if outcome is not ApplyOutcome.APPLIED:
            self.drop(f"master pushed offset {frame.offset} at {self.disk.end}")
            return
        dispatched_end = self.disk.dispatched_end
        self.disk.dispatch()
        self.world.records_arrived(self.name, dispatched_end)
        if core.flushes_before_reporting:
            self.disk.flush()
        self.report()

    def report(self) -> None:
        connection = self.connection
        assert connection is not None
        offset = self.core.report_offset(self.disk.end, self.disk.flushed_end)
        self.world.slave_reported(self, offset, self.first_report_pending)
        if self.liar and not self.first_report_pending:
            offset += 1 + self.disk.end % 997  # a fake ack: more than it holds
        self.first_report_pending = False
        self.world.send(connection, True, Report(offset))
        self.core.reported(self.world.now_ms)

    def poll(self, connection: Connection | None) -> None:
        """The client loop's turn when recv times out: housekeeping, then a heartbeat."""
        if connection is None or connection is not self.connection or not self.running:
            return
        now = self.world.now_ms
        if self.core.silent_too_long(now):
            self.drop("nothing from the master")
            return
        if self.core.report_due(now):
            self.report()
        self.world.schedule(CLIENT_POLL_MS, f"{self.name} poll", lambda: self.poll(connection))

    def peer_gone(self, connection: Connection) -> None:
        if connection is self.connection:
            self.drop("master closed the connection")

    def stop(self) -> None:
        self.running = False
        self.drop("slave stopping")


@dataclass
class SimBroker:
    name: str
    node_id: bytes
    disk: SimDisk
    sync_flush: bool
    liar: bool = False
    foreign: bool = False
    master: MasterSide | None = None
    slave: SlaveSide | None = None
    up: bool = True
    incarnation: int = 0

    @property
    def is_master(self) -> bool:
        return self.up and self.master is not None and self.master.running

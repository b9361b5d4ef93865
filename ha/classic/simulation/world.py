"""The World the simulated brokers see (ha/classic/simulation/brokers.py's Protocol): the
simulated network (connections accepted, frames sent with latency, stalls and corruption,
hang-ups heard after what is in flight) and the invariants' hooks."""

from __future__ import annotations

from ha.classic.simulation.base import SimulationBase
from ha.classic.simulation.brokers import MasterConn, MasterSide, Put, SlaveSide
from ha.classic.simulation.network import Connection, Message
from store.status import PutMessageStatus


class SimulationWorld(SimulationBase):
    # -- the network (World) ---------------------------------------------------------------

    def accept(self, slave: SlaveSide) -> Connection | None:
        broker = self.brokers[slave.master_name]
        if not broker.is_master or broker.master is None:
            return None  # connection refused
        self._connection_ids += 1
        owner = self.brokers[slave.name]
        connection = Connection(self._connection_ids, slave.name, broker.name,
                                broker.incarnation, owner.incarnation)
        broker.master.accept(connection)
        return connection

    def send(self, connection: Connection, to_master: bool, message: Message) -> None:
        if connection.broken:
            return
        pipe = connection.to_master if to_master else connection.to_slave
        latency_ms = self.rng.randint(0, self.faults.latency_ms_max) if self._faulty() else 1
        arrival_ms = pipe.arrival_ms(self.now_ms, latency_ms)
        corrupt = self._faulty() and self.rng.random() < self.faults.corrupt_rate
        self.schedule(arrival_ms - self.now_ms, f"deliver #{connection.connection_id}",
                      lambda: self._deliver(connection, to_master, message, corrupt))

    def _deliver(self, connection: Connection, to_master: bool, message: Message,
                 corrupt: bool) -> None:
        if connection.broken:
            return
        if to_master:
            master = self._master_end(connection)
            if master is None:
                return
            if corrupt:
                master.peer_gone(connection, "protocol error: frame failed authentication")
            else:
                master.receive(connection, message)
            return
        slave = self._slave_end(connection)
        if slave is None:
            return
        if corrupt:
            slave.drop("protocol error: frame failed authentication")
        else:
            slave.receive(connection, message)

    def _master_end(self, connection: Connection) -> MasterSide | None:
        broker = self.brokers[connection.master_name]
        if (not connection.master_open or broker.incarnation != connection.master_incarnation
                or not broker.is_master):
            return None
        return broker.master

    def _slave_end(self, connection: Connection) -> SlaveSide | None:
        broker = self.brokers[connection.slave_name]
        if (not connection.slave_open or broker.incarnation != connection.slave_incarnation
                or broker.slave is None):
            return None
        return broker.slave

    def hang_up(self, connection: Connection, from_master: bool) -> None:
        """One end closes: the other hears of it after what is in flight, unless cut."""
        if from_master:
            connection.master_open = False
        else:
            connection.slave_open = False
        if connection.broken:
            return
        pipe = connection.to_slave if from_master else connection.to_master
        arrival_ms = pipe.arrival_ms(self.now_ms, self.rng.randint(0, 2))
        self.schedule(arrival_ms - self.now_ms, f"hang-up #{connection.connection_id}",
                      lambda: self._peer_closed(connection, from_master))

    def _peer_closed(self, connection: Connection, from_master: bool) -> None:
        if connection.broken:
            return
        if from_master:
            slave = self._slave_end(connection)
            if slave is not None:
                slave.peer_gone(connection)
        else:
            master = self._master_end(connection)
            if master is not None:
                master.peer_gone(connection, "slave closed the connection")

    # -- the invariants' hooks (World) -----------------------------------------------------

    def put_answered(self, master: MasterSide, put: Put, status: PutMessageStatus) -> None:
        self.invariants.put_answered(self, master, put, status)

    def link_event(self, master: MasterSide, conn: MasterConn) -> None:
        self.invariants.acked(self, master, conn)

    def slave_reported(self, slave: SlaveSide, offset: int, first: bool) -> None:
        self.invariants.slave_reported(slave, offset, first)

    def slave_cut(self, slave: SlaveSide, old_end: int, new_end: int,
                  cleared_bytes: int) -> None:
        self.invariants.bytes_lost(slave.name, new_end, old_end, cleared_bytes)
        self.invariants.slave_cut(slave, cleared_bytes)

    def records_arrived(self, broker_name: str, start: int) -> None:
        self.invariants.records_arrived(self.brokers[broker_name].disk, broker_name, start)

    def bootstrap_metadata(self, slave: SlaveSide) -> None:
        """Slave sync's bootstrap (app/broker/slave_sync.py), for a slave whose applied
        position is below what the master's log still holds: the master's tables as its
        retained records' base says, at the position the slave's log will start from."""
        master = self.brokers[slave.master_name].disk
        slave.disk.bootstrap_metadata(master.metadata_base, master.queue_base)

"""Brokers of the classic-replication simulation started as master or slave (with their
periodic rounds), stopped by a kill or a power cut, and restarted."""

from __future__ import annotations

from collections.abc import Callable

from ha.classic.simulation.brokers import MasterSide, Put, SimBroker, SlaveSide
from ha.classic.simulation.network import Connection
from ha.classic.simulation.timers import master_timer_rounds
from ha.classic.simulation.world import SimulationWorld
from ha.config import HAConfig
from store.status import BrokerRole

EXPIRE_EVERY_MS = 20
HOUSEKEEPING_EVERY_MS = 50
SLAVE_SYNC_FLUSH_EVERY_MS = 10  # store/flush.py's group-commit idle round
TIMER_EVERY_MS = 10  # the master's scheduler's round


class BrokerLifecycle(SimulationWorld):
    # -- brokers ---------------------------------------------------------------------------

    def _config(self, role: BrokerRole, master_name: str | None = None) -> HAConfig:
        values = {name: getattr(self.base_config, name)
                  for name in HAConfig.__dataclass_fields__}
        return HAConfig(**{**values, "broker_role": role,
                           "ha_master_address": "sim:1" if master_name else None})

    def _start_master(self, broker: SimBroker) -> None:
        broker.slave = None
        broker.master = MasterSide(self, broker.name, broker.node_id, broker.disk,
                                   self._config(self.master_role), broker.sync_flush,
                                   self.batch_size_bytes)
        self.invariants.master_started(broker.name, broker.master.epoch)
        self._every(broker, EXPIRE_EVERY_MS, "expire", lambda m: m.expire())
        self._every(broker, HOUSEKEEPING_EVERY_MS, "housekeeping", lambda m: m.housekeeping())
        if not broker.sync_flush:
            self._every(broker, self.faults.flush_interval_ms, "flush", lambda m: m.flush())
        if self.timers:
            self._every(broker, TIMER_EVERY_MS, "timers", master_timer_rounds(self, broker.name))

    def timer_put_taken(self, broker_name: str, put: Put) -> None:
        self.invariants.put_taken(broker_name, put)

    def _every(self, broker: SimBroker, interval_ms: int, label: str,
               action: Callable[[MasterSide], None]) -> None:
        master, incarnation = broker.master, broker.incarnation

        def step() -> None:
            if broker.master is master and broker.incarnation == incarnation and \
                    master is not None and master.running:
                action(master)
                self.schedule(interval_ms, f"{broker.name} {label}", step)

        self.schedule(interval_ms, f"{broker.name} {label}", step)

    def _start_slave(self, broker: SimBroker) -> None:
        broker.master = None
        slave_id = broker.node_id.hex()
        broker.slave = SlaveSide(self, broker.name, slave_id, broker.disk,
                                 self._config(BrokerRole.SLAVE, self.leader), self.leader,
                                 broker.sync_flush, liar=broker.liar)
        slave, incarnation = broker.slave, broker.incarnation
        flush_every_ms = (SLAVE_SYNC_FLUSH_EVERY_MS if broker.sync_flush
                          else self.faults.flush_interval_ms)

        def flush() -> None:
            if broker.slave is slave and broker.incarnation == incarnation and slave.running:
                broker.disk.flush()
                self.schedule(flush_every_ms, f"{broker.name} flush", flush)

        self.schedule(flush_every_ms, f"{broker.name} flush", flush)
        broker.slave.connect()

    def _stop(self, broker: SimBroker, power_cut: bool) -> None:
        """A kill (the page cache survives, peers hear the sockets close) or a power cut
        (unflushed bytes are lost, peers hear nothing)."""
        broker.up = False
        if power_cut:
            for connection in self._connections_of(broker):
                connection.broken = True
        if broker.master is not None:
            broker.master.stop(crashed=True)
        if broker.slave is not None:
            broker.slave.stop()
        broker.incarnation += 1
        disk = broker.disk
        end, unflushed_from = disk.end, disk.flushed_end
        unflushed = bytes(disk.data[unflushed_from:])
        if power_cut:
            disk.lose_unflushed(self.rng.randint(disk.flushed_end, disk.end))
        recovered_end = disk.recover()
        self.invariants.bytes_lost(broker.name, recovered_end, end)
        if power_cut and recovered_end < end:  # what was not flushed, torn records with it
            self.invariants.power_cut(broker.name, recovered_end,
                                      unflushed[recovered_end - unflushed_from:])
        self.invariants.restarted(broker.name, disk)

    def _connections_of(self, broker: SimBroker) -> list[Connection]:
        found: list[Connection] = []
        if broker.master is not None:
            found += [conn.connection for conn in broker.master.core.connections]
        if broker.slave is not None and broker.slave.connection is not None:
            found.append(broker.slave.connection)
        return found

    def _restart(self, broker: SimBroker) -> None:
        if broker.up:
            return
        broker.up = True
        if broker.name == self.leader:
            self._start_master(broker)
        else:
            if broker.master is not None:
                self.rejoins += 1
            self._start_slave(broker)

"""The nemesis and the operator of the classic-replication simulation: connections cut
(heard by both sides, one or none) and stalled, brokers crashed, fail-overs by hand (the
most advanced slave promoted once the master is down, or a forced promotion while it is
up), retention with the master's metadata snapshot before it, and the heal."""

from __future__ import annotations

from collections.abc import Callable

from ha.classic.simulation.brokers import SimBroker
from ha.classic.simulation.disk import FILE_SIZE_BYTES, METADATA_TOPIC
from ha.classic.simulation.lifecycle import BrokerLifecycle
from ha.classic.simulation.network import Connection
from store.metadata.log_records import encode
from store.system_topics import OP_SNAPSHOT


class Nemesis(BrokerLifecycle):
    # -- the nemesis and the operator ------------------------------------------------------

    def _nemesis(self) -> None:
        if not self._faulty():
            return
        choice = self.rng.random()
        if choice < 0.25:
            self._cut_a_connection()
        elif choice < 0.4:
            self._stall_a_connection()
        elif choice < 0.6:
            self._crash_someone()
        elif choice < 0.72:
            self._fail_over(forced=False)
        elif choice < 0.8:
            self._fail_over(forced=True)
        else:
            self._retention()
        self.schedule(self.faults.nemesis_every_ms, "nemesis", self._nemesis)

    def _all_connections(self) -> list[Connection]:
        found: list[Connection] = []
        for broker in self.brokers.values():
            if broker.is_master and broker.master is not None:
                found += [conn.connection for conn in broker.master.core.connections]
        return found

    def _cut_a_connection(self) -> None:
        """A cut each side hears of (a reset), one side hears of, or neither (half-open)."""
        connections = self._all_connections()
        if not connections:
            return
        connection = self.rng.choice(connections)
        connection.broken = True
        heard = self.rng.choice(["both", "master", "slave", "none"])
        delay_ms = self.rng.randint(0, 30)
        if heard in ("both", "master"):
            self.schedule(delay_ms, "cut-heard", lambda: self._heard_cut(connection, True))
        if heard in ("both", "slave"):
            self.schedule(delay_ms, "cut-heard", lambda: self._heard_cut(connection, False))

    def _heard_cut(self, connection: Connection, at_master: bool) -> None:
        connection.broken = False  # only to find the end; nothing passes a broken link
        end = self._master_end(connection) if at_master else None
        slave = None if at_master else self._slave_end(connection)
        connection.broken = True
        if end is not None:
            end.peer_gone(connection, "socket error: connection reset")
        if slave is not None:
            slave.drop("connection reset")

    def _stall_a_connection(self) -> None:
        connections = self._all_connections()
        if connections:
            connection = self.rng.choice(connections)
            pipe = self.rng.choice([connection.to_slave, connection.to_master])
            pipe.stalled_until_ms = self.now_ms + self.rng.randint(10, self.faults.stall_ms_max)

    def _crash_someone(self) -> None:
        up = [b for b in self.brokers.values() if b.up and not b.foreign]
        if not up:
            return
        broker = self.rng.choice(up)
        self._stop(broker, power_cut=self.rng.random() < 0.4)
        self.schedule(self.rng.randint(50, 800), f"restart {broker.name}",
                      lambda: self._restart(broker))

    def _candidates(self) -> list[SimBroker]:
        """Slaves (or brokers down, which restart as slaves) that may be promoted."""
        return [b for b in self.brokers.values()
                if b.name != self.leader and not b.foreign and not b.liar
                and (b.slave is not None or not b.up)]

    def _fail_over(self, forced: bool) -> None:
        """The operator promotes a slave: the most advanced one once the master is down, or
        any one by force while it is up; the old master comes back as a slave."""
        old = self.brokers[self.leader]
        candidates = self._candidates()
        if not candidates or not self._faulty():
            return
        if not forced and old.up:  # the master dies; the operator promotes a little later
            self._stop(old, power_cut=self.rng.random() < 0.4)
            self.schedule(self.rng.randint(100, 600), "fail-over",
                          lambda: self._fail_over(forced=False))
            self.schedule(self.rng.randint(700, 1500), f"restart {old.name}",
                          lambda: self._restart(old))
            return
        if forced:
            candidates = [b for b in candidates if b.up and b.slave is not None]
            if not old.up or not candidates:
                return
            candidate = self.rng.choice(candidates)
        else:
            # The operator's pick (docs/replication.md): the slave furthest ahead among those
            # that agreed with the master in its last epoch, else the furthest ahead.
            assert old.master is not None
            epoch = old.master.epoch
            lineage = [b for b in candidates if b.disk.epochs and b.disk.epochs[-1] == epoch]
            candidate = max(lineage or candidates, key=lambda b: (b.disk.end, b.name))
            if not candidate.up:
                self._restart(candidate)
            assert candidate.slave is not None
            if candidate.slave.core.connected:  # refused: the master is still heard from
                return
            if lineage:
                self.invariants.promoted_holds_promises(self, candidate, old.name, epoch.number)
        self._promote(candidate, old, forced)

    def _promote(self, candidate: SimBroker, old: SimBroker, forced: bool) -> None:
        assert candidate.slave is not None
        candidate.slave.stop()
        candidate.incarnation += 1  # a new role: what its old connections carry is stale
        disk = candidate.disk
        disk.dispatch()
        if disk.dispatched_end < disk.end:  # store.change_role: cut a torn record
            end = disk.end
            disk.truncate(disk.dispatched_end)
            self.invariants.bytes_lost(candidate.name, disk.end, end)
        self.invariants.promoted(candidate, old)
        self.leader = candidate.name
        self._start_master(candidate)
        self.promotions += 1
        self.forced_promotions += forced
        for broker in self.brokers.values():
            if broker is candidate or broker is old or broker.slave is None:
                continue
            delay_ms = self.rng.randint(0, 300) if forced else 0
            self.schedule(delay_ms, f"repoint {broker.name}", self._repointer(broker))
        if forced:
            self.schedule(self.rng.randint(0, 500), f"demote {old.name}",
                          lambda: self._demote(old))

    def _repointer(self, broker: SimBroker) -> Callable[[], None]:
        return lambda: self._repoint(broker)

    def _repoint(self, broker: SimBroker) -> None:
        slave = broker.slave
        if slave is not None and broker.up and slave.master_name != self.leader:
            slave.master_name = self.leader
            slave.drop("pointed at the new master")

    def _demote(self, broker: SimBroker) -> None:
        if broker.up and broker.master is not None and broker.name != self.leader:
            broker.master.stop(crashed=False)
            broker.incarnation += 1
            self.rejoins += 1
            self._start_slave(broker)

    def _retention(self) -> None:
        leader = self.brokers[self.leader]
        if leader.is_master:
            keep_from = (leader.disk.end // FILE_SIZE_BYTES - 3) * FILE_SIZE_BYTES
            if keep_from > leader.disk.min_offset:
                if leader.disk.needs_snapshot_before(keep_from):
                    self._write_snapshot(leader)
                leader.disk.retain_from(keep_from)

    def _write_snapshot(self, leader: SimBroker) -> None:
        """The master's snapshot of its tables, its parts appended together (what
        app/broker/metadata_snapshots.py writes before retention removes the last one)."""
        assert leader.master is not None
        for part in leader.disk.snapshot_parts():
            self._message_ids += 1
            put = leader.master.put(self._message_ids, METADATA_TOPIC, 0, 0, OP_SNAPSHOT,
                                    encode(part))
            self.invariants.put_taken(leader.name, put)
            self.metadata_records += 1

    def _heal(self) -> None:
        """Faults stop: every broker comes back, the leader as master, the rest its slaves."""
        for connection in self._all_connections():
            connection.to_slave.stalled_until_ms = connection.to_master.stalled_until_ms = 0
        leader = self.brokers[self.leader]
        if not leader.up:
            self._restart(leader)
        for broker in self.brokers.values():
            if not broker.up:
                self._restart(broker)
            elif broker.name != self.leader and broker.master is not None:
                self._demote(broker)
            else:
                self._repoint(broker)

"""A seeded deterministic simulation of classic replication driving the real cores.

One master and one to three slaves (sometimes a lying slave that acks more than it was sent,
and a foreign broker whose log is another master's), with producers, consumers and the
metadata records of the log (topics created, changed, deleted and created again, groups,
offset commits: ha/classic/simulation/clients.py, applied as metadata.py says), over a
simulated network (latency, stalls, cuts seen by one side or none, frames whose tags fail) and
simulated disks (a kill keeps the page cache, a power cut loses what was not flushed). An
operator fails over by hand: promotes the most advanced slave when the master is down, or
forces a promotion while it is up, and brings the old master back as a slave (ha/classic/
simulation/brokers.py is the glue; MasterCore, SlaveLink, SlaveCore, OffsetWaits and
PutCompletion are the real ones).

One `random.Random(seed)` draws the run's configuration and fault mix (swarm testing), then
every event; events sit in one heap ordered by (time, sequence), so a seed replays exactly:

    python -m ha.classic.simulation.sim --seed 1234         # replay one run
    python -m ha.classic.simulation.sim --seeds 10000 --workers 2   # many, prints count and time

The invariants (ha/classic/simulation/invariants.py) are checked after every event; then the
faults stop, every broker comes back as the last master's slave, and the group must converge.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

from ha.classic.core.epochs import Epoch
from ha.classic.simulation.brokers import MasterConn, MasterSide, Put, SimBroker, SlaveSide
from ha.classic.simulation.clients import next_write, timer_write
from ha.classic.simulation.disk import FILE_SIZE_BYTES, METADATA_TOPIC, SimDisk
from ha.classic.simulation.invariants import Invariants, InvariantViolation
from ha.classic.simulation.network import Connection, Faults, Message
from ha.classic.simulation.results import SimResult, summary
from ha.classic.simulation.timers import master_timer_rounds
from ha.config import HAConfig
from ha.seeded_runs import main as seeded_main
from ha.seeded_runs import run_pooled
from ha.sim_timers import DELAY_TICKS_MAX, SIM_PLAN, delayed_put
from store.metadata.log_records import encode
from store.status import BrokerRole, PutMessageStatus
from store.system_topics import OP_SNAPSHOT

EVENTS_MAX = 300_000  # a bound on one run, whatever the seed draws
CHUNK_SEEDS = 25  # seeds per task handed to a worker process
EXPIRE_EVERY_MS = 20
HOUSEKEEPING_EVERY_MS = 50
SLAVE_SYNC_FLUSH_EVERY_MS = 10  # store/flush.py's group-commit idle round
TIMER_SHARE = 0.1  # of the puts while faults last: a delayed message (ha/sim_timers.py)
TIMER_EVERY_MS = 10  # the master's scheduler's round


class SimulationFailure(AssertionError):
    """An invariant or an assertion broke; the message names the seed and the event."""


class Simulation:
    def __init__(self, seed: int, fault_ms: int = 3500, heal_ms: int = 2500,
                 strict_metadata: bool = False, timers: bool = True) -> None:
        """`timers`: delayed messages in the mix (without them, a seed runs as it did before
        they were added: the tests that pin a finding to a seed keep it)."""
        self.seed = seed
        self.timers = timers
        self.rng = random.Random(seed)
        rng = self.rng
        self.faults = Faults.draw(rng)
        self.fault_ms, self.end_ms = fault_ms, fault_ms + heal_ms
        slave_count = rng.choice([1, 2, 2, 3])
        in_sync_replicas = rng.choice([2, 2, 3])
        self.master_role = rng.choice([BrokerRole.SYNC_MASTER] * 4 + [BrokerRole.ASYNC_MASTER])
        self.base_config = HAConfig(
            broker_role=self.master_role, ha_send_heartbeat_interval_ms=100,
            ha_housekeeping_interval_ms=rng.choice([300, 1000]), ha_reconnect_interval_ms=100,
            ha_handshake_timeout_ms=500, slave_timeout_ms=rng.choice([200, 600, 2000]),
            in_sync_replicas=in_sync_replicas,
            ha_slave_fall_behind_bytes_max=rng.choice([2048, 64 * 1024, 1 << 30]),
            # As few slots as slaves at times: the foreign broker takes one while it is
            # refused, so a slave may be refused a slot for a while, never for good.
            ha_connections_max=rng.choice([max(slave_count, in_sync_replicas - 1),
                                           slave_count + 1, 16]),
            ha_handshakes_max=rng.choice([1, 8]))
        self.batch_size_bytes = rng.choice([700, 4096])
        self.metadata_share = rng.choice([0.05, 0.2, 0.4])  # of the puts: metadata records
        self.persist_every_ms = rng.choice([100, 1000, 5000])  # consumer offsets' flush
        self.metadata_records = 0
        self.invariants = Invariants(self.base_config.in_sync_replicas,
                                     strict_metadata=strict_metadata)
        self.now_ms = 0
        self._heap: list[tuple[int, int, str, Callable[[], None]]] = []
        self._sequence = 0
        self._events = 0
        self._last_label = "start"
        self._connection_ids = 0
        self._message_ids = 0
        self.brokers: dict[str, SimBroker] = {}
        for index in range(slave_count + 1):
            name = f"b{index}"
            self.brokers[name] = SimBroker(name, name.encode().ljust(16, b"."), SimDisk(),
                                           sync_flush=rng.random() < 0.4)
        if rng.random() < 0.15 and slave_count > 1:
            self.brokers[f"b{slave_count}"].liar = True
        if rng.random() < 0.2:
            self.brokers["f"] = self._foreign_broker()
        self.leader = "b0"
        self.promotions = self.forced_promotions = self.rejoins = 0

    def _foreign_broker(self) -> SimBroker:
        """A broker whose log another master wrote: the master must refuse it (diverged)."""
        disk = SimDisk()
        for message_id in range(1, self.rng.randint(2, 6)):
            disk.append_record(10_000_000 + message_id, 1, 0, self.rng.randint(10, 300))
            disk.dispatch()
        disk.flush()
        disk.epochs = [Epoch(1, 0, b"foreign-master.."), Epoch(2, 100, b"foreign-master..")]
        return SimBroker("f", b"f".ljust(16, b"."), disk, sync_flush=False, foreign=True)

    # -- the event loop --------------------------------------------------------------------

    def run(self) -> SimResult:
        self._start_master(self.brokers["b0"])
        for broker in self.brokers.values():
            if broker.name != "b0":
                self._start_slave(broker)
        self.schedule(1, "put", self._put)
        self.schedule(5, "consume", self._consume)
        self.schedule(self.persist_every_ms, "persist", self._persist)
        self.schedule(self.faults.nemesis_every_ms, "nemesis", self._nemesis)
        self.schedule(self.fault_ms, "heal", self._heal)
        while self._heap and self._events < EVENTS_MAX:
            self.now_ms, _, label, action = heapq.heappop(self._heap)
            if self.now_ms > self.end_ms:
                break
            self._events += 1
            self._last_label = label
            try:
                action()
                self.invariants.after_event(self)
            except AssertionError as error:
                raise self._failure(error) from error
        try:
            self.invariants.converged(self)
        except AssertionError as error:
            raise self._failure(error) from error
        return SimResult(self.seed, self._events, self.invariants.put_ok_count, self.promotions,
                         self.forced_promotions, self.rejoins,
                         sum(self.invariants.cut_bytes.values()), self.metadata_records,
                         self.invariants.metadata_lost, self.invariants.metadata_checks_on,
                         self.invariants.promotions_metadata_checked,
                         len(self.brokers[self.leader].disk.timers.delivered))

    def _failure(self, error: AssertionError) -> SimulationFailure:
        kind = "invariant" if isinstance(error, InvariantViolation) else "assertion"
        return SimulationFailure(
            f"seed={self.seed} {kind} broke at event #{self._events} t={self.now_ms} ms "
            f"{self._last_label}: {error}\n"
            f"replay: python -m ha.classic.simulation.sim --seed {self.seed}")

    def schedule(self, delay_ms: int, label: str, action: Callable[[], None]) -> None:
        assert delay_ms >= 0
        self._sequence += 1
        heapq.heappush(self._heap, (self.now_ms + delay_ms, self._sequence, label, action))

    def _faulty(self) -> bool:
        return self.now_ms < self.fault_ms

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

    def next_message_id(self) -> int:
        self._message_ids += 1
        return self._message_ids

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

    # -- clients ---------------------------------------------------------------------------

    def _put(self) -> None:
        masters = [b for b in self.brokers.values() if b.is_master]
        if masters:
            broker = self.rng.choice(masters)
            assert broker.master is not None
            message_id = self.next_message_id()
            if self.timers and self._faulty() and self.rng.random() < TIMER_SHARE:
                level = self.rng.choice((None, None, None, 1, SIM_PLAN.level_count))
                write = timer_write(delayed_put(message_id, self.now_ms,
                                                self.rng.randint(1, DELAY_TICKS_MAX), level))
            else:
                write = next_write(self.rng, broker.disk, self.now_ms, self.metadata_share)
            put = broker.master.put(message_id, write.topic, write.queue_id,
                                    write.payload_size, write.op, write.body)
            self.invariants.put_taken(broker.name, put)
            self.metadata_records += write.topic == METADATA_TOPIC
        if self.now_ms < self.end_ms - 1500:
            self.schedule(self.rng.randint(1, self.faults.put_every_ms_max), "put", self._put)

    def _consume(self) -> None:
        """A consumer reads a queue on any running broker: every entry names a whole record
        of that queue in its log."""
        up = [b for b in self.brokers.values() if b.up]
        if up:
            broker = self.rng.choice(up)
            self.invariants.queues_readable(broker.name, broker.disk)
        self.schedule(self.rng.randint(5, 50), "consume", self._consume)

    def _persist(self) -> None:
        """Every running broker's periodic flush of consumer offsets and its log position."""
        for broker in self.brokers.values():
            if broker.up:
                broker.disk.metadata.persist()
        self.schedule(self.persist_every_ms, "persist", self._persist)

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


def run_seeds(first_seed: int, count: int) -> list[SimResult]:
    return [Simulation(seed).run() for seed in range(first_seed, first_seed + count)]


def run_seeds_pooled(first_seed: int, count: int, workers: int) -> list[SimResult]:
    """The same seeds over at most `workers` processes; the first failure, in seed order, is
    raised as in `run_seeds`."""
    return run_pooled(run_seeds, first_seed, count, workers, CHUNK_SEEDS, SimulationFailure)


def main(argv: list[str] | None = None) -> int:
    description = __doc__.splitlines()[0] if __doc__ else None
    return seeded_main(argv, description, run_seeds_pooled, summary, SimulationFailure)


if __name__ == "__main__":
    raise SystemExit(main())

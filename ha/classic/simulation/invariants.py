"""What the classic-replication simulation checks, after every event and at the end.

- PUT_OK is held: a SYNC_MASTER answers PUT_OK only when `in_sync_replicas - 1` distinct
  slaves hold the message: its bytes in their log at its offset, and flushed where the
  slave's flush type (SYNC_FLUSH) promises it. (A lying slave "holds" what its link was sent:
  the master cannot know more.) No two brokers answer PUT_OK for one offset range in one epoch.
- Acks are true: no link's ack exceeds what it was sent or the master holds; the replicated
  offset never exceeds what `in_sync_replicas - 1` distinct slaves (by who they are, not by
  what they call themselves) acknowledged, so one slave never counts twice; what an honest
  slave acked is byte for byte the master's log (a diverged slave can never reach a diff of
  0), and a foreign slave never acks.
- A slave never reports past its agreed offset: its first report on a connection is at most
  the offset agreed in the epoch exchange, and no report is past its log's end.
- A slave's `truncated_bytes_total` is exactly the bytes it cut back.
- Failover: a slave promoted because its master is down holds every PUT_OK any slave holds;
  at the end every broker is the last master's slave, caught up byte for byte, with the same
  consume queues; every PUT_OK is on that master unless every broker that held it lost it (a
  power cut of what its flush type did not promise, or a cut back to agree with a master that
  never had it: a forced promotion's losses, counted in `truncated_bytes_total`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ha.classic.core.epochs import Epoch
from ha.classic.core.link import LinkState
from ha.classic.simulation.brokers import MasterConn, MasterSide, Put, SimBroker, SlaveSide
from ha.classic.simulation.disk import BLANK_ID, SimDisk, parse_records, topic_code
from ha.sim_timers import DELAY_TICKS_MAX
from store.status import PutMessageStatus

if TYPE_CHECKING:
    from ha.classic.simulation.base import SimulationBase


class InvariantViolation(AssertionError):
    """A safety property broke: the simulation stops and prints its seed."""


@dataclass
class Promise:
    """A SYNC_MASTER PUT_OK, and which brokers hold its bytes now."""

    master: str
    put: Put
    holders: set[str]


@dataclass
class Invariants:
    in_sync_replicas: int
    put_ok_count: int = 0
    promises: dict[int, Promise] = field(default_factory=dict)  # by the record's start
    # epoch -> broker -> (start, end) of each PUT_OK it answered in it. An epoch is its number,
    # start and leader: without a controller two brokers may give theirs the same number
    # (a slave promoted while away from the master that last led), so the number alone
    # does not name one.
    put_ok_ranges: dict[Epoch, dict[str, list[tuple[int, int]]]] = field(
        default_factory=dict)
    cut_bytes: dict[str, int] = field(default_factory=dict)  # cut back to agree, per broker
    # broker -> (start, bytes) its power cuts took: what was in its page cache, not flushed
    power_cut_losses: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    # Whether a broker whose log lost metadata records its tables had applied fails the run
    # (the real metadata layer does not follow that loss: docs/replication.md). When not,
    # its tables and queues go unchecked, and once such a broker is a master (its plans and
    # queue offsets come from them), the run's metadata checks stop.
    strict_metadata: bool = False
    metadata_checks_on: bool = True
    metadata_lost: int = 0  # brokers whose log lost metadata records their tables applied
    promotions_metadata_checked: int = 0

    def metadata_checked(self, disk: SimDisk) -> bool:
        return self.strict_metadata or (self.metadata_checks_on and not disk.metadata_lost)

    @property
    def slaves_needed(self) -> int:
        return self.in_sync_replicas - 1

    # -- puts ------------------------------------------------------------------------------

    def put_taken(self, broker: str, put: Put) -> None:
        assert put.end - put.start == len(put.payload)

    def put_answered(self, sim: SimulationBase, master: MasterSide, put: Put,
                     status: PutMessageStatus) -> None:
        if status is not PutMessageStatus.PUT_OK or not master.is_sync_master:
            return
        self.put_ok_count += 1
        holders = {b.name for b in sim.brokers.values() if _holds(b, put)}
        # An ASYNC_FLUSH slave acks from its page cache: a power cut since may have taken
        # what it held when it acked, as its flush type allows.
        lost_by_power_cut = {name for name, losses in self.power_cut_losses.items()
                             if not sim.brokers[name].sync_flush and any(
                                 _covers(start, lost, put) for start, lost in losses)}
        slaves = (holders | lost_by_power_cut) - {master.name}
        liars = {conn.connection.slave_name for conn in master.core.connections
                 if conn.link.sent_end_offset >= put.end and sim.brokers[
                     conn.connection.slave_name].liar}
        counted = {name for name in slaves | liars if not sim.brokers[name].foreign}
        if len(counted) < self.slaves_needed:
            raise InvariantViolation(
                f"{master.name} answered PUT_OK for message {put.message_id} [{put.start}, "
                f"{put.end}) held by {sorted(counted)}: {self.slaves_needed} slave(s) needed")
        self._one_master_per_range(master.name, put)
        self.promises[put.start] = Promise(master.name, put, holders)

    def _one_master_per_range(self, name: str, put: Put) -> None:
        by_broker = self.put_ok_ranges.setdefault(put.epoch, {})
        for other, ranges in by_broker.items():
            if other == name:
                continue
            for start, end in ranges:
                if start < put.end and put.start < end:
                    raise InvariantViolation(
                        f"{name} and {other} both answered PUT_OK for "
                        f"[{max(start, put.start)}, {min(end, put.end)}) in epoch {put.epoch}")
        by_broker.setdefault(name, []).append((put.start, put.end))

    def records_arrived(self, disk: SimDisk, broker: str, start: int) -> None:
        """Whole records a slave completed from `start` (a record's start): it holds the
        promises among them."""
        records, _ = parse_records(disk.data, start, disk.end)
        for record in records:
            promise = self.promises.get(record.offset)
            if promise is not None and disk.holds(record.offset, promise.put.payload):
                promise.holders.add(broker)

    def bytes_lost(self, broker: str, new_end: int, old_end: int, cut_bytes: int = 0) -> None:
        """A broker's log lost [new_end, old_end): a power cut, a torn tail, or a cut back
        to agree with its master (`cut_bytes` of it held)."""
        self.cut_bytes[broker] = self.cut_bytes.get(broker, 0) + cut_bytes
        for start, promise in self.promises.items():
            if promise.put.end > new_end and start < old_end:
                promise.holders.discard(broker)

    def power_cut(self, broker: str, start: int, lost: bytes) -> None:
        """A power cut took `lost` from `start` on (with the torn record recovery cut)."""
        self.power_cut_losses.setdefault(broker, []).append((start, lost))

    def master_started(self, broker: str, epoch: Epoch) -> None:
        assert epoch.leader_id.startswith(broker.encode())

    def restarted(self, broker: str, disk: SimDisk) -> None:
        self.queues_readable(broker, disk)
        if self.metadata_checked(disk):
            metadata_follows_log(broker, disk, "after its recovery")

    # -- links and reports -----------------------------------------------------------------

    def acked(self, sim: SimulationBase, master: MasterSide, conn: MasterConn) -> None:
        """A report counted as an ack on `conn`: what it acked is what the slave holds,
        byte for byte the master's."""
        link = conn.link
        slave = sim.brokers[conn.connection.slave_name]
        if slave.foreign:
            raise InvariantViolation(f"the foreign broker acked {link.ack_offset} on "
                                     f"{master.name} ({link.state.value})")
        _ack_within_sent(master, conn)
        if slave.liar or slave.incarnation != conn.connection.slave_incarnation:
            return  # a liar holds nothing it says; a restarted slave's old report is late
        verified = conn.verified_offset
        low = max(verified, slave.disk.min_offset, master.disk.min_offset)
        ack = link.ack_offset
        if ack > low and slave.disk.data[low:ack] != master.disk.data[low:ack]:
            raise InvariantViolation(
                f"{slave.name} acked {ack} on {master.name} but their logs differ in "
                f"[{low}, {ack}): a diverged slave shows a diff of {master.disk.end - ack}")
        conn.verified_offset = max(verified, ack)

    def slave_reported(self, slave: SlaveSide, offset: int, first: bool) -> None:
        if first and offset > slave.core.agreed_offset:
            raise InvariantViolation(
                f"{slave.name} reports {offset} first, past its agreed offset "
                f"{slave.core.agreed_offset}")
        if offset > slave.disk.end:
            raise InvariantViolation(f"{slave.name} reports {offset}, past its log's end "
                                     f"{slave.disk.end}")
        if slave.sync_flush and offset > slave.disk.flushed_end:
            raise InvariantViolation(
                f"{slave.name} (SYNC_FLUSH) reports {offset}, past what it flushed "
                f"({slave.disk.flushed_end})")

    def slave_cut(self, slave: SlaveSide, cleared_bytes: int) -> None:
        if self.metadata_checked(slave.disk):
            metadata_follows_log(slave.name, slave.disk, "after its cut back")
        slave.cut_bytes_total += cleared_bytes
        if slave.core.truncated_bytes_total != slave.cut_bytes_total:
            raise InvariantViolation(
                f"{slave.name} reports truncated_bytes_total "
                f"{slave.core.truncated_bytes_total}, it cut {slave.cut_bytes_total}")

    def _metadata_lost(self, sim: SimulationBase, broker: SimBroker) -> None:
        """A broker whose tables may hold what its log does not: its queue offsets are taken
        as they come; once it is a master, so are every broker's, and the checks stop."""
        if not broker.disk.lenient:
            broker.disk.lenient = True
            self.metadata_lost += 1
        if broker.is_master and self.metadata_checks_on:
            self.metadata_checks_on = False
            for other in sim.brokers.values():
                other.disk.lenient = True

    def after_event(self, sim: SimulationBase) -> None:
        """Every master's replicated offset is what distinct slaves acknowledged; no broker
        whose queues or tables changed holds a consumer offset past its queue."""
        for broker in sim.brokers.values():
            disk = broker.disk
            if disk.timers.problems:
                raise InvariantViolation(f"timers: {broker.name}: {disk.timers.problems[0]}")
            if disk.metadata_lost and not self.strict_metadata:
                self._metadata_lost(sim, broker)
            if broker.up and (disk.changed or disk.metadata.changed):
                disk.changed = disk.metadata.changed = False
                if self.metadata_checked(disk):
                    _offsets_within_queues(broker.name, disk, self.strict_metadata)
            master = broker.master
            if master is None or not master.running or master.core.replicated_offset < 0:
                continue
            acks: dict[str, int] = {}
            for conn in master.core.connections:
                _ack_within_sent(master, conn)
                link = conn.link
                if link.is_open and link.state is LinkState.TRANSFERRING:
                    name = conn.connection.slave_name  # who it is, not what it says
                    acks[name] = max(acks.get(name, -1), link.ack_offset)
            ranked = sorted(acks.values(), reverse=True)
            truth = ranked[self.slaves_needed - 1] if len(ranked) >= self.slaves_needed else -1
            if master.core.replicated_offset > truth:
                raise InvariantViolation(
                    f"{broker.name} counts {master.core.replicated_offset} replicated; "
                    f"{self.slaves_needed} distinct slave(s) acked only {truth} ({acks})")

    # -- failover and the end --------------------------------------------------------------

    def promoted_holds_promises(self, sim: SimulationBase, candidate: SimBroker, master: str,
                                epoch_number: int) -> None:
        """The slave promoted (furthest ahead of those that agreed with the master in its
        last epoch) holds every PUT_OK of that epoch that any slave holds."""
        retained_from = sim.brokers[master].disk.min_offset  # older ones retention removed
        for promise in self.promises.values():
            if promise.master != master or promise.put.epoch.number != epoch_number or \
                    promise.put.start < retained_from:
                continue
            held_by_slaves = {name for name in promise.holders  # the promotable ones
                              if name != promise.master and not sim.brokers[name].foreign
                              and not sim.brokers[name].liar}
            if held_by_slaves and not candidate.disk.holds(promise.put.start,
                                                           promise.put.payload):
                raise InvariantViolation(
                    f"promoting {candidate.name}, which lacks the PUT_OK message "
                    f"{promise.put.message_id} that {sorted(held_by_slaves)} hold")

    def promoted(self, candidate: SimBroker, old: SimBroker) -> None:
        """The promoted slave's tables and queues are what its log says; where its log is a
        byte prefix of the old master's, they are what the old master's log said there (what
        the old master had applied at that prefix)."""
        disk = candidate.disk
        if not self.metadata_checked(disk):
            return
        metadata_follows_log(candidate.name, disk, "when promoted")
        old_disk = old.disk
        low = max(disk.min_offset, old_disk.min_offset)
        end = disk.dispatched_end
        if end < low or end > old_disk.dispatched_end or \
                disk.data[low:end] != old_disk.data[low:end]:
            return  # another lineage (a forced promotion): its own log is what counts
        self.promotions_metadata_checked += 1
        state, queues = old_disk.what_the_log_says(end)
        if disk.metadata.state().tables() != state.tables():
            raise InvariantViolation(
                f"promoted {candidate.name} applied {disk.metadata.state()}; {old.name}'s log "
                f"up to {end} says {state}")
        mine = disk.queue_pairs(low)
        theirs = {key: [p for p in pairs if p[1] >= low] for key, pairs in queues.items()}
        if mine != {key: pairs for key, pairs in theirs.items() if pairs}:
            raise InvariantViolation(f"promoted {candidate.name}'s queues differ from "
                                     f"{old.name}'s at {end}")

    def queues_readable(self, broker: str, disk: SimDisk) -> None:
        """A consumer's read of each queue's last entry: it names a whole record of its
        queue at its queue offset, and no delete of its topic follows it in the log (no
        deleted message is served)."""
        last_delete: dict[int, int] = {}
        for at, deleted in disk.deletes:
            last_delete[deleted] = at
        for (topic, queue_id), queue in disk.queues.items():
            entries = queue.entries
            for index in range(max(0, len(entries) - 1), len(entries)):
                offset, queue_offset = entries[index], queue.first + index
                record = disk.record_at(offset)
                if record is None or (record.topic, record.queue_id, record.queue_offset) != (
                        topic, queue_id, queue_offset) or record.message_id == BLANK_ID:
                    raise InvariantViolation(f"{broker}: queue {topic}/{queue_id} names "
                                             f"{offset} at {queue_offset}, which holds {record}")
                if offset < last_delete.get(topic, -1):
                    raise InvariantViolation(f"{broker} serves message {record.message_id} "
                                             f"at {offset}, deleted with its topic {topic}")

    def converged(self, sim: SimulationBase) -> None:
        leader = sim.brokers[sim.leader]
        assert leader.is_master, f"{leader.name} is not master at the end"
        lost = leader.disk.timers.undelivered(sim.fault_ms + DELAY_TICKS_MAX)
        if lost:
            raise InvariantViolation(f"timers: {leader.name} never delivered {lost[:5]} "
                                     f"({len(lost)} due messages)")
        metadata_checked = self.metadata_checked(leader.disk)
        if metadata_checked:
            metadata_follows_log(leader.name, leader.disk, "at the end")
        for broker in sim.brokers.values():
            if broker is leader:
                continue
            if broker.master is not None and broker.is_master:
                raise InvariantViolation(f"{broker.name} is still a master at the end")
            if broker.foreign:  # refused by name (or never given a slot), never streamed
                assert broker.slave is not None
                core = broker.slave.core
                if core.refusal not in (None, "diverged") or core.applied_bytes_total:
                    raise InvariantViolation(f"the foreign broker applied "
                                             f"{core.applied_bytes_total} bytes, refusal "
                                             f"{core.refusal}")
                continue
            _caught_up(leader, broker, metadata_checked and self.metadata_checked(broker.disk))
        refused = {b.name for b in sim.brokers.values()
                   if b.slave is not None and b.slave.core.refusal is not None}
        for promise in self.promises.values():
            put = promise.put
            if put.start < leader.disk.min_offset or leader.disk.holds(put.start, put.payload):
                continue
            if promise.holders - refused:
                raise InvariantViolation(
                    f"PUT_OK message {put.message_id} [{put.start}, {put.end}) of "
                    f"{promise.master} is not on the last master {leader.name}, yet "
                    f"{sorted(promise.holders)} still hold it")


def _holds(broker: SimBroker, put: Put) -> bool:
    disk = broker.disk  # a broker down holds what its disk kept (a kill keeps it all)
    if not disk.holds(put.start, put.payload):
        return False
    return not broker.sync_flush or broker.master is not None or disk.flushed_end >= put.end


def _covers(start: int, lost: bytes, put: Put) -> bool:
    position = put.start - start
    return position >= 0 and lost[position:position + len(put.payload)] == put.payload


def _ack_within_sent(master: MasterSide, conn: MasterConn) -> None:
    link = conn.link
    if link.ack_offset > link.sent_end_offset and link.state is LinkState.TRANSFERRING:
        raise InvariantViolation(
            f"{conn.connection.slave_name}'s ack {link.ack_offset} on {master.name} is past "
            f"what its link was sent ({link.sent_end_offset})")
    if link.ack_offset > master.disk.end:
        raise InvariantViolation(
            f"{conn.connection.slave_name}'s ack {link.ack_offset} is past {master.name}'s "
            f"end {master.disk.end}")


def _caught_up(leader: SimBroker, broker: SimBroker, metadata_checked: bool) -> None:
    slave = broker.slave
    if slave is None or not broker.up:
        raise InvariantViolation(f"{broker.name} is not a running slave at the end")
    if broker.liar:
        return  # closed at each lie: it catches up a batch a connection
    if slave.core.refusal == "diverged":
        if set(broker.disk.epochs) & set(leader.disk.epochs):
            raise InvariantViolation(f"{broker.name} was refused as diverged, yet it shares "
                                     f"an epoch with {leader.name}")
        return  # another lineage's log (a forced promotion's): left for an operator
    if slave.core.refusal == "needs_reset":
        return  # behind the master's retention: left for an operator
    low = max(leader.disk.min_offset, broker.disk.min_offset)
    if broker.disk.end != leader.disk.end or \
            broker.disk.data[low:] != leader.disk.data[low:]:
        raise InvariantViolation(
            f"{broker.name} ends at {broker.disk.end}, the master {leader.name} at "
            f"{leader.disk.end}: not caught up byte for byte (connected "
            f"{slave.core.connected}, refusal {slave.core.refusal})")
    if not metadata_checked:
        return
    if broker.disk.queue_pairs(low) != leader.disk.queue_pairs(low):
        raise InvariantViolation(f"{broker.name}'s queues differ from the master's")
    if broker.disk.metadata.state().tables() != leader.disk.metadata.state().tables():
        raise InvariantViolation(
            f"{broker.name} applied {broker.disk.metadata.state()}, the master "
            f"{leader.name} {leader.disk.metadata.state()}")
    metadata_follows_log(broker.name, broker.disk, "at the end")


def metadata_follows_log(name: str, disk: SimDisk, when: str) -> None:
    """A broker's tables and queues are what the records its log holds say (applied in
    order over what retention removed), its applied position theirs."""
    state, queues = disk.what_the_log_says()
    applied = disk.metadata.state()
    if applied != state:
        raise InvariantViolation(f"{name} {when} applied {applied}; its log says {state}")
    if disk.queue_pairs() != queues:
        raise InvariantViolation(f"{name} {when} holds queues {disk.queue_pairs()}; its log "
                                 f"says {queues}")


def _offsets_within_queues(name: str, disk: SimDisk, strict: bool) -> None:
    for (group, topic, queue_id), offset in disk.metadata.committed():
        queue = disk.queues.get((topic_code(topic), queue_id))
        next_offset = 0 if queue is None else queue.next_offset
        if offset > next_offset and queue is None and disk.started_mid_log and not strict:
            # Open: the queue's records all lie below where this log started, so this broker
            # has no such queue, and would start it again at queue offset 0 once promoted.
            disk.metadata_lost += 1
            return
        if offset > next_offset:
            raise InvariantViolation(
                f"{name}: group {group}'s offset {offset} in {topic}/{queue_id} is past its "
                f"queue's next offset {next_offset}")

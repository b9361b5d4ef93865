"""A seeded deterministic simulation of a DLedger group driving the real `DLedgerNode`.

One `random.Random(seed)` draws the run's fault mix (swarm testing: every seed picks its own
drop, duplicate and delay rates, disk latency, partitions, crashes, retention, leadership
transfers, payload sizes, and the push bounds and throttle of its DLedgerConfig), then every
event. Events sit in one heap ordered by (time, sequence), so a seed replays exactly:

    python -m ha.dledger.simulation.sim --seed 1234        # replay one run
    python -m ha.dledger.simulation.sim --seeds 10000      # many runs, prints count and duration
    python -m ha.dledger.simulation.sim --seeds 10000 --workers 2   # the same over a bounded pool

Each node has a durable log and a queue of writes not yet durable; a crash drops the queue.
Some client appends are metadata records (ha/dledger/simulation/metadata.py), applied by every
node once committed. The invariants (ha/dledger/simulation/invariants.py) are checked on every
event; at the end
faults stop, every node comes back, and the group must commit every acknowledged append everywhere.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass, field

from ha.dledger.core.actions import (
    Action,
    AdvanceCommit,
    AppendEntries,
    AppendStatus,
    CompleteAppend,
    CompleteTransfer,
    PersistTermVote,
    Send,
    TruncateFrom,
    Write,
)
from ha.dledger.core.config import DLedgerConfig
from ha.dledger.core.entry_log import EntryLog
from ha.dledger.core.member import HardState, Role
from ha.dledger.core.messages import Message, VoteRequest
from ha.dledger.core.node import DLedgerNode
from ha.dledger.simulation.invariants import Invariants, InvariantViolation
from ha.dledger.simulation.metadata import MetadataTables, encode_payload, plan_change
from ha.dledger.simulation.pops import MemberPops, PopTruth, fingerprint
from ha.dledger.simulation.timers import MemberTimers
from ha.seeded_runs import main as seeded_main
from ha.seeded_runs import run_pooled
from ha.sim_timers import DELAY_TICKS_MAX, SIM_PLAN, delayed_put
from store.metadata.log_records import MetadataChange

EVENTS_MAX = 400_000  # a bound on one run, whatever the seed draws
METADATA_SHARE = 0.2  # of client appends: a metadata record
TIMER_SHARE = 0.1  # of client appends while faults last: a delayed put
CHUNK_SEEDS = 50  # seeds at most per task handed to a worker process


class SimulationFailure(AssertionError):
    """An invariant or an assertion broke; the message names the seed and the event."""


@dataclass(frozen=True)
class Faults:
    drop_rate: float
    duplicate_rate: float
    delay_ticks_max: int
    disk_latency_ticks_max: int
    nemesis_every_ticks: int  # 0: no nemesis
    retain_entries: int
    payload_bytes_max: int  # client payloads are 4 to this many bytes
    delay_ticks_min: int = 1

    @classmethod
    def draw(cls, rng: random.Random) -> Faults:
        return cls(drop_rate=rng.choice([0.0, 0.02, 0.1, 0.25]),
                   duplicate_rate=rng.choice([0.0, 0.05, 0.2]),
                   delay_ticks_max=rng.choice([1, 2, 4, 8]),
                   disk_latency_ticks_max=rng.choice([0, 1, 3, 6]),
                   nemesis_every_ticks=rng.choice([15, 40, 100]),
                   retain_entries=rng.choice([4, 32, 1_000_000]),
                   payload_bytes_max=rng.choice([8, 8, 300, 5000]))

    @classmethod
    def healthy(cls, delay_ticks_max: int = 3) -> Faults:
        """No faults at all, only delivery jitter of 0 to `delay_ticks_max` ticks (3: a busy
        but healthy network; 1: loopback, where a hop takes far less than a tick)."""
        return cls(drop_rate=0.0, duplicate_rate=0.0, delay_ticks_max=delay_ticks_max,
                   disk_latency_ticks_max=1, nemesis_every_ticks=0, retain_entries=1_000_000,
                   payload_bytes_max=8, delay_ticks_min=0)


def draw_config(rng: random.Random) -> DLedgerConfig:
    """The production defaults, or short timings (more elections per run), each with the
    default push bounds, short pushes (more of them in flight), or tiny byte bounds
    (byte-bounded pushes and the throttle at work)."""
    timing = rng.choice([{}, {"election_timeout_ticks": 10, "heartbeat_ticks": 2,
                              "push_timeout_ticks": 6, "quorum_deadline_ticks": 40}])
    bounds = rng.choice([{}, {"push_entries_max": 4},
                         {"push_bytes_max": 600, "far_behind_entries": 8,
                          "far_behind_push_bytes_per_tick": 900}])
    return DLedgerConfig(**timing, **bounds)


@dataclass
class SimDisk:
    """What survives a crash: the durable term, vote and log."""

    hard_state: HardState = field(default_factory=HardState)
    log: EntryLog = field(default_factory=EntryLog)
    queue: deque[Write] = field(default_factory=deque)  # issued, not yet durable

    def apply(self, write: Write) -> None:
        if isinstance(write, PersistTermVote):
            self.hard_state = HardState(write.term, write.voted_for)
        elif isinstance(write, AppendEntries):
            for entry in write.entries:
                self.log.append(entry)
        elif isinstance(write, TruncateFrom):
            self.log.truncate_from(write.index)
        else:
            self.log.reset(write.base_index, write.base_term)

    def copy_log(self) -> EntryLog:
        return EntryLog(self.log.base_index, self.log.base_term, self.log.entries())


@dataclass
class SimMember:
    node: DLedgerNode | None
    disk: SimDisk
    incarnation: int = 0
    disk_flush_scheduled: bool = False
    # The metadata tables applied from the committed log: on disk, as the SQL tables are.
    tables: MetadataTables = field(default_factory=MetadataTables)
    # Delayed messages: the timer state from the committed log, and the leader's scheduler.
    timers: MemberTimers = field(default_factory=MemberTimers)
    pops: MemberPops = field(default_factory=MemberPops)  # group consumption's states


@dataclass(frozen=True)
class SimResult:
    seed: int
    events: int
    acknowledged: int
    committed: int
    leaders: int
    transfers_ok: int  # leadership transfers that handed over


class Simulation:
    replay_command = "python -m ha.dledger.simulation.sim --seed {seed}"

    def __init__(self, seed: int, node_count: int | None = None,
                 fault_ticks: int = 1500, heal_ticks: int = 400, faults: Faults | None = None,
                 config: DLedgerConfig | None = None, client_every_ticks_max: int = 6) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.node_count = node_count or self.rng.choice([3, 5])
        self.faults = faults or Faults.draw(self.rng)
        self.config = config or draw_config(self.rng)
        self.client_every_ticks_max = client_every_ticks_max
        self.fault_ticks = fault_ticks
        self.end_tick = fault_ticks + heal_ticks
        self.ids = [f"n{i}" for i in range(self.node_count)]
        self.members = {node_id: SimMember(None, SimDisk()) for node_id in self.ids}
        self.invariants = Invariants()
        self.cut_links: set[tuple[str, str]] = set()
        self.now = 0
        self._heap: list[tuple[int, int, str, tuple[object, ...]]] = []
        self._sequence = 0
        self._events = 0
        self._request_id = 0
        self._requests: dict[int, bytes] = {}
        self._metadata_changes: dict[bytes, MetadataChange] = {}  # decoded once, applied by all
        self._last_event: tuple[str, tuple[object, ...]] = ("start", ())  # formatted on failure
        self._commits: dict[str, int] = {}  # commit index of each running node
        # Client appends each node took and has not answered (its current incarnation's):
        # always equal to the node's pending count, or an answer leaked or came twice.
        self._awaiting: dict[int, str] = {}
        self._awaiting_count = dict.fromkeys(self.ids, 0)
        self._transfers_awaiting = dict.fromkeys(self.ids, 0)
        self.transfers: dict[str, int] = {}  # TransferStatus value -> how many
        self.pre_votes_after_first_leader = 0
        self.pop_truth = PopTruth()
        self.pop_held: list[tuple[int, int]] = []  # deliveries the group's consumers hold

    # ----- running -----

    def run(self) -> SimResult:
        for node_id in self.ids:
            self._start(node_id)
        self._schedule(1, "client", ())
        if self.faults.nemesis_every_ticks:
            self._schedule(self.faults.nemesis_every_ticks, "nemesis", ())
        self._schedule(self.fault_ticks, "heal", ())
        while self._heap and self._events < EVENTS_MAX:
            self.now, _, kind, payload = heapq.heappop(self._heap)
            if self.now > self.end_tick:
                break
            self._events += 1
            self._last_event = (kind, payload)
            try:
                self._handle(kind, payload)
            except AssertionError as error:
                raise self._failure(error) from error
        try:
            self._check_converged()
        except AssertionError as error:
            raise self._failure(error) from error
        return SimResult(self.seed, self._events, len(self.invariants.acknowledged),
                         len(self.invariants.committed), len(self.invariants.leader_by_term),
                         self.transfers.get("OK", 0))

    def _failure(self, error: AssertionError) -> SimulationFailure:
        kind = "invariant" if isinstance(error, InvariantViolation) else "assertion"
        return SimulationFailure(
            f"seed={self.seed} {kind} broke at event #{self._events} t={self.now} "
            f"{self._last_event[0]} {self._last_event[1]}: {error}\n"
            f"replay: {self.replay_command.format(seed=self.seed)}")

    def _schedule(self, delay_ticks: int, kind: str, payload: tuple[object, ...]) -> None:
        self._sequence += 1
        heapq.heappush(self._heap, (self.now + delay_ticks, self._sequence, kind, payload))

    def _handle(self, kind: str, payload: tuple[object, ...]) -> None:
        if kind == "tick":
            self._on_tick(str(payload[0]), int(str(payload[1])))
        elif kind == "deliver":
            self._on_deliver(payload)
        elif kind == "flush":
            self._on_flush(str(payload[0]), int(str(payload[1])))
        elif kind == "client":
            self._on_client()
        elif kind == "dispatch":
            self._on_dispatch(str(payload[0]), int(str(payload[1])))
        elif kind == "nemesis":
            self._on_nemesis()
        elif kind == "restart":
            self._start(str(payload[0]))
        elif kind == "heal":
            self._on_heal()

    def _faulty(self) -> bool:
        return self.now < self.fault_ticks

    # ----- node lifecycle -----

    def _start(self, node_id: str) -> None:
        member = self.members[node_id]
        if member.node is not None:
            return
        member.incarnation += 1
        rng = random.Random(self.rng.getrandbits(64))
        member.node = DLedgerNode(node_id, self._member_ids_of(node_id), self.config, rng,
                                  member.disk.hard_state, member.disk.copy_log())
        self._commits[node_id] = member.node.commit_index
        self._schedule(1, "tick", (node_id, member.incarnation))

    def _member_ids_of(self, node_id: str) -> list[str]:
        """The peer list a node starts with: the group's (a scenario may start one alone)."""
        return self.ids

    def _crash(self, node_id: str, restart: bool = True) -> None:
        member = self.members[node_id]
        member.node = None
        member.timers.crashed()
        member.pops.crashed()
        member.disk.queue.clear()  # whatever was not durable is lost
        member.disk_flush_scheduled = False
        # Its clients see the connection drop; their appends are indeterminate.
        for request_id in [r for r, holder in self._awaiting.items() if holder == node_id]:
            del self._awaiting[request_id]
        self._awaiting_count[node_id] = 0
        self._transfers_awaiting[node_id] = 0
        if restart:
            self._schedule(self.rng.randint(5, 60), "restart", (node_id,))

    def _live(self, node_id: str, incarnation: int) -> DLedgerNode | None:
        member = self.members[node_id]
        return member.node if member.incarnation == incarnation else None

    # ----- events -----

    def _on_tick(self, node_id: str, incarnation: int) -> None:
        node = self._live(node_id, incarnation)
        if node is None:
            return
        self._run(node_id, node.tick())
        self.members[node_id].timers.run_scheduler(
            node, self.now, lambda records: self._scheduler_append(node_id, node, records))
        if self.seed % 2 == 0:  # group consumption in every other seed (its appends cost)
            self.members[node_id].pops.lead(
                node, self.now, self.rng, self.pop_held,
                lambda payload: self._pop_append(node_id, node, payload),
                0.3 if self._faulty() else 0.0)
        self._schedule(1, "tick", (node_id, incarnation))

    def _scheduler_append(self, node_id: str, node: DLedgerNode, records: list[bytes]) -> int:
        """The leader's scheduler appends as a client does; how many the node took (the
        refusals are a suffix, answered at once)."""
        actions = node.client_append_many(self._take_requests(node_id, records), push=True)
        refused = sum(1 for action in actions if isinstance(action, CompleteAppend)
                      and action.status is not AppendStatus.OK
                      and not action.status.indeterminate)
        self._run(node_id, actions)
        return len(records) - refused

    def _pop_append(self, node_id: str, node: DLedgerNode, payload: bytes) -> int | None:
        """A pop record appended by the leader: the index it took, or None (refused)."""
        before = node.log.last_index
        taken = self._scheduler_append(node_id, node, [payload])
        return node.log.last_index if taken and node.log.last_index > before else None

    def _on_dispatch(self, node_id: str, incarnation: int) -> None:
        node = self._live(node_id, incarnation)
        if node is not None:
            self._run(node_id, node.dispatch())

    def _on_deliver(self, payload: tuple[object, ...]) -> None:
        source_id, target_id, message = str(payload[0]), str(payload[1]), payload[2]
        node = self.members[target_id].node
        if node is None or (self._faulty() and (source_id, target_id) in self.cut_links):
            return
        self._run(target_id, node.receive(message))  # type: ignore[arg-type]

    def _on_flush(self, node_id: str, incarnation: int) -> None:
        member = self.members[node_id]
        member.disk_flush_scheduled = False
        node = self._live(node_id, incarnation)
        if node is None or not member.disk.queue:
            return
        last_write_id = 0
        while member.disk.queue:
            write = member.disk.queue.popleft()
            member.disk.apply(write)
            last_write_id = write.write_id
        self._run(node_id, node.persisted(last_write_id))

    def _on_client(self) -> None:
        live = [i for i in self.ids if self.members[i].node is not None]
        leaders = [i for i in live if self.members[i].node.role is Role.LEADER]  # type: ignore[union-attr]
        requests: list[tuple[int, bytes]] = []
        if live:
            target = self.rng.choice(leaders if leaders and self.rng.random() < 0.9 else live)
            # One to four appends taken together, as a host's round takes its inbox's.
            payloads: list[bytes] = []
            for _ in range(self.rng.choice((1, 1, 2, 4))):
                request_id = self._request_id + len(payloads) + 1
                choice = self.rng.random()
                if choice < METADATA_SHARE:
                    payloads.append(encode_payload(plan_change(
                        self.rng, self.members[target].tables, request_id)))
                elif choice < METADATA_SHARE + TIMER_SHARE and self._faulty():
                    level = self.rng.choice((None, None, None, 1, SIM_PLAN.level_count))
                    payloads.append(delayed_put(request_id, self.now,
                                                self.rng.randint(1, DELAY_TICKS_MAX), level))
                else:
                    size_bytes = self.rng.randint(4, self.faults.payload_bytes_max)
                    payloads.append((b"r%d:" % request_id).ljust(size_bytes, b"."))
            requests = self._take_requests(target, payloads)
            node = self.members[target].node
            assert node is not None
            # Half the appends wait for a later dispatch, as a host's round of appends does.
            push = self.rng.random() < 0.5
            self._run(target, node.client_append_many(requests, push))
            if not push:
                self._schedule(self.rng.randint(0, 2), "dispatch",
                               (target, self.members[target].incarnation))
        if self.now < self.end_tick - 150:
            # The next one after as many intervals as appends went: the same rate of appends
            # whatever their grouping (a rate past a drawn far-behind throttle would keep a
            # lagging follower from ever catching up, and fail the check at the end).
            intervals = max(1, len(requests))
            self._schedule(self.rng.randint(1, self.client_every_ticks_max) * intervals,
                           "client", ())

    def _take_requests(self, target: str, payloads: list[bytes]) -> list[tuple[int, bytes]]:
        """Client appends to `target`, awaited until it answers each."""
        requests = []
        for payload in payloads:
            self._request_id += 1
            self._requests[self._request_id] = payload
            self._awaiting[self._request_id] = target
            self._awaiting_count[target] += 1
            requests.append((self._request_id, payload))
        return requests

    def _on_nemesis(self) -> None:
        if not self._faulty():
            return
        choice = self.rng.random()
        if choice < 0.25:
            self._crash_someone()
        elif choice < 0.5:
            self._partition()
        elif choice < 0.7:
            self.cut_links.clear()
        elif choice < 0.85:
            self._transfer_leadership()
        else:
            self._compact_all()
        self._schedule(self.faults.nemesis_every_ticks, "nemesis", ())

    def _on_heal(self) -> None:
        self.cut_links.clear()
        for node_id in self.ids:
            self._start(node_id)

    def _crash_someone(self) -> None:
        down = [i for i in self.ids if self.members[i].node is None]
        if len(down) < (self.node_count - 1) // 2:
            self._crash(self.rng.choice([i for i in self.ids if i not in down]))

    def _transfer_leadership(self) -> None:
        """An admin asks a node (mostly the leader) to hand leadership to a random member,
        sometimes itself or a stranger (refusals are part of the mix)."""
        live = [i for i in self.ids if self.members[i].node is not None]
        leaders = [i for i in live if self.members[i].node.role is Role.LEADER]  # type: ignore[union-attr]
        source_id = self.rng.choice(leaders if leaders and self.rng.random() < 0.9 else live)
        target_id = self.rng.choice(self.ids + ["stranger"])
        node = self.members[source_id].node
        assert node is not None
        self._transfers_awaiting[source_id] += 1
        self._run(source_id, node.transfer_leadership(target_id))

    def _partition(self) -> None:
        shuffled = list(self.ids)
        self.rng.shuffle(shuffled)
        side = set(shuffled[:self.rng.randint(1, self.node_count // 2)])
        one_way = self.rng.random() < 0.2
        self.cut_links = {(a, b) for a in self.ids for b in self.ids
                          if (a in side) != (b in side) and not (one_way and a in side)}

    def _compact_all(self) -> None:
        for node_id in self.ids:
            member = self.members[node_id]
            node = member.node
            if node is None:
                continue
            index = min(node.commit_index, node.durable_index) - self.faults.retain_entries
            if index > node.log.base_index:
                node.compact(index)
                member.disk.log.compact_to(index)

    # ----- actions -----

    def _run(self, node_id: str, actions: list[Action]) -> None:
        if not actions:
            # Most ticks: nothing happened that the checks below could see now; a leaked
            # answer stays in the counts and is caught at the node's next actions.
            return
        member = self.members[node_id]
        node = member.node
        assert node is not None
        leader_by_term = self.invariants.leader_by_term
        for action in actions:
            if isinstance(action, Send):
                self._send(node_id, action.target_id, action.message)
            elif isinstance(action, AdvanceCommit):
                self._commit(node_id, node, action.commit_index)
            elif isinstance(action, CompleteAppend):
                self._complete(node_id, action)
            elif isinstance(action, CompleteTransfer):
                self._transfer_completed(node_id, action)
            else:
                self._write(node_id, member, node, action)
        if node.role is Role.LEADER and leader_by_term.get(node.term) != node_id:
            self.invariants.leader_elected(node_id, node.term, node.log)
        self._check_answers(node_id, node)

    def _check_answers(self, node_id: str, node: DLedgerNode) -> None:
        """Every client append a node took is pending on it until answered exactly once (a
        deposed leader's included: DLedger #309), and a transfer is answered exactly once."""
        if self._awaiting_count[node_id] != node.pending_count:
            raise InvariantViolation(
                f"{node_id} holds {node.pending_count} pending appends, clients await "
                f"{self._awaiting_count[node_id]}: an answer leaked or came twice")
        if self._transfers_awaiting[node_id] != (node.transfer is not None):
            raise InvariantViolation(f"{node_id}: a transfer answer leaked or came twice")

    def _transfer_completed(self, node_id: str, action: CompleteTransfer) -> None:
        self._transfers_awaiting[node_id] -= 1
        status = action.status.value
        self.transfers[status] = self.transfers.get(status, 0) + 1

    def _send(self, source_id: str, target_id: str, message: Message) -> None:
        if isinstance(message, VoteRequest) and message.pre_vote \
                and self.invariants.leader_by_term:
            self.pre_votes_after_first_leader += 1
        if self._faulty():
            if (source_id, target_id) in self.cut_links:
                return
            if self.rng.random() < self.faults.drop_rate:
                return
            if self.rng.random() < self.faults.duplicate_rate:
                self._schedule(self._delay(), "deliver", (source_id, target_id, message))
        self._schedule(self._delay(), "deliver", (source_id, target_id, message))

    def _delay(self) -> int:
        if not self._faulty():
            return 1
        return self.rng.randint(self.faults.delay_ticks_min, self.faults.delay_ticks_max)

    def _commit(self, node_id: str, node: DLedgerNode, commit_index: int) -> None:
        self.invariants.commit_advanced(node_id, self._commits[node_id], commit_index, node.log)
        self._commits[node_id] = commit_index
        self._apply_metadata(node_id, node, commit_index)
        self.members[node_id].timers.apply_committed(node_id, node, commit_index,
                                                      self.invariants)
        self.pop_truth.advance(self.invariants.committed)
        self.members[node_id].pops.apply_committed(node_id, node, commit_index,
                                                    self.invariants.committed)

    def _apply_metadata(self, node_id: str, node: DLedgerNode, commit_index: int) -> None:
        """The node's dispatch: its committed metadata records applied to its tables, in log
        order, the tables after each checked against every other node's at that index."""
        tables = self.members[node_id].tables
        base_index = node.log.base_index
        if tables.applied_index < base_index:  # reset past what it applied: the bootstrap
            tables.restore(base_index, self.invariants.metadata_at_base(base_index))
        invariants = self.invariants
        for index in invariants.metadata_records(tables.applied_index, commit_index):
            # The committed payload, which commit_advanced checked is this node's entry.
            payload = invariants.committed[index][1]
            invariants.metadata_applied(node_id, index,
                                        tables.apply(payload, self._metadata_changes))
        tables.applied_index = max(tables.applied_index, commit_index)

    def _complete(self, node_id: str, action: CompleteAppend) -> None:
        if self._awaiting.pop(action.request_id, None) != node_id:
            raise InvariantViolation(f"{node_id} answered append {action.request_id}, which "
                                     f"it does not hold (twice, or after a crash)")
        self._awaiting_count[node_id] -= 1
        if action.status is AppendStatus.OK:
            payload = self._requests[action.request_id]
            self.invariants.append_acknowledged(action.index, action.term, payload)

    def _write(self, node_id: str, member: SimMember, node: DLedgerNode, write: Write) -> None:
        if isinstance(write, AppendEntries):
            self.invariants.entries_appended(node_id, write.entries, node.log)
        elif not isinstance(write, PersistTermVote):  # a truncation or a reset to a base
            member.pops.cut(write.index if isinstance(write, TruncateFrom) else 0,
                            self.invariants.committed)
        member.disk.queue.append(write)
        if not member.disk_flush_scheduled:
            member.disk_flush_scheduled = True
            latency = self.rng.randint(0, self.faults.disk_latency_ticks_max)
            self._schedule(latency, "flush", (node_id, member.incarnation))

    # ----- the end -----

    def _check_converged(self) -> None:
        """After healing, every node holds every acknowledged append as committed, and has
        delivered every delayed message put (all are due by then) exactly once."""
        due_by = self.fault_ticks + DELAY_TICKS_MAX
        if self.seed % 2 == 0:
            self.pop_truth.check_done()
        for node_id in self.ids:
            node = self.members[node_id].node
            assert node is not None
            model = self.members[node_id].timers.model
            lost = model.undelivered(due_by)
            assert not lost, f"liveness: {node_id} never delivered {lost[:5]} ({len(lost)})"
            assert set(model.delivered) == set(model.puts), (
                f"{node_id} delivered {sorted(set(model.delivered) - set(model.puts))[:5]}, "
                "never put")
            pops = self.members[node_id].pops
            assert not pops.ahead and fingerprint(pops.registry) == fingerprint(
                self.pop_truth.registry), f"pops: {node_id}'s states are not the log's"
            for index, (term, payload) in self.invariants.acknowledged.items():
                assert node.commit_index >= index, (
                    f"liveness: {node_id} commit {node.commit_index} < acknowledged {index}")
                if index > node.log.base_index:
                    held = node.log.entry(index)
                    assert (held.term, held.payload) == (term, payload), (node_id, index)


def run_seeds(first_seed: int, count: int) -> list[SimResult]:
    return [Simulation(seed).run() for seed in range(first_seed, first_seed + count)]


def run_seeds_pooled(first_seed: int, count: int, workers: int) -> list[SimResult]:
    """The same seeds over at most `workers` processes (chunks of at most CHUNK_SEEDS, so the
    pool's queue stays small); the first failure, in seed order, is raised as in `run_seeds`."""
    return run_pooled(run_seeds, first_seed, count, workers, CHUNK_SEEDS)


def _summary(results: list[SimResult]) -> str:
    return (f"{sum(r.events for r in results)} events, "
            f"{sum(r.acknowledged for r in results)} acknowledged appends")


def main(argv: list[str] | None = None) -> int:
    description = __doc__.splitlines()[0] if __doc__ else None
    return seeded_main(argv, description, run_seeds_pooled, _summary, SimulationFailure)


if __name__ == "__main__":
    raise SystemExit(main())

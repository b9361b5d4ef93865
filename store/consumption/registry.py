"""Every queue state of group consumption on this broker, fed by the log's pop records.

The master creates a queue's state at its first receive (at the group's committed offset);
a replica, or the master replaying its log after a restart, creates it at the first record
that takes offsets into its window, so every replica holds the same states as the master's
log says. A state's mode (FIFO or not) is the one its last receive record carries (the
master decides it from the group's `fifo`), so it is the same on every replica too. The
number of states is bounded (`states_max`): the master refuses a receive that
would create one more, so a replica never holds more than its master.

Applying a record is idempotent (QueueState.apply), and the counters (acked, retried,
dead-lettered) move only with events applied for the first time: a replay after a restart
counts each event once. Not thread-safe: the caller holds its lock for the (group, topic).

A group's delete, applied in log order like the pop records, drops the group's states and
counts (`drop_group`): memory holds the live groups' states, and a group created again under
the name starts as a new one.

Retention removes pop records too, so a metadata snapshot carries every state and count
(store/consumption/snapshot.py). The registry notes every record of the metadata topic in
log order: one past a gap (it never applied the records below: retention removed them, or
its log begins at its master's min offset) leaves it lacking, and it then loads the next
snapshot it meets; a registry that applied the record before a snapshot holds that snapshot
already (it is exact) and passes it. The slave sync's bootstrap loads its master's states.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from store.consumption.events import (
    Acked,
    DeadLettered,
    Disposition,
    Received,
    Retried,
)
from store.consumption.queue_state import (
    WINDOW_MAX_DEFAULT,
    ConsumptionError,
    EntryState,
    QueueState,
)
from store.consumption.records import PopRecord, QueueKey
from store.consumption.snapshot import (
    PopCountsImage,
    PopQueueImage,
    queue_image,
    snapshot_pops,
)

log = logging.getLogger(__name__)

STATES_MAX_DEFAULT = 65_536
# A queue id with this bit set names a queue of the group's retry topic for the topic.
RETRY_QUEUE_BIT = 1 << 31


class RegistryFull(Exception):
    """`states_max` queue states exist already."""


@dataclass(slots=True)
class TopicCounts:
    """What one group's consumption of one topic did, counted from the log's events."""

    acked: int = 0
    retried: int = 0
    dead_lettered: int = 0
    filtered: int = 0


@dataclass(frozen=True, slots=True)
class QueueCounts:
    waiting: int
    in_flight: int
    retrying: int  # waiting entries that were delivered before (retried in place)


def is_retry_queue(queue_id: int) -> bool:
    return bool(queue_id & RETRY_QUEUE_BIT)


def follow_record(registry: ConsumptionRegistry, queue_offset: int, op: str,
                  body: bytes) -> None:
    """A metadata record read from the log (the replay at start), as the registry follows
    it: a snapshot part (loaded when the registry lacks it), or its place noted."""
    pops = snapshot_pops(op, body)
    if pops is None:
        registry.noted(queue_offset)
        return
    registry.snapshot_part(queue_offset, pops.part, pops.parts, pops.queues, pops.counts)


class ConsumptionRegistry:
    def __init__(self, *, window_max: int = WINDOW_MAX_DEFAULT,
                 states_max: int = STATES_MAX_DEFAULT) -> None:
        self.window_max = window_max
        self.states_max = states_max
        self._states: dict[QueueKey, QueueState] = {}
        self._reported: dict[QueueKey, int] = {}
        self._topics: dict[tuple[str, str], list[QueueKey]] = {}
        self._counts: dict[tuple[str, str], TopicCounts] = {}
        # The metadata queue offset after the last record noted; whether records below one
        # noted are missing (until a snapshot is loaded); whether a snapshot's parts load.
        self._next_record_offset = 0
        self.lacking = False
        self._loading = False
        # Above every delivery id a dropped state (a deleted group's) handed out: the master
        # starts a new state's ids here, so a handle of the deleted group names no delivery
        # of a group created again under its name (`drop_group`). Memory only, kept by
        # `reset`: a restart or a new master is a new era, whose ids start above every id of
        # the eras before (the HA epoch's or the term's floor).
        self.dropped_delivery_id_next = 1

    def __len__(self) -> int:
        return len(self._states)

    def state(self, key: QueueKey) -> QueueState | None:
        return self._states.get(key)

    def keys_of(self, group: str, topic: str) -> list[QueueKey]:
        return list(self._topics.get((group, topic), ()))

    def group_topics(self) -> list[tuple[str, str]]:
        return list(self._topics)

    def topics_of(self, group: str) -> list[str]:
        return sorted(topic for name, topic in self._topics if name == group)

    def counts(self, group: str, topic: str) -> TopicCounts:
        return self._counts.get((group, topic)) or TopicCounts()

    def queue_counts(self, key: QueueKey) -> QueueCounts:
        state = self._states.get(key)
        if state is None:
            return QueueCounts(0, 0, 0)
        waiting = retrying = 0
        for offset in range(state.committed_offset, state.scan_offset):
            entry = state.entry(offset)
            if entry is not None and entry.state is EntryState.WAITING:
                waiting += 1
                retrying += entry.attempt > 0
        return QueueCounts(waiting, state.in_flight_count, retrying)

    def in_flight(self, group: str) -> int:
        return sum(self._states[key].in_flight_count
                   for (name, _), keys in self._topics.items() if name == group
                   for key in keys)

    def create(self, key: QueueKey, committed_offset: int, *, fifo: bool = False,
               next_delivery_id: int = 1) -> QueueState:
        """The master's state of a queue at its first receive (`fifo`: its group's; its
        delivery ids from `next_delivery_id`), or a replica's at a record's first offset."""
        state = self._states.get(key)
        if state is not None:
            return state
        if len(self._states) >= self.states_max:
            raise RegistryFull(f"{self.states_max} queue states exist (pop_queue_states_max)")
        state = QueueState(committed_offset, fifo=fifo, window_max=self.window_max,
                           next_delivery_id=next_delivery_id)
        self._states[key] = state
        self._reported[key] = committed_offset
        self._topics.setdefault((key.group, key.topic), []).append(key)
        return state

    def apply(self, record: PopRecord) -> None:
        """Apply one record's events in order (the master applies its own records as it
        appends them, and again, as nothing, when dispatch reaches them)."""
        key = record.key
        state = self._states.get(key)
        if state is None:
            first = record.events[0]
            if not isinstance(first, Received) or not first.scanned:
                return  # its queue's earlier records are gone (retention): nothing to do
            state = self.create(key, first.scanned[0].queue_offset, fifo=record.fifo)
        counts = self._counts.get((key.group, key.topic))
        if counts is None:
            counts = self._counts[(key.group, key.topic)] = TopicCounts()
        for event in record.events:
            if not state.apply(event):
                continue
            if isinstance(event, Received):
                state.fifo = record.fifo  # the mode its master decided the receive in
            if isinstance(event, Acked):
                counts.acked += 1
            elif isinstance(event, Retried):
                counts.retried += 1
            elif isinstance(event, DeadLettered):
                counts.dead_lettered += 1
            elif isinstance(event, Received):
                for scanned in event.scanned:
                    if scanned.disposition is Disposition.FILTERED:
                        counts.filtered += 1
                    elif scanned.disposition is Disposition.DEAD:
                        counts.dead_lettered += 1

    def committed_move(self, key: QueueKey) -> int | None:
        """The queue's committed offset when it moved past the last one taken (dispatch
        writes it as the group's offset, in log order), else None."""
        state = self._states.get(key)
        if state is None:
            return None
        committed = state.committed_offset
        if committed > self._reported.get(key, -1):
            self._reported[key] = committed
            return committed
        return None

    def drop_group(self, group: str) -> int:
        """Forget every queue state and count of `group`: its delete is applied (in log order,
        on every replica), so a group created again under its name starts as a new group
        does, and memory holds the live groups' states only. How many states went."""
        dropped = 0
        for pair in [pair for pair in self._topics if pair[0] == group]:
            for key in self._topics.pop(pair):
                state = self._states.pop(key, None)
                self._reported.pop(key, None)
                if state is not None:
                    dropped += 1
                    self.dropped_delivery_id_next = max(self.dropped_delivery_id_next,
                                                        state.next_delivery_id)
        for pair in [pair for pair in self._counts if pair[0] == group]:
            del self._counts[pair]
        return dropped

    def reset(self) -> None:
        """Forget everything: the log is replayed from its start."""
        self._clear_states()
        self._next_record_offset = 0
        self.lacking = self._loading = False

    def _clear_states(self) -> None:
        self._states.clear()
        self._reported.clear()
        self._topics.clear()
        self._counts.clear()

    # -- snapshots (store/consumption/snapshot.py) ---------------------------------------------

    def images(self) -> tuple[list[PopQueueImage], list[PopCountsImage]]:
        """Every queue state and count, for a snapshot or the bootstrap pull."""
        queues = [queue_image(key, state) for key, state in self._states.items()]
        counts = [PopCountsImage(group, topic, c.acked, c.retried, c.dead_lettered, c.filtered)
                  for (group, topic), c in self._counts.items()]
        return queues, counts

    def noted(self, queue_offset: int) -> None:
        """A record of the metadata topic, in log order (dispatch, or the replay at start)."""
        if queue_offset > self._next_record_offset:
            self.lacking = True  # past a gap: records below it were never applied here
        self._next_record_offset = max(self._next_record_offset, queue_offset + 1)

    def snapshot_part(self, queue_offset: int, part: int, parts: int,
                      queues: Sequence[PopQueueImage], counts: Sequence[PopCountsImage]) -> bool:
        """A snapshot part in log order; True when loaded: part 0 replaces the states and
        later parts add, when this registry lacks what the records before it held (it is
        lacking, or did not note the record before part 0). Else the part passes."""
        if part == 0:
            self._loading = self.lacking or queue_offset > self._next_record_offset
            if self._loading:
                self._clear_states()
        loading = self._loading
        if loading:
            self._load(queues, counts)
        self._next_record_offset = max(self._next_record_offset, queue_offset + 1)
        if part == parts - 1:
            self._loading = False
            if loading:
                self.lacking = False
        return loading

    def bootstrap(self, queues: Sequence[PopQueueImage], counts: Sequence[PopCountsImage],
                  queue_offset: int) -> bool:
        """The master's states, exported with tables that applied the metadata records below
        `queue_offset` (the slave sync's bootstrap): loaded unless this registry is whole
        and past it. Records below it then apply as nothing; a registry that noted records
        past it stays lacking (the next snapshot loads). True when loaded."""
        if queue_offset < self._next_record_offset and not self.lacking:
            return False
        self._clear_states()
        self._load(queues, counts)
        # Taken after the master's tables, its states may hold records past them: the next
        # record of each queue writes its committed offset again (dispatch's group offset).
        self._reported = dict.fromkeys(self._reported, -1)
        self.lacking = self._next_record_offset > queue_offset
        self._next_record_offset = max(self._next_record_offset, queue_offset)
        return True

    def _load(self, queues: Sequence[PopQueueImage], counts: Sequence[PopCountsImage]) -> None:
        for image in queues:
            key = image.key
            if key not in self._states and len(self._states) >= self.states_max:
                log.warning("group consumption: a snapshot's queue state %s not loaded: %d "
                            "states exist (pop_queue_states_max)", key, self.states_max)
                continue
            try:
                state = image.state(self.window_max)
            except ConsumptionError as error:
                log.warning("group consumption: a snapshot's queue state %s not loaded: %s",
                            key, error)
                continue
            if key not in self._states:
                self._topics.setdefault((key.group, key.topic), []).append(key)
            self._states[key] = state
            self._reported[key] = state.committed_offset
        for count in counts:
            self._counts[(count.group, count.topic)] = TopicCounts(
                count.acked, count.retried, count.dead_lettered, count.filtered)

"""Every queue state of group consumption on this broker, fed by the log's pop records.

The master creates a queue's state at its first receive (at the group's committed offset);
a replica, or the master replaying its log after a restart, creates it at the first record
that takes offsets into its window, so every replica holds the same states as the master's
log says. The number of states is bounded (`states_max`): the master refuses a receive that
would create one more, so a replica never holds more than its master.

Applying a record is idempotent (QueueState.apply), and the counters (acked, retried,
dead-lettered) move only with events applied for the first time: a replay after a restart
counts each event once. Not thread-safe: the caller holds its lock for the (group, topic).
"""

from __future__ import annotations

from dataclasses import dataclass

from store.consumption.events import (
    Acked,
    DeadLettered,
    Disposition,
    Received,
    Retried,
)
from store.consumption.queue_state import WINDOW_MAX_DEFAULT, EntryState, QueueState
from store.consumption.records import PopRecord, QueueKey

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


class ConsumptionRegistry:
    def __init__(self, *, window_max: int = WINDOW_MAX_DEFAULT,
                 states_max: int = STATES_MAX_DEFAULT) -> None:
        self.window_max = window_max
        self.states_max = states_max
        self._states: dict[QueueKey, QueueState] = {}
        self._reported: dict[QueueKey, int] = {}
        self._topics: dict[tuple[str, str], list[QueueKey]] = {}
        self._counts: dict[tuple[str, str], TopicCounts] = {}

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

    def create(self, key: QueueKey, committed_offset: int) -> QueueState:
        """The master's state of a queue at its first receive."""
        state = self._states.get(key)
        if state is not None:
            return state
        if len(self._states) >= self.states_max:
            raise RegistryFull(f"{self.states_max} queue states exist (pop_queue_states_max)")
        state = QueueState(committed_offset, window_max=self.window_max)
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
            state = self.create(key, first.scanned[0].queue_offset)
        counts = self._counts.get((key.group, key.topic))
        if counts is None:
            counts = self._counts[(key.group, key.topic)] = TopicCounts()
        for event in record.events:
            if not state.apply(event):
                continue
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

    def reset(self) -> None:
        """Forget everything: the log is replayed from its start."""
        self._states.clear()
        self._reported.clear()
        self._topics.clear()
        self._counts.clear()

"""The master's scheduler: reads each lane from its head and writes what a due head becomes.

One thread (a ServiceThread), active on the master only. It takes its starting point from the
timer state once dispatch has caught up with the log (everything a previous master wrote is
then counted), and from there keeps its own cursor per lane, moved by each record it
appends: a delivery (the message in its real topic), a roll (on to a shorter timer lane) or
a drop (cancelled; topic gone; original removed by retention), each naming the lane entry it
consumes. A lane whose write is refused (busy, stopping) stays where it is and is tried
again. The scheduler never waits for a write's guarantees: progress is a record of the log,
and a write a failover takes back is written again by the next master, from its own log.

A cancel takes the same lock as the scheduler's decisions and appends: it writes its marker
only while the message is not due by this scheduler's clock (which never goes back), so no
delivery of it was written before the marker, and none is written after (the scheduler
checks the cancels of the state and the ones it wrote itself before each write).
"""

from __future__ import annotations

import enum
import logging
import threading
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from store.clock import ClockMs, wall_ms
from store.reads import GetMessagesResult, GetMessageStatus
from store.record import Message, StoredMessage
from store.service import ServiceThread
from store.status import PutMessageResult, PutMessageStatus
from store.timers.lane_entry import Schedule, schedule_of, with_schedule
from store.timers.lanes import Lane, Step, TimerPlan, roll, step
from store.timers.names import (
    DROP_CANCELLED,
    DROP_ORIGIN_GONE,
    DROP_TOPIC_MISSING,
    PROPERTY_CANCEL,
    PROPERTY_DROP_REASON,
    PROPERTY_DUE_MS,
    PROPERTY_FROM,
    PROPERTY_ORIGIN_OFFSET,
    PROPERTY_SCHEDULED_MSG_ID,
    SCHEDULING_PROPERTIES,
    TIMER_LOG_TOPIC,
    TIMER_TOPIC,
)
from store.timers.state import TimerState
from store.waits.completion import PutCompletion

log = logging.getLogger(__name__)

# Appends messages, one result each (PUT_OK: appended; the completion is the guarantees).
Writer = Callable[[Sequence[Message]], list[tuple[PutMessageResult, PutCompletion]]]
# A lane's messages from a queue offset: (topic, queue id, offset, count).
Reader = Callable[[str, int, int, int], GetMessagesResult]
LANE_BATCH_MAX = 64
IDLE_WAIT_MS = 1000
_RETRY_WAIT_MS = 50
# Lateness of deliveries (delivery time minus due time), in ms.
LATENESS_BOUNDS_MS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 60_000)


class CancelOutcome(enum.Enum):
    WRITTEN = "WRITTEN"  # the marker was appended: see its put result
    ALREADY = "ALREADY"  # cancelled before
    DUE = "DUE"  # due already: delivered, or being delivered
    NOT_ACTIVE = "NOT_ACTIVE"  # not the master's scheduler
    TOO_MANY = "TOO_MANY"  # timer_cancels_pending_max cancels are pending


@dataclass(frozen=True, slots=True)
class CancelResult:
    outcome: CancelOutcome
    put: tuple[PutMessageResult, PutCompletion] | None = None


@dataclass(frozen=True, slots=True)
class _Planned:
    queue_offset: int
    message: Message
    due_ms: int
    delivered: bool
    origin_offset: int


class Lateness:
    """Cumulative-bucket counts of delivery lateness (the scheduler's thread observes)."""

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENESS_BOUNDS_MS) + 1)
        self.sum_ms = 0
        self.max_ms = 0

    def observe(self, lateness_ms: int) -> None:
        self.counts[bisect_left(LATENESS_BOUNDS_MS, lateness_ms)] += 1
        self.sum_ms += lateness_ms
        self.max_ms = max(self.max_ms, lateness_ms)


class TimerScheduler(ServiceThread):
    name = "timer-scheduler"

    def __init__(self, plan: TimerPlan, state: TimerState, read: Reader,
                 read_record: Callable[[int], StoredMessage | None], write: Writer,
                 queue_count_of: Callable[[str], int | None],
                 caught_up: Callable[[], bool], *, clock: ClockMs = wall_ms,
                 cancels_pending_max: int = 10_000) -> None:
        super().__init__()
        self._plan = plan
        self._lanes = plan.lanes
        self._state = state
        self._read = read
        self._read_record = read_record
        self._write = write
        self._queue_count_of = queue_count_of
        self._caught_up = caught_up
        self._clock = clock
        self._cancels_pending_max = cancels_pending_max
        self._lock = threading.Lock()  # decisions and their appends; cancels
        self._active = False
        self._cursors: dict[str, int] | None = None  # None: take them from the state
        self._cancelled_here: set[int] = set()  # markers written, maybe not dispatched yet
        # Lane -> when its head wakes, while its head waits: only this scheduler moves a
        # lane's head, so the lane is not read again before then.
        self._head_wake_ms: dict[str, int] = {}
        self._last_now_ms = 0
        self.lateness = Lateness()
        self.write_refusals_total = 0
        self._refusing: set[str] = set()  # lanes whose last write was refused (logged once)

    # -- role --------------------------------------------------------------------------------

    def activate(self) -> None:
        """Start scheduling (a master, a promoted slave): from the state, once dispatch has
        caught up with the log."""
        with self._lock:
            self._cursors = None
            self._cancelled_here.clear()
            self._head_wake_ms.clear()
            self._active = True
        self.wake()

    def deactivate(self) -> None:
        with self._lock:
            self._active = False
            self._cursors = None

    @property
    def is_active(self) -> bool:
        return self._active

    def cursors(self) -> dict[str, int]:
        """Where the scheduler reads each lane next (the state's progress before it runs)."""
        cursors = self._cursors
        return dict(cursors) if cursors is not None else self._state.progress()

    def _now(self) -> int:
        now = max(self._last_now_ms, self._clock())
        self._last_now_ms = now
        return now

    # -- rounds ------------------------------------------------------------------------------

    def run_once(self) -> float:
        with self._lock:
            if not self._active:
                return IDLE_WAIT_MS / 1000
            if self._cursors is None:
                if not self._caught_up():
                    return _RETRY_WAIT_MS / 1000
                self._cursors = self._state.progress()
            now = self._now()
            wait_ms = IDLE_WAIT_MS
            for lane in self._lanes:
                wait_ms = min(wait_ms, self._lane_round(lane, now))
        return max(0, wait_ms) / 1000

    def _lane_round(self, lane: Lane, now: int) -> int:
        """Consume the awake entries at the lane's head (a batch); how long until it should
        be looked at again (0: more to do now)."""
        assert self._cursors is not None
        key = lane.key
        head_wake_ms = self._head_wake_ms.get(key)
        if head_wake_ms is not None:
            if now < head_wake_ms:
                return head_wake_ms - now
            del self._head_wake_ms[key]
        cursor = self._cursors.get(key, 0)
        result = self._read(lane.topic, lane.queue_id, cursor, LANE_BATCH_MAX)
        if result.status is GetMessageStatus.OFFSET_TOO_SMALL:
            self._cursors[key] = result.next_offset  # retention removed the entries
            return 0
        planned: list[_Planned] = []
        wake_ms: int | None = None
        for message in result.messages:
            schedule = schedule_of(message.properties) or _UNSCHEDULED
            decision = step(now, schedule.wake_ms, schedule.due_ms)
            if decision is Step.WAIT:
                wake_ms = schedule.wake_ms
                break
            planned.append(self._plan_entry(key, message, decision, now, schedule))
        if wake_ms is not None:
            self._head_wake_ms[key] = wake_ms
        if not planned:
            if wake_ms is not None:
                return wake_ms - now
            if result.messages or result.next_offset > cursor:
                self._cursors[key] = result.next_offset  # only invalid entries were read
            return IDLE_WAIT_MS
        written = self._write([entry.message for entry in planned])
        for entry, (put, _) in zip(planned, written, strict=True):
            if put.status is not PutMessageStatus.PUT_OK:
                self._head_wake_ms.pop(key, None)  # the head is this entry, awake
                self.write_refusals_total += 1
                if key not in self._refusing:  # once a spell: a refusal may last
                    self._refusing.add(key)
                    log.warning("timers: a write for lane %s was refused (%s: %s); retrying "
                                "every %d ms", key, put.status.value, put.detail, _RETRY_WAIT_MS)
                return _RETRY_WAIT_MS
            self._refusing.discard(key)
            self._cursors[key] = entry.queue_offset + 1
            if entry.delivered:
                self.lateness.observe(max(0, now - entry.due_ms))
            self._cancelled_here.discard(entry.origin_offset)
        if wake_ms is None and len(planned) == len(result.messages):
            self._cursors[key] = max(self._cursors[key], result.next_offset)
        return 0 if wake_ms is None else wake_ms - now

    def _plan_entry(self, key: str, message: StoredMessage, decision: Step, now: int,
                    schedule: Schedule) -> _Planned:
        properties = message.properties
        due_ms = schedule.due_ms
        origin_text = properties.get(PROPERTY_ORIGIN_OFFSET)
        origin = int(origin_text) if origin_text is not None else message.commit_log_offset
        consumed = f"{key}:{message.queue_offset}"
        if self._state.is_cancelled(origin) or origin in self._cancelled_here:
            return _Planned(message.queue_offset, _drop(consumed, origin, DROP_CANCELLED),
                            due_ms, False, origin)
        if decision is Step.ROLL:
            return _Planned(message.queue_offset, self._roll(consumed, origin, schedule, now),
                            due_ms, False, origin)
        topic = schedule.topic
        queue_count = self._queue_count_of(topic)
        if queue_count is None:  # deleted before it was due: not created again
            return _Planned(message.queue_offset, _drop(consumed, origin, DROP_TOPIC_MISSING),
                            due_ms, False, origin)
        original = message if origin_text is None else self._read_record(origin)
        if original is None:
            return _Planned(message.queue_offset, _drop(consumed, origin, DROP_ORIGIN_GONE),
                            due_ms, False, origin)
        return _Planned(message.queue_offset,
                        _delivery(consumed, original, schedule, queue_count), due_ms, True,
                        origin)

    def _roll(self, consumed: str, origin: int, schedule: Schedule, now: int) -> Message:
        lane, wake_ms = roll(self._plan, now, schedule.due_ms)
        rolled = with_schedule({PROPERTY_ORIGIN_OFFSET: str(origin), PROPERTY_FROM: consumed},
                               Schedule(schedule.topic, schedule.queue_id, schedule.due_ms,
                                        wake_ms))
        return Message(TIMER_TOPIC, b"", rolled, lane.queue_id)

    # -- cancels -----------------------------------------------------------------------------

    def cancel(self, origin_offset: int, due_ms: int) -> CancelResult:
        """Write a cancel marker for the scheduled copy at `origin_offset`, unless it is due
        by this scheduler's clock (see the module docstring)."""
        with self._lock:
            if not self._active:
                return CancelResult(CancelOutcome.NOT_ACTIVE)
            if self._now() >= due_ms:
                return CancelResult(CancelOutcome.DUE)
            if self._state.is_cancelled(origin_offset) or origin_offset in self._cancelled_here:
                return CancelResult(CancelOutcome.ALREADY)
            if self._state.cancel_count + len(self._cancelled_here) >= self._cancels_pending_max:
                return CancelResult(CancelOutcome.TOO_MANY)
            marker = Message(TIMER_LOG_TOPIC, b"", {PROPERTY_CANCEL: str(origin_offset),
                                                    PROPERTY_DUE_MS: str(due_ms)}, 0)
            (put,) = self._write([marker])
            if put[0].status is PutMessageStatus.PUT_OK:
                self._cancelled_here.add(origin_offset)
            return CancelResult(CancelOutcome.WRITTEN, put)


def _delivery(consumed: str, original: StoredMessage, schedule: Schedule,
              queue_count: int) -> Message:
    properties = {name: value for name, value in original.properties.items()
                  if name not in SCHEDULING_PROPERTIES}
    properties[PROPERTY_FROM] = consumed
    properties[PROPERTY_SCHEDULED_MSG_ID] = original.msg_id
    properties[PROPERTY_DUE_MS] = str(schedule.due_ms)
    queue_id = schedule.queue_id % queue_count if schedule.queue_id is not None else None
    return Message(schedule.topic, original.body, properties, queue_id, original.flag,
                   original.born_timestamp_ms, original.born_host, original.reconsume_times)


def _drop(consumed: str, origin: int, reason: str) -> Message:
    return Message(TIMER_LOG_TOPIC, b"", {PROPERTY_FROM: consumed, PROPERTY_DROP_REASON: reason,
                                          PROPERTY_ORIGIN_OFFSET: str(origin)}, 0)


# An entry with no schedule (damaged): due at once, and dropped as its topic is missing.
_UNSCHEDULED = Schedule("", None, 0, 0)

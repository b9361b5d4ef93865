"""Delayed messages in the simulations (ha/dledger/simulation, ha/classic/simulation): what
the product's scheduler writes and what every replica's dispatch derives from it, with the
product's pure parts (store/timers/: the lanes of a TimerPlan, `plan_delay`, `step`, `roll`,
and the TimerState that dispatch feeds).

A record is a payload `TIMER_PREFIX + JSON`, one of:
- a delayed put (`p`): the scheduled copy, an entry of its lane (`plan_delay`);
- a roll (`r`): the entry it consumes (`from`, "T:3:5") and the lane entry it becomes;
- a delivery (`d`): the entry it consumes, the message in its topic, and when it was written.

`TimerModel` is one replica's state as dispatch builds it from its log, in log order: each
lane's entries (the consume queue of the lane), the TimerState (progress per lane), and how
many times each message was delivered (the topic's consume queue). As the product's dispatch
does, it indexes every delivery and every roll it meets: a lane entry consumed twice shows as
a message delivered twice. `delivery_problems` says what broke: a message delivered twice, or
before its due time (by the simulation's clock, which stands for every broker's).

`SimScheduler` is the master's or leader's scheduler: activated with its cursors taken from
the state (once its log is dispatched, as the product waits for), it reads each lane's
applied entries from its cursor, writes a roll or a delivery for each awake head, and moves
its cursor past each one the log took (a refused one, and those after it, are written again
at the next round); it is thrown away when its broker stops leading.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from store.timers.lanes import Step, TimerPlan, parse_delay_levels, roll, step
from store.timers.names import PROPERTY_FROM, PROPERTY_SCHEDULE
from store.timers.scheduling import Delay, plan_delay
from store.timers.state import TimerState

TIMER_PREFIX = b"\x00timer:"
# Times are the simulation's ticks: two levels and timer lanes of 1 tick doubling to 128.
SIM_PLAN = TimerPlan(parse_delay_levels("5ms 20ms"), precision_ms=1, max_delay_ms=128)
DELAY_TICKS_MAX = 120
_ROUND_ENTRIES_MAX = 8  # per lane and round, as the product reads a lane in batches
# Appends a lane's records in order; how many it took (a prefix), as the product's writer.
Append = Callable[[list[bytes]], int]


def delayed_put(origin: int, now: int, delay_ticks: int, level: int | None) -> bytes:
    """A delayed put of message `origin`, produced at `now`: its scheduled copy's record."""
    delay = Delay(delay_level=level) if level is not None else Delay(delay_ms=delay_ticks)
    scheduled = plan_delay(SIM_PLAN, delay, now)
    assert scheduled is not None, "a delay of at least one tick"
    return _encode({"k": "p", "o": origin, "lane": scheduled.lane.key,
                    "due": scheduled.due_ms, "wake": scheduled.wake_ms})


def _encode(record: dict[str, object]) -> bytes:
    return TIMER_PREFIX + orjson.dumps(record)


@dataclass(frozen=True, slots=True)
class LaneEntry:
    origin: int
    due: int
    wake: int
    log_offset: int = 0  # where its record is (retention removes it with its file)


def lane_of(payload: bytes) -> str | None:
    """The lane a put or a roll enters ("S:0", "T:3"); None for a delivery."""
    record = orjson.loads(payload[len(TIMER_PREFIX):])
    return str(record["lane"]) if record["k"] in ("p", "r") else None


@dataclass
class TimerModel:
    """One replica's timer state, derived from its log in order (see the module docstring)."""

    # lane key -> queue offset -> entry (a lane's queue; retention may have taken its start)
    lanes: dict[str, dict[int, LaneEntry]] = field(default_factory=dict)
    state: TimerState = field(default_factory=TimerState)
    puts: dict[int, int] = field(default_factory=dict)  # message -> due
    delivered: dict[int, int] = field(default_factory=dict)  # message -> deliveries
    problems: list[str] = field(default_factory=list)
    # Messages whose pending entry retention removed: lost, as the product loses them (keep
    # file_reserved_hours above timer_max_delay_ms, docs/delayed-messages.md).
    retained_away: set[int] = field(default_factory=set)
    version: int = 0  # grows with every record applied (a scheduler's round skips none)

    def apply(self, payload: bytes, queue_offset: int | None = None,
              log_offset: int = 0) -> None:
        """Apply a record of the log; a lane entry takes `queue_offset` in its lane (the next
        one when not given: a log that holds every record from the first)."""
        record = orjson.loads(payload[len(TIMER_PREFIX):])
        self.version += 1
        kind, origin = record["k"], int(record["o"])
        if kind == "p":
            self.puts[origin] = int(record["due"])
        else:
            properties = {PROPERTY_FROM: str(record["from"])}
            if kind == "r":
                properties[PROPERTY_SCHEDULE] = "0:0::T"  # a roll is a lane entry again
            self.state.apply(properties)
        if kind in ("p", "r"):
            lane = self.lanes.setdefault(str(record["lane"]), {})
            lane[len(lane) if queue_offset is None else queue_offset] = LaneEntry(
                origin, int(record["due"]), int(record["wake"]), log_offset)
            return
        count = self.delivered.get(origin, 0) + 1
        self.delivered[origin] = count
        if count > 1:
            self.problems.append(f"message {origin} delivered {count} times")
        if int(record["at"]) < int(record["due"]):
            self.problems.append(f"message {origin} delivered at {record['at']}, before its "
                                 f"due time {record['due']}")

    def undelivered(self, due_by: int) -> list[int]:
        """Messages put, due by `due_by`, and not delivered (nor lost to retention)."""
        return sorted(origin for origin, due in self.puts.items()
                      if due <= due_by and origin not in self.delivered
                      and origin not in self.retained_away)

    def retain_from(self, log_offset: int) -> None:
        """Retention removed the log below `log_offset`: the lane entries there go; a pending
        one's message is lost."""
        progress = self.state.progress()
        self.version += 1
        for key, entries in self.lanes.items():
            for queue_offset in [q for q, e in entries.items() if e.log_offset < log_offset]:
                if queue_offset >= progress.get(key, 0):
                    self.retained_away.add(entries[queue_offset].origin)
                del entries[queue_offset]

    def pending(self) -> bool:
        progress = self.state.progress()
        return any(entries and max(entries) >= progress.get(key, 0)
                   for key, entries in self.lanes.items())


class SimScheduler:
    """The scheduler of one master's or leader's term (see the module docstring)."""

    def __init__(self, model: TimerModel) -> None:
        self.cursors = model.state.progress()
        # Nothing to do before this time while the model is at this version (the last round
        # wrote nothing): the heads' earliest wake, and the version it was seen at.
        self._idle_until: tuple[int, int] = (-1, 0)

    def round(self, model: TimerModel, now: int, append: Append) -> None:
        """Write what every awake head becomes, lane by lane; each lane's cursor moves past
        the records `append` took (a prefix: what it refused is tried at the next round)."""
        version, until = self._idle_until
        if version == model.version and now < until:
            return
        next_wake, wrote = 1 << 62, False
        for key, entries in list(model.lanes.items()):  # an append may add a lane
            cursor = self.cursors.get(key, 0)
            if entries and cursor not in entries and cursor < min(entries):
                cursor = min(entries)  # retention took the lane's start (OFFSET_TOO_SMALL)
            written: list[bytes] = []
            for queue_offset in range(cursor, cursor + _ROUND_ENTRIES_MAX):
                entry = entries.get(queue_offset)
                if entry is None:
                    break  # the lane's end
                decision = step(now, entry.wake, entry.due)
                if decision is Step.WAIT:
                    next_wake = min(next_wake, entry.wake)
                    break
                consumed = f"{key}:{queue_offset}"
                if decision is Step.ROLL:
                    lane, wake = roll(SIM_PLAN, now, entry.due)
                    written.append(_encode({"k": "r", "o": entry.origin, "from": consumed,
                                            "lane": lane.key, "due": entry.due,
                                            "wake": wake}))
                else:
                    written.append(_encode({"k": "d", "o": entry.origin, "from": consumed,
                                            "due": entry.due, "at": now}))
            if written:
                self.cursors[key] = cursor + append(written)
                wrote = True
            elif cursor != self.cursors.get(key, 0):
                self.cursors[key] = cursor
        self._idle_until = (-1, 0) if wrote else (model.version, next_wake)

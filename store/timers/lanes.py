"""Where a delayed message waits, and what its lane's head becomes: pure, time is an input.

A lane is a queue whose entries all wait the same `wait_ms` from when they were written, so
wake times (written time + wait_ms) only grow along it and the scheduler reads it from its
head. A delay level's lane waits the level's delay: its entries wake when due. Timer lane k
waits `precision_ms * 2**k`; a message goes to the longest lane that does not pass its due
time, and at each wake rolls to the lane of what is left, so it is never delivered early,
after at most one roll per lane. In lane 0 what is left is below `precision_ms`: an entry
wakes at its due time, and waits at most `precision_ms` behind one written before it that
wakes later (the lane is read from its head); so a delivery is at most `precision_ms` late,
plus the scheduler's own time.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from store.errors import ConfigError
from store.timers.names import SCHEDULE_TOPIC, TIMER_TOPIC

# RocketMQ's messageDelayLevel.
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
# The delay-offset table's range (store/metadata/models.py): at most 18 levels.
DELAY_LEVELS_MAX = 18
DEFAULT_TIMER_PRECISION_MS = 100
DEFAULT_TIMER_MAX_DELAY_MS = 3 * 86_400_000  # RocketMQ's timerMaxDelaySec
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^([1-9][0-9]{0,9})(ms|s|m|h|d)$")


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """"1s 5s 1m 2h" -> waits in ms, level 1 first; ConfigError naming `delay_levels`."""
    words = text.split()
    if not 1 <= len(words) <= DELAY_LEVELS_MAX:
        raise ConfigError(f"delay_levels: 1 to {DELAY_LEVELS_MAX} durations separated by "
                          f"spaces (got {len(words)})")
    waits = []
    for word in words:
        match = _DURATION.match(word)
        if match is None:
            raise ConfigError(f"delay_levels: {word!r} is not a duration such as 500ms, 5s, "
                              "1m, 2h or 1d")
        waits.append(int(match.group(1)) * _UNIT_MS[match.group(2)])
    return tuple(waits)


@dataclass(frozen=True, slots=True)
class Lane:
    topic: str
    queue_id: int
    wait_ms: int

    @property
    def key(self) -> str:
        """How records name the lane: "S:<queue>" (a level) or "T:<queue>" (a timer lane)."""
        return ("S:" if self.topic == SCHEDULE_TOPIC else "T:") + str(self.queue_id)


class Step(enum.Enum):
    WAIT = "WAIT"  # the head is not awake yet: the lane waits
    DELIVER = "DELIVER"
    ROLL = "ROLL"  # awake, not due: on to a shorter lane


@dataclass(frozen=True, slots=True)
class TimerPlan:
    """The lanes a configuration makes: one per delay level, and timer lanes doubling from
    `precision_ms` up to the longest that fits in `max_delay_ms`."""

    level_waits_ms: tuple[int, ...] = field(
        default_factory=lambda: parse_delay_levels(DEFAULT_DELAY_LEVELS))
    precision_ms: int = DEFAULT_TIMER_PRECISION_MS
    max_delay_ms: int = DEFAULT_TIMER_MAX_DELAY_MS

    def __post_init__(self) -> None:
        if not 1 <= len(self.level_waits_ms) <= DELAY_LEVELS_MAX:
            raise ConfigError(f"delay_levels: 1 to {DELAY_LEVELS_MAX} levels")
        if not 1 <= self.precision_ms <= 60_000:
            raise ConfigError(f"timer_precision_ms: must be in [1, 60000] "
                              f"(got {self.precision_ms})")
        if not self.precision_ms <= self.max_delay_ms <= 366 * 86_400_000:
            raise ConfigError(f"timer_max_delay_ms: must be in [timer_precision_ms, 366 days] "
                              f"(got {self.max_delay_ms})")

    @property
    def level_count(self) -> int:
        return len(self.level_waits_ms)

    @property
    def timer_lane_count(self) -> int:
        return (self.max_delay_ms // self.precision_ms).bit_length()

    def level_lane(self, level: int) -> Lane:
        """Level 1..level_count (the caller checks the range)."""
        return Lane(SCHEDULE_TOPIC, level - 1, self.level_waits_ms[level - 1])

    def timer_lane(self, remaining_ms: int) -> Lane:
        """The longest timer lane whose wait does not pass `remaining_ms` (lane 0 below it)."""
        index = max(0, (remaining_ms // self.precision_ms).bit_length() - 1)
        index = min(index, self.timer_lane_count - 1)
        return Lane(TIMER_TOPIC, index, self.precision_ms << index)

    @property
    def lanes(self) -> tuple[Lane, ...]:
        return (*(self.level_lane(level) for level in range(1, self.level_count + 1)),
                *(Lane(TIMER_TOPIC, index, self.precision_ms << index)
                  for index in range(self.timer_lane_count)))

    def lane_of(self, topic: str, queue_id: int) -> Lane | None:
        if topic == SCHEDULE_TOPIC and 0 <= queue_id < self.level_count:
            return self.level_lane(queue_id + 1)
        if topic == TIMER_TOPIC and 0 <= queue_id < self.timer_lane_count:
            return Lane(TIMER_TOPIC, queue_id, self.precision_ms << queue_id)
        return None


def roll(plan: TimerPlan, now_ms: int, due_ms: int) -> tuple[Lane, int]:
    """Where an awake entry not due yet goes at `now_ms`, and when it wakes there: the
    longest timer lane that does not pass what is left, at most its due time."""
    remaining_ms = due_ms - now_ms
    lane = plan.timer_lane(remaining_ms)
    return lane, now_ms + min(lane.wait_ms, remaining_ms)


def step(now_ms: int, wake_ms: int, due_ms: int) -> Step:
    """What a lane's head becomes at `now_ms`."""
    if now_ms < wake_ms:
        return Step.WAIT
    return Step.DELIVER if now_ms >= due_ms else Step.ROLL

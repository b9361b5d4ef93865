"""A produce's delay, checked, and the scheduled copy it stores: pure, time is an input.

One of `delay_level` (1..the configured levels), `deliver_at_ms` (epoch ms) or `delay_ms`.
A time at or before now is delivered now: the message is stored in its topic as any other
(RocketMQ 5 does the same with a past delivery time). A delay past `timer_max_delay_ms` is
refused, naming the setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from store.record import Message
from store.timers.lane_entry import Schedule, with_schedule
from store.timers.lanes import Lane, TimerPlan


class DelayInputError(ValueError):
    """A delay the broker refuses: `code` names the problem, `setting` the bound, if any."""

    def __init__(self, code: str, detail: str, setting: str | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.setting = setting


@dataclass(frozen=True, slots=True)
class Delay:
    delay_level: int | None = None
    deliver_at_ms: int | None = None
    delay_ms: int | None = None

    @property
    def is_requested(self) -> bool:
        return (self.delay_level is not None or self.deliver_at_ms is not None
                or self.delay_ms is not None)


@dataclass(frozen=True, slots=True)
class Scheduled:
    lane: Lane
    due_ms: int
    wake_ms: int


def plan_delay(plan: TimerPlan, delay: Delay, now_ms: int) -> Scheduled | None:
    """Where the message waits and until when; None: deliver now."""
    given = [name for name, value in (("delay_level", delay.delay_level),
                                      ("deliver_at_ms", delay.deliver_at_ms),
                                      ("delay_ms", delay.delay_ms)) if value is not None]
    if len(given) > 1:
        raise DelayInputError("DELAY_CONFLICT", f"give one of delay_level, deliver_at_ms and "
                              f"delay_ms, not {' and '.join(given)}")
    if delay.delay_level is not None:
        level = delay.delay_level
        if not 1 <= level <= plan.level_count:
            raise DelayInputError("DELAY_LEVEL_NOT_CONFIGURED", f"delay_level {level} is not "
                                  f"one of the {plan.level_count} configured levels (1.."
                                  f"{plan.level_count})", "delay_levels")
        lane = plan.level_lane(level)
        due = now_ms + lane.wait_ms
        return Scheduled(lane, due, due)
    if delay.deliver_at_ms is not None:
        remaining = delay.deliver_at_ms - now_ms
    elif delay.delay_ms is not None:
        remaining = delay.delay_ms
    else:
        return None
    if remaining > plan.max_delay_ms:
        raise DelayInputError("DELAY_TOO_LONG", f"the message would wait {remaining} ms, more "
                              f"than {plan.max_delay_ms} ms (timer_max_delay_ms)",
                              "timer_max_delay_ms")
    if remaining <= 0:
        return None
    lane = plan.timer_lane(remaining)
    return Scheduled(lane, now_ms + remaining, now_ms + min(lane.wait_ms, remaining))


def scheduled_copy(message: Message, scheduled: Scheduled) -> Message:
    """What is stored in the lane: the message, its real topic and queue and its times in one
    property (store/timers/lane_entry.py)."""
    properties = with_schedule(message.properties, Schedule(
        message.topic, message.queue_id, scheduled.due_ms, scheduled.wake_ms))
    return Message(scheduled.lane.topic, message.body, properties, scheduled.lane.queue_id,
                   message.flag, message.born_timestamp_ms, message.born_host,
                   message.reconsume_times)


def delayed(plan: TimerPlan, message: Message, delay: Delay,
            now_ms: int) -> tuple[Message, int | None]:
    """What to put for `message` (its real topic and queue) delayed by `delay`: its scheduled
    copy and its due time, or the message itself and None when it is due now. Any writer in
    the broker (a produce, a consumer's retry) puts the result like any message, and the
    master's scheduler delivers it; DelayInputError for a delay the plan refuses."""
    scheduled = plan_delay(plan, delay, now_ms)
    if scheduled is None:
        return message, None
    return scheduled_copy(message, scheduled), scheduled.due_ms

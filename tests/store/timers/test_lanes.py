"""The lanes' pure rules: which lane, when an entry wakes, what it becomes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.errors import ConfigError
from store.timers.lanes import (
    DEFAULT_DELAY_LEVELS,
    Step,
    TimerPlan,
    parse_delay_levels,
    step,
)
from store.timers.names import SCHEDULE_TOPIC, TIMER_TOPIC
from store.timers.scheduling import Delay, DelayInputError, plan_delay

PLAN = TimerPlan(parse_delay_levels("1s 5s"), precision_ms=100, max_delay_ms=10_000)


def test_rocketmq_levels_by_default() -> None:
    waits = parse_delay_levels(DEFAULT_DELAY_LEVELS)
    assert len(waits) == 18
    assert waits[0] == 1000 and waits[4] == 60_000 and waits[-1] == 7_200_000
    assert TimerPlan().level_count == 18


@pytest.mark.parametrize("text", ["", "1s 5x", "0s", "1.5s", " ".join(["1s"] * 19)])
def test_bad_level_tables_are_refused_naming_the_setting(text: str) -> None:
    with pytest.raises(ConfigError, match="delay_levels"):
        parse_delay_levels(text)


def test_timer_lanes_double_up_to_the_max_delay() -> None:
    waits = [lane.wait_ms for lane in PLAN.lanes if lane.topic == TIMER_TOPIC]
    assert waits == [100, 200, 400, 800, 1600, 3200, 6400]
    assert PLAN.timer_lane(99).wait_ms == 100
    assert PLAN.timer_lane(100).wait_ms == 100
    assert PLAN.timer_lane(199).wait_ms == 100
    assert PLAN.timer_lane(200).wait_ms == 200
    assert PLAN.timer_lane(10_000).wait_ms == 6400


@given(st.integers(1, 10_000))
def test_a_timer_lane_never_waits_past_a_due_time_it_can_reach(remaining_ms: int) -> None:
    lane = PLAN.timer_lane(remaining_ms)
    assert lane.wait_ms <= max(remaining_ms, PLAN.precision_ms)
    if remaining_ms >= 2 * PLAN.precision_ms and lane.queue_id < PLAN.timer_lane_count - 1:
        assert lane.wait_ms * 2 > remaining_ms  # the longest that fits


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
def test_step_is_never_early(now_ms: int, wake_ms: int, due_ms: int) -> None:
    decision = step(now_ms, wake_ms, due_ms)
    if decision is Step.DELIVER:
        assert now_ms >= due_ms and now_ms >= wake_ms
    elif decision is Step.ROLL:
        assert wake_ms <= now_ms < due_ms
    else:
        assert now_ms < wake_ms


def test_a_level_waits_its_delay() -> None:
    scheduled = plan_delay(PLAN, Delay(delay_level=2), 1000)
    assert scheduled is not None
    assert (scheduled.lane.topic, scheduled.lane.queue_id) == (SCHEDULE_TOPIC, 1)
    assert scheduled.due_ms == scheduled.wake_ms == 6000


@pytest.mark.parametrize(("delay", "code", "setting"), [
    (Delay(delay_level=0), "DELAY_LEVEL_NOT_CONFIGURED", "delay_levels"),
    (Delay(delay_level=3), "DELAY_LEVEL_NOT_CONFIGURED", "delay_levels"),
    (Delay(delay_ms=10_001), "DELAY_TOO_LONG", "timer_max_delay_ms"),
    (Delay(deliver_at_ms=1000 + 10_001), "DELAY_TOO_LONG", "timer_max_delay_ms"),
    (Delay(delay_level=1, delay_ms=5), "DELAY_CONFLICT", None),
    (Delay(deliver_at_ms=5, delay_ms=5), "DELAY_CONFLICT", None),
])
def test_bad_delays_are_refused(delay: Delay, code: str, setting: str | None) -> None:
    with pytest.raises(DelayInputError) as raised:
        plan_delay(PLAN, delay, 1000)
    assert (raised.value.code, raised.value.setting) == (code, setting)


@pytest.mark.parametrize("delay", [Delay(), Delay(delay_ms=0), Delay(deliver_at_ms=1000),
                                   Delay(deliver_at_ms=1)])
def test_now_or_the_past_is_delivered_now(delay: Delay) -> None:
    assert plan_delay(PLAN, delay, 1000) is None


def test_the_max_delay_itself_is_taken() -> None:
    scheduled = plan_delay(PLAN, Delay(delay_ms=10_000), 1000)
    assert scheduled is not None and scheduled.due_ms == 11_000
    assert scheduled.wake_ms == 1000 + 6400


def test_below_the_precision_an_entry_wakes_at_its_due_time() -> None:
    """Lane 0 waits timer_precision_ms; an entry with less left wakes when it is due (not a
    whole precision later), and one with more wakes after its lane's wait."""
    short = plan_delay(PLAN, Delay(delay_ms=30), 1000)
    assert short is not None and short.lane.wait_ms == 100
    assert short.wake_ms == short.due_ms == 1030
    longer = plan_delay(PLAN, Delay(delay_ms=130), 1000)
    assert longer is not None and longer.wake_ms == 1100 and longer.due_ms == 1130

"""Consumption settings: delayed messages and group consumption (receive / ack)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from store.timers.lanes import (
    DEFAULT_DELAY_LEVELS,
    DEFAULT_TIMER_MAX_DELAY_MS,
    DEFAULT_TIMER_PRECISION_MS,
)


class ConsumptionFields(BaseModel):
    """Settings of delayed messages and group consumption (a part of `Settings`)."""

    # -- delayed messages ----------------------------------------------------------------------
    delay_levels: str = Field(
        DEFAULT_DELAY_LEVELS, min_length=2, max_length=512,
        description="the waits of delay levels 1..N (at most 18), e.g. \"1s 5s 1m 2h\" "
                    "(units ms, s, m, h, d); RocketMQ's messageDelayLevel by default")
    timer_precision_ms: int = Field(
        DEFAULT_TIMER_PRECISION_MS, ge=1, le=60_000,
        description="the shortest timer lane: a message sent with deliver_at_ms or delay_ms "
                    "is delivered at most this late (plus the scheduler's own time)")
    timer_max_delay_ms: int = Field(
        DEFAULT_TIMER_MAX_DELAY_MS, ge=1, le=366 * 86_400_000,
        description="the longest wait deliver_at_ms or delay_ms may ask for; more answers 400")
    timer_cancels_pending_max: int = Field(
        10_000, ge=1, le=1_000_000,
        description="cancelled delayed messages not yet due, at once; one more answers 429")
    # -- group consumption (receive / ack) ------------------------------------------------------
    pop_invisible_ms_min: int = Field(
        10_000, ge=1, le=86_400_000,
        description="the shortest invisible time a receive or a change of invisibility may ask "
                    "for (RocketMQ: 10 s); less answers 400")
    pop_invisible_ms_max: int = Field(
        12 * 3_600_000, ge=1, le=7 * 86_400_000,
        description="the longest invisible time a receive or a change may ask for (12 h)")
    pop_in_flight_per_group_max: int = Field(
        100_000, ge=1, le=10_000_000,
        description="messages received and not yet acked, per group; a receive past it answers "
                    "fewer, or 429 POP_IN_FLIGHT_MAX_REACHED when none fits")
    pop_window_max: int = Field(
        1024, ge=1, le=65_536,
        description="queue offsets one queue's in-flight window holds for a group (the same on "
                    "every replica): a queue whose window is full gives nothing new until its "
                    "oldest messages are acked")
    pop_queue_states_max: int = Field(
        65_536, ge=1, le=10_000_000,
        description="(group, topic, queue) states group consumption keeps; a receive that "
                    "needs one more answers 429")
    pop_handle_key: str = Field(
        "twinlog-receipt-handle-v1", min_length=1, max_length=256,
        description="the key of receipt handles' integrity tag: the same on every broker of a "
                    "group (master and slaves), so that a failover keeps handles valid")
    pop_backoff: str = Field(
        "table", pattern="^(table|exponential)$",
        description="the wait before a released message is receivable again, for a group "
                    "without a backoff of its own (the group's `backoff`): table "
                    "(RocketMQ's delay levels from 10 s: 10 s, 30 s, 1 m, 2 m, ... 2 h) or "
                    "exponential (pop_backoff_initial_ms doubling, capped at 2 h)")
    pop_backoff_initial_ms: int = Field(
        5_000, ge=1, le=7_200_000, description="the first wait of the exponential backoff")
    pop_expiry_interval_ms: int = Field(
        50, ge=1, le=60_000,
        description="the longest the master's expiry tick sleeps: it wakes when the "
                    "earliest invisible time it knows of passes, and at least this often "
                    "for deliveries made since (a redelivery is at most about this late)")
    pop_expiry_gap_ms: int = Field(
        10, ge=1, le=60_000,
        description="the shortest time between two expiry ticks (or the interval, if "
                    "shorter): invisible times that pass within it are redelivered in one "
                    "round, in fewer records (a redelivery is typically at most this late)")

"""Delayed messages: the schedule's figures (`GET /admin/timers`) and a cancel's answer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from store import PutMessageStatus


class TimerLaneView(BaseModel):
    """One lane: a delay level's queue, or a timer lane (waits timer_precision_ms * 2**k)."""

    lane: str = Field(description='"S:<queue>" (delay level queue + 1) or "T:<k>".')
    kind: Literal["level", "timer"]
    delay_level: int | None = None
    wait_ms: int
    pending: int = Field(description="Entries not yet consumed by the scheduler.")
    next_queue_offset: int = Field(description="The delivery progress every replica derives "
                                               "from its log (the delay offset of a level).")
    oldest_due_ms: int | None = Field(None, description="The due time of the lane's head.")


class LatenessView(BaseModel):
    """Delivery time minus due time, on this broker since it became master (bucket bounds)."""

    count: int
    p50_ms_at_most: int | None
    p99_ms_at_most: int | None
    max_ms: int


class TimersView(BaseModel):
    scheduler_active: bool = Field(description="This broker delivers: a master, or a DLedger "
                                               "leader caught up in its term.")
    pending_total: int = Field(description="Delayed messages not yet due or not yet written: "
                                           "levels and timers.")
    pending_levels: int
    pending_timers: int
    oldest_due_ms: int | None
    delivered_total: int
    rolled_total: int
    dropped_totals: dict[str, int] = Field(
        description="Dropped instead of delivered, by reason: cancelled, topic_missing (the "
                    "topic was deleted before the message was due), origin_gone (retention "
                    "removed the scheduled copy).")
    cancels_pending: int
    write_refusals_total: int
    lateness: LatenessView
    lanes: list[TimerLaneView]


class CancelView(BaseModel):
    """A delayed message cancelled before it was due: it will not be delivered."""

    msg_id: str
    topic: str
    deliver_at_ms: int
    status: PutMessageStatus = Field(description="How the cancel marker was stored: PUT_OK, or "
                                                 "stored with a guarantee missing (202).")
    already_cancelled: bool = False

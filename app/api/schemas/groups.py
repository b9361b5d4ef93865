"""Subscription groups, their consumer offsets, and consumer lag."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, Field, StringConstraints, model_validator

from app.api.schemas.fields import GROUP_PATTERN, QUEUE_ID_MAX, STRICT, Offset, QueueId, WholeNumber
from store.consumption.policy import (
    BACKOFF_CAP_MS,
    MULTIPLIER_MAX,
    MULTIPLIER_MIN,
    Backoff,
    BackoffKind,
)

BackoffMs = Annotated[int, Field(ge=1, le=BACKOFF_CAP_MS), WholeNumber]
DEFAULT_INITIAL_MS = Backoff().initial_ms
RetryQueueCount = Annotated[int, Field(ge=0, le=QUEUE_ID_MAX + 1), WholeNumber]
RetryTimesMax = Annotated[int, Field(ge=0, le=128), WholeNumber]


class GroupBackoff(BaseModel):
    """How long a message released by its consumer (change-invisibility to 0) waits before it
    is receivable again, by its delivery attempt n."""

    model_config = STRICT

    policy: Literal["table", "exponential"] = Field(description=(
        "table: RocketMQ's delay levels from 10 s (10 s, 30 s, 1 m, 2 m, 3 m, ... 10 m, 20 m, "
        "30 m, 1 h, 2 h, then 2 h); exponential: initial_ms x multiplier^(n-1), at most "
        "max_ms. The other fields are the exponential policy's: the table policy ignores "
        "them."))
    initial_ms: BackoffMs | None = Field(None, description=(
        "exponential only; default 5,000. Above max_ms it is max_ms (every delay is capped "
        "at max_ms, the first too)."))
    multiplier: Annotated[float, Field(ge=MULTIPLIER_MIN, le=MULTIPLIER_MAX)] | None = Field(
        None, description="exponential only; default 2.")
    max_ms: BackoffMs | None = Field(None, description="exponential only; default 7,200,000 "
                                                       "(2 h).")

    @model_validator(mode="after")
    def _check(self) -> Self:
        self.backoff()  # a ValueError names what is wrong (a 400)
        return self

    def backoff(self) -> Backoff:
        """The stored backoff. Every body the schema allows has one (the generated clients
        and the contract fuzzer rely on it): no rule here joins two fields."""
        if self.policy == BackoffKind.TABLE.value:
            return Backoff()
        max_ms = BACKOFF_CAP_MS if self.max_ms is None else self.max_ms
        initial_ms = DEFAULT_INITIAL_MS if self.initial_ms is None else self.initial_ms
        return Backoff.exponential(
            min(initial_ms, max_ms), 2.0 if self.multiplier is None else self.multiplier,
            max_ms)

    @classmethod
    def of(cls, text: str) -> GroupBackoff | None:
        """A group's stored backoff as the API shows it (None: the broker's default)."""
        if not text:
            return None
        backoff = Backoff.parse(text)
        if backoff.kind is BackoffKind.TABLE:
            return cls(policy="table", initial_ms=None, multiplier=None, max_ms=None)
        return cls(policy="exponential", initial_ms=backoff.initial_ms,
                   multiplier=backoff.multiplier, max_ms=backoff.max_ms)


_BACKOFF_DESCRIPTION = ("The group's backoff for released messages; null (or left out): the "
                        "broker's pop_backoff setting.")
_FIFO_DESCRIPTION = (
    "A FIFO group: receives deliver each of a topic's queues in order, one message at a "
    "time (messages without a message group key too), the next only once the one before is "
    "acked or dead-lettered; a released or expired message is retried in place. A change "
    "applies from each queue's next receive.")


class GroupCreate(BaseModel):
    model_config = STRICT

    name: Annotated[str, StringConstraints(pattern=GROUP_PATTERN)]
    consume_enabled: bool = True
    broadcast_enabled: bool = False
    retry_queue_count: RetryQueueCount = 1
    retry_times_max: RetryTimesMax = 16
    backoff: GroupBackoff | None = Field(None, description=_BACKOFF_DESCRIPTION)
    fifo: bool = Field(False, description=_FIFO_DESCRIPTION)


class GroupUpdate(BaseModel):
    """Fields left out stay as they are."""

    model_config = STRICT

    consume_enabled: bool | None = None
    broadcast_enabled: bool | None = None
    retry_queue_count: RetryQueueCount | None = None
    retry_times_max: RetryTimesMax | None = None
    backoff: GroupBackoff | None = Field(None, description=(
        "The group's backoff for released messages; null sets the broker's pop_backoff "
        "back."))
    fifo: bool | None = Field(None, description=_FIFO_DESCRIPTION)


class Group(BaseModel):
    name: str
    consume_enabled: bool
    broadcast_enabled: bool
    retry_queue_count: int
    retry_times_max: int
    backoff: GroupBackoff | None = Field(description=_BACKOFF_DESCRIPTION)
    fifo: bool = Field(description=_FIFO_DESCRIPTION)
    created_at_ms: int
    updated_at_ms: int


class GroupList(BaseModel):
    groups: list[Group]


class OffsetCommit(BaseModel):
    model_config = STRICT

    offset: Offset = Field(description="The next queue offset the group will consume.")
    allow_backwards: bool = Field(False, description="Reset: allow a lower offset.")


class OffsetResetByTime(BaseModel):
    model_config = STRICT

    timestamp_ms: Offset = Field(description=(
        "Each queue's offset becomes its first message stored at or after this time (epoch "
        "ms); a queue whose messages are all older gets its max offset."))
    queue_id: QueueId | None = Field(None,
                                     description="Only this queue (default: every read queue).")


class ConsumerOffsetView(BaseModel):
    group: str
    topic: str
    queue_id: int
    offset: int
    updated_at_ms: int


class ConsumerOffsetList(BaseModel):
    offsets: list[ConsumerOffsetView]


class QueueLag(BaseModel):
    topic: str
    queue_id: int
    broker_offset: int = Field(description="The queue's max offset (log end).")
    consumer_offset: int = Field(description="The group's committed offset; -1: none yet.")
    lag: int


class TopicLag(BaseModel):
    topic: str
    max_lag: int
    total_lag: int


class TopicConsumption(BaseModel):
    """A topic the group consumes by receive (group consumption): its messages by state."""

    topic: str
    ready: int = Field(description="Receivable now or when their turn comes (not in flight, "
                                   "never delivered).")
    in_flight: int = Field(description="Received, neither acked nor expired yet.")
    retrying: int = Field(description="Delivered before and waiting for a redelivery (in the "
                                      "retry topic, or in place behind an order key).")
    dead_lettered: int = Field(description="Moved to %DLQ%{group} after the last attempt.")
    acked: int


class LagReport(BaseModel):
    group: str
    max_lag: int
    total_lag: int
    topics: list[TopicLag]
    queues: list[QueueLag]
    consumption: list[TopicConsumption] = Field(description=(
        "Per topic the group receives from (group consumption); empty when it only commits "
        "offsets."))

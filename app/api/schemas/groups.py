"""Subscription groups, their consumer offsets, and consumer lag."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from app.api.schemas.fields import GROUP_PATTERN, QUEUE_ID_MAX, STRICT, Offset, QueueId, WholeNumber


class GroupCreate(BaseModel):
    model_config = STRICT

    name: Annotated[str, StringConstraints(pattern=GROUP_PATTERN)]
    consume_enabled: bool = True
    broadcast_enabled: bool = False
    retry_queue_count: Annotated[int, Field(ge=0, le=QUEUE_ID_MAX + 1), WholeNumber] = 1
    retry_times_max: Annotated[int, Field(ge=0, le=128), WholeNumber] = 16


class Group(BaseModel):
    name: str
    consume_enabled: bool
    broadcast_enabled: bool
    retry_queue_count: int
    retry_times_max: int
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

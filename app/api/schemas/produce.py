"""Produce: the messages a producer sends, single and batched, and the put results."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.api.schemas.fields import (
    KEYS_PER_MESSAGE_MAX,
    PROPERTIES_PER_MESSAGE_MAX,
    STRICT,
    MessageKey,
    MessageTag,
    PropertyName,
    PropertyValue,
    QueueId,
    WholeNumber,
)
from store import PutMessageStatus
from store.timers.lanes import DELAY_LEVELS_MAX

# Property names the broker sets itself; a producer may not set them through `properties`.
PROPERTY_IDEMPOTENCY_KEY = "IDEMPOTENCY_KEY"


RESERVED_PROPERTY_NAMES = frozenset({
    "KEYS", "TAGS", PROPERTY_IDEMPOTENCY_KEY, "UNIQ_KEY", "DELAY", "WAIT", "TRAN_MSG",
    "REAL_TOPIC", "REAL_QID", "RETRY_TOPIC", "MAX_OFFSET", "MIN_OFFSET",
})


# Bounds of the spec; the settings bound them further (delay_levels, timer_max_delay_ms).
DelayLevel = Annotated[int, Field(ge=1, le=DELAY_LEVELS_MAX), WholeNumber]
EpochMs = Annotated[int, Field(ge=0, le=2**53 - 1), WholeNumber]
DelayMs = Annotated[int, Field(ge=0, le=366 * 86_400_000), WholeNumber]

IdempotencyKey = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                                  pattern=r"^[\x21-\x7e]+$")]


class MessageAttributes(BaseModel):
    """What a message carries besides its body (also sent as headers with a raw body)."""

    model_config = STRICT

    keys: list[MessageKey] = Field(
        default_factory=list, max_length=KEYS_PER_MESSAGE_MAX,
        description="Message keys (RocketMQ KEYS), for lookups; no spaces or commas.")
    tags: MessageTag | None = Field(None, description="The message tag (RocketMQ TAGS).")
    properties: dict[PropertyName, PropertyValue] = Field(
        default_factory=dict, max_length=PROPERTIES_PER_MESSAGE_MAX,
        description="User properties. Reserved names: " + ", ".join(
            sorted(RESERVED_PROPERTY_NAMES)) + ".")
    queue_id: QueueId | None = Field(
        None, description="Queue to write to; omitted: round robin over the topic's queues.")
    delay_level: DelayLevel | None = Field(
        None, description="Deliver after the wait of this delay level (1..N of the "
                          "delay_levels setting; RocketMQ's 18 levels, 1s .. 2h, by default).")
    deliver_at_ms: EpochMs | None = Field(
        None, description="Deliver at this time (Unix epoch ms), at most timer_max_delay_ms "
                          "from now; a time not after now is delivered now.")
    delay_ms: DelayMs | None = Field(
        None, description="Deliver after this many ms, at most timer_max_delay_ms; 0 "
                          "delivers now. At most one of delay_level, deliver_at_ms, delay_ms.")


# What binascii.a2b_base64(strict_mode=True) takes: whole quanta, padding only at the end.
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


class ProduceMessage(MessageAttributes):
    """One message as JSON. The body is text (utf8) or base64-encoded bytes."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={
        "if": {"properties": {"body_encoding": {"const": "base64"}},
               "required": ["body_encoding"]},
        "then": {"properties": {"body": {"pattern": BASE64_PATTERN}}}})

    body: str = Field(description="The message body, encoded as `body_encoding` says.")
    body_encoding: Literal["utf8", "base64"] = "utf8"


class ProduceBatchEntry(ProduceMessage):
    """One message of a batch; `idempotency_key` works as the single produce's header."""

    idempotency_key: IdempotencyKey | None = None


class ProduceBatch(BaseModel):
    """Messages stored in order under one lock hold; at most max_batch_messages (setting)."""

    model_config = STRICT

    messages: list[ProduceBatchEntry] = Field(min_length=1)


class PutResult(BaseModel):
    """The outcome of one put. `status` is the broker's PutMessageStatus; `http_status` is the
    code the put would have alone (201 stored, 202 stored with a guarantee missing)."""

    status: PutMessageStatus
    http_status: int
    topic: str
    msg_id: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    commit_log_offset: int | None = None
    wrote_bytes: int = 0
    deliver_at_ms: int | None = Field(
        None, description="A delayed message: when it is due (Unix epoch ms). `msg_id`, "
                          "`queue_id` and `queue_offset` then name the scheduled copy (its "
                          "place in the schedule); the delivered message carries that msg id "
                          "in its property TWINLOG_SCHEDULED_MSG_ID.")
    replayed: bool = Field(
        False, description="True when this is the first result of an earlier request with "
                           "the same idempotency key: nothing new was stored.")
    detail: str | None = None
    error_code: PutMessageStatus | None = Field(
        None, description="A batch entry not stored: its PutMessageStatus.")


class BatchResult(BaseModel):
    results: list[PutResult]

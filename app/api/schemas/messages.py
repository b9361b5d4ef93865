"""Messages read back: consumed from a queue, or looked up by id or key."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from store import GetMessageStatus


class ConsumedMessage(BaseModel):
    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    size_bytes: int
    body: str
    body_encoding: Literal["utf8", "base64"]
    keys: list[str]
    tags: str | None
    properties: dict[str, str]
    idempotency_key: str | None
    born_timestamp_ms: int
    store_timestamp_ms: int
    reconsume_times: int


class KeyLookupResult(BaseModel):
    topic: str
    key: str
    messages: list[ConsumedMessage] = Field(description="Newest first.")


class ConsumeResult(BaseModel):
    topic: str
    queue_id: int
    status: GetMessageStatus
    next_offset: int = Field(description="Where the next read of this queue starts.")
    min_offset: int
    max_offset: int
    messages: list[ConsumedMessage]

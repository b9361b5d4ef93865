"""Topics: create, update, describe, list."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints

from app.api.schemas.fields import STRICT, TOPIC_PATTERN, QueueCount, WholeNumber


class TopicCreate(BaseModel):
    model_config = STRICT

    name: Annotated[str, StringConstraints(pattern=TOPIC_PATTERN)]
    read_queue_count: QueueCount | None = None
    write_queue_count: QueueCount | None = None
    permission: Annotated[Literal[0, 2, 4, 6], WholeNumber] = Field(
        6, description="RocketMQ bits: 4 read, 2 write.")


class TopicUpdate(BaseModel):
    model_config = STRICT

    read_queue_count: QueueCount | None = Field(None, description="May only grow.")
    write_queue_count: QueueCount | None = Field(None, description="May only grow.")
    permission: Annotated[Literal[0, 2, 4, 6], WholeNumber] | None = Field(
        None, description="RocketMQ bits: 4 read, 2 write.")


# One transaction creates a batch: bounded like every batch.
TOPICS_PER_BATCH_MAX = 1000


class TopicCreateBatch(BaseModel):
    model_config = STRICT

    topics: list[TopicCreate] = Field(min_length=1, max_length=TOPICS_PER_BATCH_MAX,
                                      description="Created all together, or none of them.")


class Topic(BaseModel):
    name: str
    read_queue_count: int
    write_queue_count: int
    permission: int
    readable: bool
    writable: bool
    created_at_ms: int
    updated_at_ms: int


class QueueOffsets(BaseModel):
    queue_id: int
    min_offset: int
    max_offset: int
    message_count: int


class TopicDetail(Topic):
    queues: list[QueueOffsets]


class TopicList(BaseModel):
    topics: list[Topic]

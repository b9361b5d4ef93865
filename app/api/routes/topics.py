"""Topics: list, create, update, delete (master only), describe with per-queue offsets."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from app.api import metadata_writes
from app.api.deps import BrokerDep, MasterBrokerDep, TopicPath, requires
from app.api.errors import ApiError
from app.api.openapi import problem_responses
from app.api.schemas.topics import (
    QueueOffsets,
    Topic,
    TopicCreate,
    TopicCreateBatch,
    TopicDetail,
    TopicList,
    TopicUpdate,
)
from app.api.topic_lookup import require_topic, topic_known
from app.broker.broker import Broker
from app.settings import Scope
from store.metadata import NewTopic, TopicConfig

router = APIRouter(tags=["topics"])


def _queue_counts(read_queue_count: int | None, write_queue_count: int | None,
                  default: int) -> tuple[int, int]:
    """(read, write): a count left out takes the other's value, both default_queue_count when
    neither is given (so a topic asked for 1 read queue gets 1 write queue, not 4 that no
    one could read)."""
    read = read_queue_count or write_queue_count or default
    return read, write_queue_count or read_queue_count or default


def topic_view(config: TopicConfig) -> Topic:
    return Topic(name=config.name, read_queue_count=config.read_queue_count,
                 write_queue_count=config.write_queue_count, permission=config.permission,
                 readable=config.readable, writable=config.writable,
                 created_at_ms=config.created_at_ms, updated_at_ms=config.updated_at_ms)


@router.get("/v1/topics", operation_id="list-topics", dependencies=[requires(Scope.CONSUME)],
            responses=problem_responses(401, 403, 503))
def list_topics(broker: BrokerDep) -> TopicList:
    """Every topic of this broker's metadata (a slave's copy is synced from its master)."""
    return TopicList(topics=[topic_view(config)
                             for config in broker.metadata_store.list_topics()])


@router.post("/v1/topics", operation_id="create-topic", status_code=status.HTTP_201_CREATED,
             dependencies=[requires(Scope.ADMIN)],
             responses=problem_responses(202, 400, 401, 403, 409, 429, 503, 507))
def create_topic(topic: TopicCreate, broker: MasterBrokerDep) -> Topic:
    """Create a topic; queue counts default to the broker's default_queue_count."""
    default = broker.metadata_store.default_queue_count
    [config] = metadata_writes.create_topics(broker, [NewTopic(
        topic.name, *_queue_counts(topic.read_queue_count, topic.write_queue_count, default),
        topic.permission)])
    return topic_view(config)


@router.post("/v1/topics:batch", operation_id="create-topics",
             status_code=status.HTTP_201_CREATED, dependencies=[requires(Scope.ADMIN)],
             responses=problem_responses(202, 400, 401, 403, 409, 429, 503, 507))
def create_topics(batch: TopicCreateBatch, broker: MasterBrokerDep) -> TopicList:
    """Create many topics in one transaction: all of them, or none (409 when one exists or
    when they would pass topics_max)."""
    default = broker.metadata_store.default_queue_count
    configs = metadata_writes.create_topics(broker, [
        NewTopic(topic.name,
                 *_queue_counts(topic.read_queue_count, topic.write_queue_count, default),
                 topic.permission)
        for topic in batch.topics])
    return TopicList(topics=[topic_view(config) for config in configs])


@router.patch("/v1/topics/{topic}", operation_id="update-topic",
              dependencies=[requires(Scope.ADMIN)],
              responses=problem_responses(202, 400, 401, 403, 404, 409, 429, 503, 507))
def update_topic(topic: TopicPath, update: TopicUpdate, broker: MasterBrokerDep) -> Topic:
    """Change a topic's permission and grow its queue counts (409 QUEUE_COUNT_SHRINKS for a
    count lower than today's: its queues' messages would be stranded). Fields left out stay."""
    metadata = broker.metadata_store
    current = metadata.get_topic(name=topic)
    for field, wanted, now in (("read_queue_count", update.read_queue_count,
                                current.read_queue_count),
                               ("write_queue_count", update.write_queue_count,
                                current.write_queue_count)):
        if wanted is not None and wanted < now:
            raise ApiError("QUEUE_COUNT_SHRINKS", f"{field} may only grow ({now} today, "
                           f"{wanted} asked)")
    config = metadata_writes.update_topic(broker, topic,
                                          read_queue_count=update.read_queue_count,
                                          write_queue_count=update.write_queue_count,
                                          permission=update.permission)
    return topic_view(config)


@router.delete("/v1/topics/{topic}", operation_id="delete-topic",
               status_code=status.HTTP_204_NO_CONTENT, dependencies=[requires(Scope.ADMIN)],
               responses=problem_responses(202, 400, 401, 403, 404, 429, 503, 507))
def delete_topic(topic: TopicPath, broker: MasterBrokerDep) -> Response:
    """Delete a topic: its config and consumer offsets, its consume queues and key-index
    entries. Its messages stay in the commit log until retention removes them; reads and
    lookups by key no longer see them (a lookup by msg_id still does). A produce then
    answers 404, unless auto_create_topics makes the topic afresh."""
    metadata_writes.delete_topic(broker, topic)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/v1/topics/{topic}", operation_id="describe-topic",
            dependencies=[requires(Scope.CONSUME)],
            responses=problem_responses(400, 401, 403, 404, 503))
async def describe_topic(topic: TopicPath, broker: BrokerDep) -> TopicDetail:
    """A topic's config and, per queue, the [min, max) offsets held. 404 only once this
    broker's tables hold its whole log; 503 METADATA_CATCHING_UP when they trail it."""
    if not topic_known(broker, topic):
        await require_topic(broker, topic)
    config = broker.metadata_store.find_topic(name=topic)
    store_queue_ids = broker.store.queues.topics().get(topic)
    if config is None:
        if store_queue_ids is None:
            raise ApiError("TOPIC_NOT_FOUND", f"topic {topic!r} does not exist")
        # A slave that has the messages but not yet the master's topic config.
        count = max(store_queue_ids) + 1
        config = TopicConfig(name=topic, read_queue_count=count, write_queue_count=count,
                             permission=6, created_at_ms=0, updated_at_ms=0)
    queue_count = max(config.read_queue_count, config.write_queue_count,
                      max(store_queue_ids or [-1]) + 1)
    return TopicDetail(**topic_view(config).model_dump(),
                       queues=[queue_offsets(broker, topic, queue_id)
                               for queue_id in range(queue_count)])


def queue_offsets(broker: Broker, topic: str, queue_id: int) -> QueueOffsets:
    bounds = broker.store.queue_offset_range(topic, queue_id)
    low, high = bounds if bounds is not None else (0, 0)
    return QueueOffsets(queue_id=queue_id, min_offset=low, max_offset=high,
                        message_count=high - low)

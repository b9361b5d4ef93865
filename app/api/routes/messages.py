"""Messages looked up directly: by message id (`GET /v1/messages/{msg_id}`) and by key
(`GET /v1/topics/{topic}/messages?key=K`, through the store's key index)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from starlette.concurrency import run_in_threadpool

from app.api.deps import BrokerDep, TopicPath, requires
from app.api.errors import ApiError
from app.api.openapi import problem_responses
from app.api.routes.consume import consumed
from app.api.schemas.messages import ConsumedMessage, KeyLookupResult
from app.settings import Scope
from store.index.key_index import LOOKUP_RESULTS_MAX
from store.message_id import MSG_ID_HEX_LENGTH, MSG_ID_PATTERN, LookupStatus
from store.system_topics import is_system_topic

router = APIRouter(tags=["consume"], dependencies=[requires(Scope.CONSUME)])

BodyEncoding = Annotated[Literal["base64", "utf8"], Query(
    description="utf8: bodies that are not UTF-8 still come as base64.")]


@router.get("/v1/messages/{msg_id}", operation_id="get-message",
            responses=problem_responses(400, 401, 403, 404, 503))
async def get_message(
    # The pattern is declared, not enforced by FastAPI: the handler's own check answers the
    # specific 400 INVALID_MESSAGE_ID (and both accept exactly the same ids).
    msg_id: Annotated[str, Path(json_schema_extra={"pattern": MSG_ID_PATTERN}, description=(
            "A msg_id as produce answers it: 32 hex digits, the storing broker's host and port "
            "and the record's commit-log offset."))],
    broker: BrokerDep,
    body_encoding: BodyEncoding = "base64",
) -> ConsumedMessage:
    """The message a msg_id names, read at its commit-log offset: 400 for an id that is not 32
    hex digits, 404 when no record of that host starts at that offset (past the log, removed
    by retention, or an id of another broker)."""
    result = await run_in_threadpool(broker.store.get_message_by_id, msg_id)
    if result.status is LookupStatus.MALFORMED_ID:
        raise ApiError("INVALID_MESSAGE_ID", f"{msg_id!r} is not a message id "
                       f"({MSG_ID_HEX_LENGTH} hex digits)")
    if result.message is None or is_system_topic(result.message.topic):
        # (a record of the broker's own topics is not a message: store/system_topics.py)
        raise ApiError("MESSAGE_NOT_FOUND", f"no message {msg_id} on this broker")
    return consumed(result.message, body_encoding)


KEY_LENGTH_MAX = 1024
TIMESTAMP_MS_MAX = 2**63 - 1


@router.get("/v1/topics/{topic}/messages", operation_id="find-messages-by-key",
            responses=problem_responses(400, 401, 403, 404, 503))
async def find_messages_by_key(
    topic: TopicPath,
    broker: BrokerDep,
    key: Annotated[str, Query(min_length=1, max_length=KEY_LENGTH_MAX,
                              description="A message key (one of a message's keys).")],
    max_messages: Annotated[int, Query(ge=1, le=LOOKUP_RESULTS_MAX)] = 32,
    begin_timestamp_ms: Annotated[int, Query(ge=0, le=TIMESTAMP_MS_MAX, description=(
        "Only messages stored at or after this time (epoch ms)."))] = 0,
    end_timestamp_ms: Annotated[int, Query(ge=0, le=TIMESTAMP_MS_MAX, description=(
        "Only messages stored before this time (epoch ms)."))] = TIMESTAMP_MS_MAX,
    body_encoding: BodyEncoding = "base64",
) -> KeyLookupResult:
    """The topic's messages with `key`, newest first, at most `max_messages`, through the key
    index (hash slots, bounded files, rebuilt at recovery). 404 when the topic does not
    exist. Messages stored before the index existed are not found."""
    def find() -> KeyLookupResult:
        if broker.metadata_store.find_topic(name=topic) is None \
                and topic not in broker.store.queues.topics():
            raise ApiError("TOPIC_NOT_FOUND", f"topic {topic!r} does not exist")
        found = broker.store.find_by_key(topic, key, max_messages, begin_timestamp_ms,
                                         end_timestamp_ms)
        return KeyLookupResult(topic=topic, key=key, messages=[
            consumed(message, body_encoding) for message in found])

    return await run_in_threadpool(find)

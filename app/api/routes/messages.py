"""Messages looked up directly: by message id (`GET /v1/messages/{msg_id}`) and by key
(`GET /v1/topics/{topic}/messages?key=K`, through the store's key index).

Both are served by the lean lane (app/api/lean_lane.py) and, for what that leaves, by FastAPI,
with the same answer functions. A message by id is one record read, on the event loop; a key
lookup may read up to 4 x max_messages records, on a worker thread.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import orjson
from fastapi import APIRouter, Path, Query, Response
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from app.api.deps import BrokerDep, TopicPath, requires
from app.api.errors import ApiError
from app.api.gateway import Gateway
from app.api.lean_lane import (
    Fallback,
    LeanRoute,
    admit,
    choice_param,
    name_matching,
    query_of,
    send_json,
    whole_param,
)
from app.api.openapi import problem_responses
from app.api.routes.consume import consumed
from app.api.schemas.fields import TOPIC_PATTERN
from app.api.schemas.messages import ConsumedMessage, KeyLookupResult
from app.api.topic_lookup import require_topic, topic_known
from app.broker.broker import Broker
from app.settings import Scope as TokenScope
from store.index.key_index import LOOKUP_RESULTS_MAX
from store.message_id import MSG_ID_HEX_LENGTH, MSG_ID_PATTERN, LookupStatus
from store.system_topics import is_system_topic

router = APIRouter(tags=["consume"], dependencies=[requires(TokenScope.CONSUME)])
_ENCODINGS = ("base64", "utf8")
_TOPIC = re.compile(TOPIC_PATTERN)

BodyEncoding = Annotated[Literal["base64", "utf8"], Query(
    description="utf8: bodies that are not UTF-8 still come as base64.")]


@router.get("/v1/messages/{msg_id}", operation_id="get-message", response_model=ConsumedMessage,
            responses=problem_responses(400, 401, 403, 404, 503))
async def get_message(
    # The pattern is declared, not enforced by FastAPI: the handler's own check answers the
    # specific 400 INVALID_MESSAGE_ID (and both accept exactly the same ids).
    msg_id: Annotated[str, Path(json_schema_extra={"pattern": MSG_ID_PATTERN}, description=(
            "A msg_id as produce answers it: 32 hex digits, the storing broker's host and port "
            "and the record's commit-log offset."))],
    broker: BrokerDep,
    body_encoding: BodyEncoding = "base64",
) -> Response:
    """The message a msg_id names, read at its commit-log offset: 400 for an id that is not 32
    hex digits, 404 when no record of that host starts at that offset (past the log, removed
    by retention, or an id of another broker)."""
    return Response(message_answer(broker, msg_id, body_encoding),
                    media_type="application/json")


def message_answer(broker: Broker, msg_id: str, body_encoding: str) -> bytes:
    """The ConsumedMessage document of the message `msg_id` names: one record read."""
    result = broker.store.get_message_by_id(msg_id)
    if result.status is LookupStatus.MALFORMED_ID:
        raise ApiError("INVALID_MESSAGE_ID", f"{msg_id!r} is not a message id "
                       f"({MSG_ID_HEX_LENGTH} hex digits)")
    if result.message is None or is_system_topic(result.message.topic):
        # (a record of the broker's own topics is not a message: store/system_topics.py)
        raise ApiError("MESSAGE_NOT_FOUND", f"no message {msg_id} on this broker")
    return orjson.dumps(consumed(result.message, body_encoding))


async def get_message_lean(scope: Scope, path_params: dict[str, str], receive: Receive,
                           send: Send, gateway: Gateway) -> None:
    broker = admit(scope, gateway, TokenScope.CONSUME)
    body_encoding = choice_param(query_of(scope), "body_encoding", "base64", _ENCODINGS)
    await send_json(send, message_answer(broker, path_params["msg_id"], body_encoding))


KEY_LENGTH_MAX = 1024
TIMESTAMP_MS_MAX = 2**63 - 1


@router.get("/v1/topics/{topic}/messages", operation_id="find-messages-by-key",
            response_model=KeyLookupResult, responses=problem_responses(400, 401, 403, 404, 503))
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
) -> Response:
    """The topic's messages with `key`, newest first, at most `max_messages`, through the key
    index (hash slots, bounded files, rebuilt at recovery). 404 when the topic does not
    exist. Messages stored before the index existed are not found."""
    return Response(await key_answer(broker, topic, key, max_messages, begin_timestamp_ms,
                                     end_timestamp_ms, body_encoding),
                    media_type="application/json")


async def key_answer(broker: Broker, topic: str, key: str, max_messages: int,
                     begin_timestamp_ms: int, end_timestamp_ms: int,
                     body_encoding: str) -> bytes:
    """The KeyLookupResult document: the topic from the metadata view (no query), then the
    look-up on a worker thread (its index and record reads may go to disk)."""
    if not topic_known(broker, topic):
        await require_topic(broker, topic)
    found = await run_in_threadpool(broker.store.find_by_key, topic, key, max_messages,
                                    begin_timestamp_ms, end_timestamp_ms)
    return orjson.dumps({"topic": topic, "key": key, "messages": [
        consumed(message, body_encoding) for message in found]})


async def find_by_key_lean(scope: Scope, path_params: dict[str, str], receive: Receive,
                           send: Send, gateway: Gateway) -> None:
    broker = admit(scope, gateway, TokenScope.CONSUME)
    topic = name_matching(path_params["topic"], _TOPIC)
    query = query_of(scope)
    key = query.get("key")
    if key is None or not 1 <= len(key) <= KEY_LENGTH_MAX:
        raise Fallback
    max_messages = whole_param(query, "max_messages", 32, 1, LOOKUP_RESULTS_MAX)
    begin_timestamp_ms = whole_param(query, "begin_timestamp_ms", 0, 0, TIMESTAMP_MS_MAX)
    end_timestamp_ms = whole_param(query, "end_timestamp_ms", TIMESTAMP_MS_MAX, 0,
                                   TIMESTAMP_MS_MAX)
    body_encoding = choice_param(query, "body_encoding", "base64", _ENCODINGS)
    await send_json(send, await key_answer(broker, topic, key, max_messages, begin_timestamp_ms,
                                           end_timestamp_ms, body_encoding))


LEAN_ROUTES = (LeanRoute("GET", "/v1/messages/{msg_id}", get_message_lean),
               LeanRoute("GET", "/v1/topics/{topic}/messages", find_by_key_lean))

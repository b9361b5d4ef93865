"""Consume: `GET /v1/topics/{topic}/queues/{queue_id}/messages`, on a master or a slave.

Served by the lean lane (app/api/lean_lane.py, `consume_lean`) and, for what that leaves, by
FastAPI (`consume_messages`): both answer with `read_answer`. The queue check takes the topic
from the metadata view (no query), and the read runs on the event loop, with no thread hop:
it touches the consume queue's and the commit log's mapped pages, which the recent entries a
consumer reads are in (bench/http_consume.py measured it against a hop to a thread).
"""

from __future__ import annotations

import binascii
import re
import time
from collections.abc import Awaitable
from operator import itemgetter
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Query, Response
from starlette.types import Receive, Scope, Send

from app.api.consume_reads import (
    ChunkedRead,
    first_chunk,
    read_in_chunks,
    read_on,
    reads_on,
)
from app.api.deps import BrokerDep, GatewayDep, QueueIdPath, TopicPath, requires
from app.api.direct_lane import Answer, DirectRoute
from app.api.errors import ApiError
from app.api.gateway import Gateway
from app.api.lean_lane import (
    JSON_HEADERS,
    Fallback,
    Headers,
    LeanRoute,
    admit,
    admit_headers,
    choice_param,
    name_matching,
    parsed_query,
    query_of,
    send_json,
    whole_number,
    whole_param,
)
from app.api.long_poll import wait_for_arrival
from app.api.openapi import problem_responses
from app.api.schemas.fields import QUEUE_ID_MAX, TOPIC_PATTERN
from app.api.schemas.messages import ConsumeResult
from app.api.schemas.produce import PROPERTY_IDEMPOTENCY_KEY
from app.api.topic_lookup import require_topic
from app.broker.broker import Broker
from app.settings import Scope as TokenScope
from store import GetMessageStatus, StoredMessage
from store.consumption.names import PROPERTY_ORIGIN_TOPIC
from store.consumption.tags import TAG_EXPRESSION_LENGTH_MAX, TagExpressionError, TagFilter
from store.encoded_reads import Encoded, EncodedRead, Encoder
from store.property_names import PROPERTY_KEYS, PROPERTY_TAGS
from store.timers.names import PROPERTY_DUE_MS, PROPERTY_FROM, PROPERTY_SCHEDULED_MSG_ID

router = APIRouter(tags=["consume"], dependencies=[requires(TokenScope.CONSUME)])
PATH = "/v1/topics/{topic}/queues/{queue_id}/messages"

_SYSTEM_PROPERTIES = frozenset({PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_IDEMPOTENCY_KEY})
# The properties a retry copy names its origin with (store/consumption/names.py): a receive
# answers the origin in the document's own fields instead.
_POP_PROPERTY_PREFIX = "TWINLOG_POP_"
# What a receive leaves out of a retry copy's properties besides TWINLOG_POP_*: the system
# ones, and those its delay (a release's backoff) added when it was delivered to the retry
# topic: the retry's own, not the producer's.
_RETRY_COPY_HIDDEN = _SYSTEM_PROPERTIES | {PROPERTY_DUE_MS, PROPERTY_SCHEDULED_MSG_ID,
                                           PROPERTY_FROM}
READ_MESSAGES_MAX = 1024
WAIT_MS_LIMIT = 300_000  # the schema's bound; the broker cuts to long_poll_wait_ms_max
# Nothing to read yet, but a message may arrive at `offset`: a read with wait_ms waits.
WAITABLE = frozenset({GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
                       GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                       GetMessageStatus.OFFSET_OVERFLOW_ONE})


@router.get(PATH, operation_id="consume-messages", response_model=ConsumeResult,
            responses=problem_responses(401, 403, 404, 429, 503))
async def consume_messages(
    topic: TopicPath,
    queue_id: QueueIdPath,
    broker: BrokerDep,
    gateway: GatewayDep,
    offset: Annotated[int, Query(ge=0, le=2**53 - 1,
                                 description="The queue offset to read from.")] = 0,
    max_messages: Annotated[int, Query(ge=1, le=READ_MESSAGES_MAX)] = 32,
    body_encoding: Annotated[Literal["base64", "utf8"], Query(
        description="utf8: bodies that are not UTF-8 still come as base64 (see each "
                    "message's body_encoding).")] = "base64",
    wait_ms: Annotated[int, Query(ge=0, le=WAIT_MS_LIMIT, description=(
        "Long poll: when nothing is there at `offset` yet, wait up to this long for a message "
        "to arrive (cut to the broker's long_poll_wait_ms_max). 0: answer at once."))] = 0,
    tags: Annotated[str | None, Query(max_length=TAG_EXPRESSION_LENGTH_MAX, description=(
        "Only messages of these tags ('TagA || TagB'; '*' or absent: all); next_offset "
        "passes the others."))] = None,
) -> Response:
    """Messages of one queue from `offset` on, with `next_offset` for the next read. An offset
    below the queue's minimum answers OFFSET_TOO_SMALL with next_offset = the minimum. With
    `wait_ms`, a read that finds nothing waits until dispatch writes the queue's next entry
    (or the time is up, answering the empty result); 429 LONG_POLL_BUSY when
    long_poll_waiters_max reads wait already."""
    answer = await read_answer(broker, gateway, topic, queue_id, offset, max_messages,
                               body_encoding, wait_ms, tag_filter(tags))
    return Response(answer, media_type="application/json")


_TOPIC = re.compile(TOPIC_PATTERN)
_DATA = itemgetter(Encoded._fields.index("data"))
_STORE_TIMESTAMP_MS = itemgetter(Encoded._fields.index("store_timestamp_ms"))
_ENCODINGS = ("base64", "utf8")


async def consume_lean(scope: Scope, path_params: dict[str, str], receive: Receive, send: Send,
                       gateway: Gateway) -> None:
    """The lean lane's consume (app/api/lean_lane.py): the same checks in the same order."""
    broker = admit(scope, gateway, TokenScope.CONSUME)
    read = read_request(path_params, query_of(scope))
    answer = await read_answer(broker, gateway, *read)
    await send_json(send, answer)


def consume_direct(path_params: dict[str, str], query_string: bytes, headers: Headers,
                   gateway: Gateway) -> Answer | Awaitable[Answer]:
    """The direct lane's consume (app/api/direct_lane.py): the lean lane's checks, and its
    answer when the read succeeds; a read that would wait for a message (a long poll)
    declines before it has read anything, and the lean lane serves it."""
    broker = admit_headers(headers, gateway, TokenScope.CONSUME)
    read = read_request(path_params, parsed_query(query_string))
    answer = answer_read(broker, gateway, *read, may_wait=False)
    if isinstance(answer, bytes):
        return Answer(200, JSON_HEADERS, answer)
    return _json_answer(answer)


async def _json_answer(pending: Awaitable[bytes]) -> Answer:
    return Answer(200, JSON_HEADERS, await pending)


def read_request(path_params: dict[str, str], query: dict[str, str]
                  ) -> tuple[str, int, int, int, str, int, TagFilter | None]:
    """A read's topic, queue, offset, max_messages, body_encoding, wait_ms and tag filter
    in their plain forms (lean_lane.Fallback otherwise); 400 INVALID_TAG_EXPRESSION."""
    topic = name_matching(path_params["topic"], _TOPIC)
    queue_id = whole_number(path_params["queue_id"], 0, QUEUE_ID_MAX)
    offset = whole_param(query, "offset", 0, 0, 2**53 - 1)
    max_messages = whole_param(query, "max_messages", 32, 1, READ_MESSAGES_MAX)
    body_encoding = choice_param(query, "body_encoding", "base64", _ENCODINGS)
    wait_ms = whole_param(query, "wait_ms", 0, 0, WAIT_MS_LIMIT)
    tags = query.get("tags")
    if tags is not None and len(tags) > TAG_EXPRESSION_LENGTH_MAX:
        raise Fallback  # FastAPI's validation answers it
    return topic, queue_id, offset, max_messages, body_encoding, wait_ms, tag_filter(tags)


LEAN = LeanRoute("GET", PATH, consume_lean)
DIRECT = DirectRoute("GET", PATH, consume_direct)


def parsed_tags(expression: str | None) -> TagFilter:
    """A tag expression parsed; 400 INVALID_TAG_EXPRESSION."""
    try:
        return TagFilter.parse(expression)
    except TagExpressionError as error:
        raise ApiError("INVALID_TAG_EXPRESSION", str(error)) from None


def tag_filter(expression: str | None) -> TagFilter | None:
    """A read's tag filter (None: every message); 400 INVALID_TAG_EXPRESSION."""
    if expression is None:
        return None
    parsed = parsed_tags(expression)
    return parsed if parsed.tags is not None else None


async def read_answer(broker: Broker, gateway: Gateway, topic: str, queue_id: int, offset: int,
                      max_messages: int, body_encoding: str, wait_ms: int,
                      tags: TagFilter | None = None) -> bytes:
    """The ConsumeResult document of one read (after a long poll's wait, when asked). With
    `tags`, the messages of other tags are left out (next_offset passes them)."""
    answer = answer_read(broker, gateway, topic, queue_id, offset, max_messages,
                         body_encoding, wait_ms, tags)
    return answer if isinstance(answer, bytes) else await answer


def answer_read(broker: Broker, gateway: Gateway, topic: str, queue_id: int, offset: int,
                max_messages: int, body_encoding: str, wait_ms: int, tags: TagFilter | None,
                *, may_wait: bool = True) -> bytes | Awaitable[bytes]:
    """`read_answer`'s document when the read's first chunk is all of it (no turn of the
    event loop taken), else the awaitable that makes it. Without `may_wait`, a read that
    finds nothing and would wait raises lean_lane.Fallback (having kept and counted
    nothing)."""
    started_s = time.perf_counter()
    if not check_readable_queue(broker, topic, queue_id):
        if not may_wait:
            raise Fallback
        return _answer_once_known(broker, gateway, topic, queue_id, offset, max_messages,
                                  body_encoding, wait_ms, tags)
    encoder = ENCODERS[body_encoding]
    read = first_chunk(broker.store, topic, queue_id, offset, max_messages, encoder, tags)
    wait_ms = min(wait_ms, broker.settings.long_poll_wait_ms_max)
    waits = wait_ms > 0 and read.result.status in WAITABLE
    if waits and not may_wait:
        raise Fallback
    if waits or reads_on(read, max_messages):
        return _answer_later(broker, gateway, topic, queue_id, offset, max_messages, encoder,
                             tags, wait_ms, read, started_s)
    return _answer(gateway, topic, queue_id, read.result, started_s)


async def _answer_later(broker: Broker, gateway: Gateway, topic: str, queue_id: int,
                        offset: int, max_messages: int, encoder: Encoder,
                        tags: TagFilter | None, wait_ms: int, read: ChunkedRead,
                        started_s: float) -> bytes:
    store = broker.store
    if reads_on(read, max_messages):
        await read_on(store, topic, queue_id, max_messages, encoder, tags, read)
    result = read.result
    if wait_ms > 0 and result.status in WAITABLE:
        arrived = await wait_for_arrival(store, topic, queue_id, result.max_offset, wait_ms)
        if arrived and broker.is_running:  # not when woken by a stopping broker
            started_s = time.perf_counter()  # the latency of the read, not of the wait
            result = await read_in_chunks(store, topic, queue_id, offset, max_messages,
                                          encoder, tags)
    return _answer(gateway, topic, queue_id, result, started_s)


def _answer(gateway: Gateway, topic: str, queue_id: int, result: EncodedRead,
            started_s: float) -> bytes:
    gateway.metrics.consume.observe(topic, time.perf_counter() - started_s,
                                    list(map(_STORE_TIMESTAMP_MS, result.records)))
    return answer_document(topic, queue_id, result)


def answer_document(topic: str, queue_id: int, result: EncodedRead) -> bytes:
    """The ConsumeResult document of a read's result."""
    records = result.records
    # orjson's document of these fields with "messages" last, the messages' documents being
    # the records' encoded forms (`consumed`, made by orjson too): the same bytes.
    head = orjson.dumps({
        "topic": topic, "queue_id": queue_id, "status": result.status.value,
        "next_offset": result.next_offset, "min_offset": result.min_offset,
        "max_offset": result.max_offset})
    return b"".join((head[:-1], b',"messages":[', b",".join(map(_DATA, records)), b"]}"))


async def _answer_once_known(broker: Broker, gateway: Gateway, topic: str, queue_id: int,
                             offset: int, max_messages: int, body_encoding: str, wait_ms: int,
                             tags: TagFilter | None) -> bytes:
    """A read of a topic this broker does not know: 404 only once its tables hold its whole
    log (app/api/topic_lookup.py), else the read, as usual."""
    await require_topic(broker, topic)
    return await read_answer(broker, gateway, topic, queue_id, offset, max_messages,
                             body_encoding, wait_ms, tags)


def check_readable_queue(broker: Broker, topic: str, queue_id: int) -> bool:
    """False when the topic is not known here (metadata, or the store on a slave not yet
    synced); refused unless the queue is one of its read queues. From the metadata view: no
    query."""
    config = broker.metadata_store.topic_view(topic)
    if config is not None:
        if not config.readable:
            raise ApiError("TOPIC_NOT_READABLE", f"topic {topic!r} does not allow reads")
        if queue_id >= config.read_queue_count:
            raise ApiError("QUEUE_NOT_FOUND", f"queue {queue_id} is not a read queue of topic "
                           f"{topic!r} (read_queue_count {config.read_queue_count})")
        return True
    queue_ids = broker.store.queues.topics().get(topic)
    if queue_ids is None:
        return False
    if queue_id not in queue_ids:
        raise ApiError("QUEUE_NOT_FOUND", f"topic {topic!r} has no queue {queue_id}")
    return True


def consumed(message: StoredMessage, body_encoding: str,
             origin: tuple[str, int, int, str] | None = None) -> dict[str, Any]:
    """The ConsumedMessage document of a message (app/api/schemas/messages.py's field order).
    With `origin` (a receive's: the topic, queue id, queue offset and message id where the
    message was first stored), the message is named by it, and the properties of a retry
    copy's own (TWINLOG_POP_* naming its origin, and its delay's) are left out."""
    properties = message.properties
    body: str | None = None
    encoding = "base64"
    if body_encoding == "utf8":
        try:
            body = message.body.decode("utf-8")
            encoding = "utf8"
        except UnicodeDecodeError:
            body = None
    if body is None:
        body = binascii.b2a_base64(message.body, newline=False).decode("ascii")
    keys = properties.get(PROPERTY_KEYS)
    if origin is None:
        topic, queue_id, queue_offset, msg_id = (message.topic, message.queue_id,
                                                 message.queue_offset, message.msg_id)
    else:
        topic, queue_id, queue_offset, msg_id = origin
    copy = origin is not None and PROPERTY_ORIGIN_TOPIC in properties  # a retry copy received
    hidden = _RETRY_COPY_HIDDEN if copy else _SYSTEM_PROPERTIES
    user_properties: dict[str, Any] = {
        name: value for name, value in properties.items()
        if name not in hidden and not (copy and name.startswith(_POP_PROPERTY_PREFIX))}
    return {
        "msg_id": msg_id, "topic": topic, "queue_id": queue_id, "queue_offset": queue_offset,
        "commit_log_offset": message.commit_log_offset,
        "size_bytes": message.total_size, "body": body, "body_encoding": encoding,
        "keys": keys.split(" ") if keys else [], "tags": properties.get(PROPERTY_TAGS),
        "properties": user_properties,
        "idempotency_key": properties.get(PROPERTY_IDEMPOTENCY_KEY),
        "born_timestamp_ms": message.born_timestamp_ms,
        "store_timestamp_ms": message.store_timestamp_ms,
        "reconsume_times": message.reconsume_times}


# Between two documents in one orjson.dumps: a byte orjson never writes itself (it escapes
# control characters in strings), so the output splits back into the documents exactly.
_SEPARATOR = orjson.Fragment(b"\x00")


def documents(messages: list[StoredMessage], body_encoding: str) -> list[bytes]:
    """orjson.dumps(consumed(message)) of each message, made by one orjson.dumps: each call
    sizes its output buffer anew, and many small ones cost the allocator more than the
    documents cost to write (a 32-message read spent a quarter of its time in realloc)."""
    if len(messages) == 1:
        return [orjson.dumps(consumed(messages[0], body_encoding))]
    parts: list[Any] = [_SEPARATOR] * (2 * len(messages) - 1)
    parts[::2] = [consumed(message, body_encoding) for message in messages]
    return orjson.dumps(parts)[1:-1].split(b",\x00,")


def _utf8_documents(messages: list[StoredMessage]) -> list[bytes]:
    return documents(messages, "utf8")


def _base64_documents(messages: list[StoredMessage]) -> list[bytes]:
    return documents(messages, "base64")


# The encoders of a read's records (store/encoded_reads.py keeps their documents by record).
ENCODERS: dict[str, Encoder] = {"utf8": _utf8_documents, "base64": _base64_documents}

"""Produce: `POST /v1/topics/{topic}/messages` and `POST /v1/topics/{topic}/messages:batch`.

Both are ASGIOperations (app/api/asgi_route.py): the functions at the bottom describe them for the
OpenAPI spec; the `*_asgi` callables serve them, checking what those signatures declare. Order:
token, role (a slave answers 503 naming its master), declared body size, topic name, content
type, idempotency key, body size as read, body schema, queue id; then the put, awaited without
blocking a thread.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import parse_qs

import orjson
from fastapi import Body, Header, Query
from starlette.types import Receive, Scope, Send

from app.api.asgi_answer import send_answer, send_problem
from app.api.asgi_body import Disconnected, check_declared_size, read_body
from app.api.asgi_route import ASGIOperation, TwinlogAPI, documentation_only
from app.api.deps import TopicPath, requires
from app.api.errors import ApiError
from app.api.gateway import Gateway
from app.api.openapi import problem_responses
from app.api.produce import (
    Answer,
    attributes_from_headers,
    batch_from_json,
    born_host_of,
    check_queue,
    check_topic,
    message_from_json,
    message_from_raw,
    put_batch,
    put_one,
    schedule,
)
from app.api.schemas.fields import KeysHeader, MessageTag, QueueId
from app.api.schemas.produce import (
    BatchResult,
    DelayLevel,
    DelayMs,
    EpochMs,
    IdempotencyKey,
    ProduceBatch,
    ProduceMessage,
    PutResult,
)
from app.broker.broker import Broker
from app.settings import Scope as TokenScope
from store import PutMessageStatus

log = logging.getLogger(__name__)

JSON = b"application/json"
OCTET_STREAM = b"application/octet-stream"
_JSON_HEADERS = [(b"content-type", JSON)]
_REPLAYED_HEADERS = [*_JSON_HEADERS, (b"idempotent-replayed", b"true")]
_ILLEGAL = PutMessageStatus.MESSAGE_ILLEGAL


@dataclass(slots=True)
class _Headers:
    content_type: bytes | None = None
    content_length: bytes | None = None
    authorization: str | None = None
    idempotency_key: bytes | None = None
    keys: str | None = None
    tags: str | None = None
    properties: str | None = None
    delay: dict[str, str] | None = None  # delay_level, deliver_at_ms, delay_ms


_DELAY_HEADERS = {b"x-twinlog-delay-level": "delay_level",
                  b"x-twinlog-deliver-at-ms": "deliver_at_ms",
                  b"x-twinlog-delay-ms": "delay_ms"}


def _headers(raw: list[tuple[bytes, bytes]]) -> _Headers:
    """One pass over the request headers, keeping the ones produce reads."""
    found = _Headers()
    for name, value in raw:
        if name == b"content-type":
            found.content_type = value
        elif name == b"content-length":
            found.content_length = value
        elif name == b"authorization":
            found.authorization = value.decode("latin-1")
        elif name == b"idempotency-key":
            found.idempotency_key = value
        elif name.startswith(b"x-twinlog-"):
            if name == b"x-twinlog-keys":
                found.keys = value.decode("latin-1")
            elif name == b"x-twinlog-tags":
                found.tags = value.decode("latin-1")
            elif name == b"x-twinlog-properties":
                found.properties = value.decode("latin-1")
            elif name in _DELAY_HEADERS:
                if found.delay is None:
                    found.delay = {}
                found.delay[_DELAY_HEADERS[name]] = value.decode("latin-1")
    return found


def _media_type(content_type: bytes | None) -> bytes:
    if content_type is None:
        raise ApiError("UNSUPPORTED_MEDIA_TYPE", "send Content-Type application/json or "
                       "application/octet-stream", put_status=_ILLEGAL)
    media_type = content_type.split(b";", 1)[0].strip().lower()
    if media_type != JSON and media_type != OCTET_STREAM:
        raise ApiError("UNSUPPORTED_MEDIA_TYPE", f"Content-Type {media_type.decode('latin-1')!r}"
                       " is not application/json or application/octet-stream",
                       put_status=_ILLEGAL)
    return media_type


def _idempotency_key(value: bytes | None) -> str | None:
    if value is None:
        return None
    if not 1 <= len(value) <= 128 or any(byte < 0x21 or byte > 0x7E for byte in value):
        raise ApiError("INVALID_IDEMPOTENCY_KEY", "Idempotency-Key: 1 to 128 printable ASCII "
                       "characters without spaces", put_status=_ILLEGAL)
    return value.decode("ascii")


def _request_too_large(size: int, size_max: int) -> ApiError:
    return ApiError("REQUEST_TOO_LARGE", f"request body of {size} bytes or more is over the "
                    f"limit of {size_max} bytes (max_body_size_bytes)", put_status=_ILLEGAL)


def _query_queue_id(query_string: bytes) -> str | None:
    if not query_string:
        return None
    values = parse_qs(query_string.decode("latin-1")).get("queue_id")
    return values[-1] if values else None


async def _refuse(send: Send, scope: Scope, gateway: Gateway, error: ApiError) -> None:
    gateway.metrics.puts[error.put_status.value if error.put_status else error.code] += 1
    await send_problem(send, scope, error)


async def _fail(send: Send, scope: Scope, gateway: Gateway) -> None:
    log.exception("produce failed")
    await _refuse(send, scope, gateway, ApiError(
        "INTERNAL_ERROR", "the broker failed; see its log",
        put_status=PutMessageStatus.UNKNOWN_ERROR))


async def produce_message_asgi(scope: Scope, receive: Receive, send: Send) -> None:
    started_s = time.perf_counter()
    gateway: Gateway = scope["app"].state.gateway
    try:
        answer = await _produce_message(scope, receive, gateway)
    except ApiError as error:
        await _refuse(send, scope, gateway, error)
    except Disconnected:
        return
    except Exception:
        await _fail(send, scope, gateway)
    else:
        gateway.metrics.puts[answer.status_name] += 1
        await send_answer(send, answer.http_status, answer.body,
                    _REPLAYED_HEADERS if answer.replayed else _JSON_HEADERS)
    gateway.metrics.single_latency.observe(time.perf_counter() - started_s)


def _admit(scope: Scope, gateway: Gateway) -> tuple[_Headers, Broker, str]:
    """The checks both produce operations open with: token, role, declared body size, topic
    name. The headers, the (master) broker and the topic."""
    headers = _headers(scope["headers"])
    gateway.auth.check(headers.authorization, TokenScope.PRODUCE)
    broker = gateway.master_broker(for_put=True)
    # Before anything else about the request: a refusal here reads no byte of the body.
    check_declared_size(headers.content_length, gateway.settings.max_body_size_bytes,
                        _request_too_large)
    topic: str = scope["path_params"]["topic"]
    check_topic(topic)
    return headers, broker, topic


async def _read_body(receive: Receive, gateway: Gateway) -> bytes:
    """The whole body, up to max_body_size_bytes, counted in the request bytes metric."""
    body = await read_body(receive, None, gateway.settings.max_body_size_bytes,
                           _request_too_large)
    gateway.metrics.request_bytes_total += len(body)
    return body


async def _produce_message(scope: Scope, receive: Receive, gateway: Gateway) -> Answer:
    headers, broker, topic = _admit(scope, gateway)
    media_type = _media_type(headers.content_type)
    key = _idempotency_key(headers.idempotency_key)
    body = await _read_body(receive, gateway)
    settings = gateway.settings
    born_host = born_host_of(scope.get("client"))
    queue_id = _query_queue_id(scope.get("query_string", b""))
    from_headers = attributes_from_headers(headers.keys, headers.tags, headers.properties,
                                           queue_id, headers.delay)
    if media_type == JSON:
        message, delay = message_from_json(topic, body, settings.message_size_max_bytes,
                                           born_host, from_headers)
    else:
        message, delay = message_from_raw(topic, body, from_headers,
                                          settings.message_size_max_bytes, born_host)
    if broker.cached_write_queue_count(topic) is None or message.queue_id is not None:
        await check_queue(broker, message)
    if delay.is_requested:
        stored, due_ms = schedule(broker, message, delay)
        return await put_one(broker, stored, key, topic, due_ms)
    return await put_one(broker, message, key)


async def produce_batch_asgi(scope: Scope, receive: Receive, send: Send) -> None:
    started_s = time.perf_counter()
    gateway: Gateway = scope["app"].state.gateway
    try:
        http_status, results = await _produce_batch(scope, receive, gateway)
    except ApiError as error:
        await _refuse(send, scope, gateway, error)
    except Disconnected:
        return
    except Exception:
        await _fail(send, scope, gateway)
    else:
        puts = gateway.metrics.puts
        for result in results:
            puts[result["status"]] += 1
        await send_answer(send, http_status, orjson.dumps({"results": results}), _JSON_HEADERS)
    gateway.metrics.batch_latency.observe(time.perf_counter() - started_s)


async def _produce_batch(scope: Scope, receive: Receive,
                         gateway: Gateway) -> tuple[int, list[dict[str, Any]]]:
    headers, broker, topic = _admit(scope, gateway)
    if _media_type(headers.content_type) != JSON:
        raise ApiError("UNSUPPORTED_MEDIA_TYPE", "a batch is JSON: send Content-Type "
                       "application/json", put_status=_ILLEGAL)
    if headers.idempotency_key is not None:
        raise ApiError("VALIDATION_FAILED", "a batch takes idempotency_key per entry, not the "
                       "Idempotency-Key header", put_status=_ILLEGAL)
    body = await _read_body(receive, gateway)
    settings = gateway.settings
    entries, delays = batch_from_json(topic, body, settings.max_batch_messages,
                                      settings.message_size_max_bytes,
                                      born_host_of(scope.get("client")))
    for index, (message, _) in enumerate(entries):
        if broker.cached_write_queue_count(topic) is not None and message.queue_id is None:
            continue
        try:
            await check_queue(broker, message)
        except ApiError as error:
            error.detail = f"messages[{index}]: {error.detail}"
            raise
    if not delays:
        return await put_batch(broker, topic, entries)
    due_times: list[int | None] = [None] * len(entries)
    for index, delay in delays.items():  # in the entries' order
        message, key = entries[index]
        try:
            stored, due_times[index] = schedule(broker, message, delay)
        except ApiError as error:
            error.detail = f"messages[{index}]: {error.detail}"
            raise
        entries[index] = (stored, key)
    return await put_batch(broker, topic, entries, due_times)


# -- the documented operations ------------------------------------------------------------------

_FILLS_IN = ("For raw bodies; with a JSON body it fills in the field when the body leaves it "
             "out (the body's own field wins).")
_RAW_BODY = {"type": "string", "format": "binary",
             "description": "The message body as is; attributes in X-Twinlog-* headers."}
_PRODUCE_ERRORS = problem_responses(400, 401, 403, 404, 409, 413, 415, 429, 500, 503, 507)
_PUT_202 = {"model": PutResult,
            "description": "Stored on the master, but a guarantee was not met "
                           "(FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE)."}


async def produce_message(
    topic: TopicPath,
    message: Annotated[ProduceMessage, Body(description="The message as JSON, or its raw body "
                                                        "as application/octet-stream.")],
    idempotency_key: Annotated[IdempotencyKey | None, Header(
        alias="Idempotency-Key",
        description="A retry with the same key (per topic, within idempotency_window_s) "
                    "answers the first result and stores nothing.")] = None,
    x_twinlog_keys: Annotated[KeysHeader | None, Header(
        alias="X-Twinlog-Keys",
        description="Message keys joined by commas. " + _FILLS_IN)] = None,
    x_twinlog_tags: Annotated[MessageTag | None, Header(
        alias="X-Twinlog-Tags", description="The message tag. " + _FILLS_IN)] = None,
    x_twinlog_properties: Annotated[str | None, Header(
        alias="X-Twinlog-Properties",
        description='Properties as a JSON object, e.g. {"order": "42"}. ' + _FILLS_IN)] = None,
    queue_id: Annotated[QueueId | None, Query(
        description="The queue to write to. " + _FILLS_IN)] = None,
    x_twinlog_delay_level: Annotated[DelayLevel | None, Header(
        alias="X-Twinlog-Delay-Level",
        description="Deliver after this delay level's wait. " + _FILLS_IN)] = None,
    x_twinlog_deliver_at_ms: Annotated[EpochMs | None, Header(
        alias="X-Twinlog-Deliver-At-Ms",
        description="Deliver at this Unix epoch ms. " + _FILLS_IN)] = None,
    x_twinlog_delay_ms: Annotated[DelayMs | None, Header(
        alias="X-Twinlog-Delay-Ms", description="Deliver after this many ms. " + _FILLS_IN)]
        = None,
) -> PutResult:
    """Store one message. 201: stored with every guarantee; 202: stored, a guarantee missing
    (`status` says which). Refusals are problem+json naming the `put_status`.

    A delayed message (one of `delay_level`, `deliver_at_ms`, `delay_ms`) is answered the
    same way once its scheduled copy is stored; `deliver_at_ms` in the answer says when it is
    due. A time not after now is delivered now."""
    documentation_only()


async def produce_batch(
    topic: TopicPath,
    batch: Annotated[ProduceBatch, Body()],
) -> BatchResult:
    """Store up to max_batch_messages messages in order, one result per entry. 201 or 202 when
    every entry has that code, 207 with per-entry `http_status` otherwise."""
    documentation_only()


def install(app: TwinlogAPI) -> None:
    """Add the produce operations first in the route list (they are matched most often)."""
    # The dependency documents the bearer requirement; the ASGI callables enforce it.
    common: dict[str, Any] = {"methods": ["POST"], "tags": ["produce"],
                              "dependencies": [requires(TokenScope.PRODUCE)]}
    routes = [
        ASGIOperation(
            "/v1/topics/{topic}/messages", produce_message, asgi_app=produce_message_asgi,
            operation_id="produce-message", status_code=201,
            responses={202: _PUT_202, **_PRODUCE_ERRORS},
            openapi_extra={"requestBody": {"content": {"application/octet-stream": {
                "schema": _RAW_BODY}}}},
            **common),
        ASGIOperation(
            "/v1/topics/{topic}/messages:batch", produce_batch, asgi_app=produce_batch_asgi,
            operation_id="produce-batch", status_code=201,
            responses={202: {"model": BatchResult, "description": "Every entry stored with a "
                                                                  "guarantee missing."},
                       207: {"model": BatchResult, "description": "Entries with different "
                                                                  "outcomes: see http_status."},
                       **_PRODUCE_ERRORS},
            **common),
    ]
    for route in routes:
        app.add_fast_operation(route)

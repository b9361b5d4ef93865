"""Produce requests to store puts and back: parsing, validation, idempotency, answers.

Knows nothing of the ASGI plumbing (app/api/routes/produce.py reads the request and sends the
answer). Validation is the schema's (app/api/schemas/produce.py, strict) plus what a schema cannot
say: base64, sizes, reserved property names, the topic's queue count. Every refusal before the store
is an ApiError, so nothing is stored for a bad request, batch included.
"""

from __future__ import annotations

import asyncio
import binascii
import re
import socket
import struct
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson
from pydantic import ValidationError

from app.api.errors import PUT_HTTP_STATUS, ApiError, from_put_status
from app.api.schemas.fields import KEYS_HEADER_PATTERN, KEYS_PER_MESSAGE_MAX
from app.api.schemas.produce import (
    PROPERTY_IDEMPOTENCY_KEY,
    RESERVED_PROPERTY_NAMES,
    MessageAttributes,
    ProduceBatch,
    ProduceMessage,
)
from app.broker.broker import Broker
from app.broker.idempotency import IdempotencyWindow, RememberedPut
from app.broker.metadata_log import MetadataWriteFailed
from store import Message, PutCompletion, PutMessageResult, PutMessageStatus
from store.metadata import MetadataError
from store.property_names import PROPERTY_KEYS, PROPERTY_TAGS
from store.timers.names import RESERVED_PREFIX
from store.timers.scheduling import Delay, DelayInputError, delayed
from store.topic import topic_problem

_ILLEGAL = PutMessageStatus.MESSAGE_ILLEGAL
_KEYS_HEADER = re.compile(KEYS_HEADER_PATTERN)
_PORT = struct.Struct(">i")
_DEFAULT_HOST = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
HTTP_MULTI_STATUS = 207


@dataclass(slots=True)
class Answer:
    status_name: str  # the PutMessageStatus name
    http_status: int
    body: bytes
    replayed: bool = False


# -- parsing ------------------------------------------------------------------------------------


def check_topic(topic: str) -> None:
    problem = _topic_problem(topic)
    if problem is not None:
        raise ApiError("INVALID_TOPIC_NAME", f"invalid topic name {topic!r}: {problem}",
                       put_status=_ILLEGAL)


@lru_cache(maxsize=4096)
def _topic_problem(topic: str) -> str | None:
    return topic_problem(topic)


def validation_error(error: ValidationError, prefix: tuple[str | int, ...] = ()) -> ApiError:
    problems = error.errors(include_url=False, include_input=False, include_context=False)
    if any(problem["type"] == "json_invalid" for problem in problems):
        return ApiError("MALFORMED_JSON", f"the body is not valid JSON: {problems[0]['msg']}",
                        put_status=_ILLEGAL)
    listed = [{"loc": [*prefix, *problem["loc"]], "msg": problem["msg"], "type": problem["type"]}
              for problem in problems[:20]]
    first = listed[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    return ApiError("VALIDATION_FAILED", f"{where}: {first['msg']}", put_status=_ILLEGAL,
                    errors=listed)


def message_from_json(topic: str, raw: bytes, message_size_max_bytes: int, born_host: bytes,
                      from_headers: MessageAttributes | None = None) -> tuple[Message, Delay]:
    """A JSON body and its delay; `from_headers` (X-Twinlog-* headers, queue_id query) fills
    in what the body leaves out: the body's own fields win."""
    try:
        parsed = ProduceMessage.model_validate_json(raw)
    except ValidationError as error:
        raise validation_error(error, ("body",)) from None
    if from_headers is not None:
        for name in from_headers.model_fields_set - parsed.model_fields_set:
            setattr(parsed, name, getattr(from_headers, name))
    return (_message(topic, parsed, _decode_body(parsed, message_size_max_bytes), born_host),
            delay_of(parsed))


def batch_from_json(topic: str, raw: bytes, messages_max: int, message_size_max_bytes: int,
                    born_host: bytes
                    ) -> tuple[list[tuple[Message, str | None]], dict[int, Delay]]:
    """The batch's (message, idempotency key) entries, and the delay of each entry that asks
    for one, by index (empty when none does: no Delay is built for the others)."""
    try:
        batch = ProduceBatch.model_validate_json(raw)
    except ValidationError as error:
        raise validation_error(error, ("body",)) from None
    if len(batch.messages) > messages_max:
        raise ApiError("TOO_MANY_MESSAGES", f"{len(batch.messages)} messages in one batch; at "
                       f"most {messages_max} (max_batch_messages)", put_status=_ILLEGAL)
    entries = []
    delays: dict[int, Delay] = {}
    for index, entry in enumerate(batch.messages):
        try:
            body = _decode_body(entry, message_size_max_bytes)
            message = _message(topic, entry, body, born_host)
        except ApiError as error:
            error.detail = f"messages[{index}]: {error.detail}"
            raise
        key = entry.idempotency_key
        if key is not None:
            message.properties[PROPERTY_IDEMPOTENCY_KEY] = key
        entries.append((message, key))
        if entry.delay_level is not None or entry.deliver_at_ms is not None \
                or entry.delay_ms is not None:
            delays[index] = delay_of(entry)
    return entries, delays


def attributes_from_headers(keys: str | None, tags: str | None, properties: str | None,
                            queue_id: str | None,
                            delay: dict[str, str] | None = None) -> MessageAttributes | None:
    """The X-Twinlog-* headers and the queue_id query, checked (None when none is sent).
    `delay`: the delay headers sent, by field name (delay_level, deliver_at_ms, delay_ms)."""
    if keys is None and tags is None and properties is None and queue_id is None \
            and not delay:
        return None
    attributes: dict[str, Any] = {}
    for name, value in (delay or {}).items():
        attributes[name] = _header_integer(name, value)
    if keys is not None:
        if _KEYS_HEADER.fullmatch(keys) is None:
            raise ApiError("VALIDATION_FAILED", "X-Twinlog-Keys: 1 to "
                           f"{KEYS_PER_MESSAGE_MAX} keys joined by commas, no spaces in a key",
                           put_status=_ILLEGAL)
        attributes["keys"] = [key.strip(" \t") for key in keys.split(",")]
    if tags is not None:
        attributes["tags"] = tags
    if properties is not None:
        try:
            attributes["properties"] = orjson.loads(properties)
        except orjson.JSONDecodeError:
            raise ApiError("VALIDATION_FAILED", "X-Twinlog-Properties: expected a JSON object "
                           "of string values", put_status=_ILLEGAL) from None
    if queue_id is not None:
        if not queue_id.isdigit() or not queue_id.isascii():
            raise ApiError("VALIDATION_FAILED", f"queue_id: expected an integer, got {queue_id!r}",
                           put_status=_ILLEGAL)
        attributes["queue_id"] = int(queue_id)
    try:
        return MessageAttributes.model_validate(attributes)
    except ValidationError as error:
        raise validation_error(error, ("header",)) from None


def _header_integer(name: str, value: str) -> int:
    if not value.isdigit() or not value.isascii() or len(value) > 18:
        header = "X-Twinlog-" + "-".join(part.capitalize() for part in name.split("_"))
        raise ApiError("VALIDATION_FAILED", f"{header}: expected a whole number, got "
                       f"{value[:40]!r}", put_status=_ILLEGAL)
    return int(value)


def delay_of(parsed: MessageAttributes) -> Delay:
    return Delay(parsed.delay_level, parsed.deliver_at_ms, parsed.delay_ms)


def schedule(broker: Broker, message: Message, delay: Delay) -> tuple[Message, int | None]:
    """The message to store for `delay`: its scheduled copy and when it is due, or itself
    (and None) when it is not delayed or due now. A delay a setting refuses is a 409 naming
    it (store/timers/scheduling.py)."""
    if not delay.is_requested:
        return message, None
    try:
        return delayed(broker.store.config.timers, message, delay, broker.timer_clock_ms())
    except DelayInputError as error:
        raise ApiError(error.code, error.detail, put_status=_ILLEGAL,
                       setting=error.setting) from None


def _no_attributes() -> MessageAttributes:
    return MessageAttributes.model_validate({})


def message_from_raw(topic: str, body: bytes, from_headers: MessageAttributes | None,
                     message_size_max_bytes: int, born_host: bytes) -> tuple[Message, Delay]:
    """A raw (application/octet-stream) body; attributes from X-Twinlog-* headers and query."""
    if len(body) > message_size_max_bytes:
        raise _too_large(len(body), message_size_max_bytes)
    parsed = from_headers if from_headers is not None else _no_attributes()
    return _message(topic, parsed, body, born_host), delay_of(parsed)


def _decode_body(parsed: ProduceMessage, message_size_max_bytes: int) -> bytes:
    text = parsed.body
    if parsed.body_encoding == "base64":
        try:
            body = binascii.a2b_base64(text, strict_mode=True)
        except (binascii.Error, ValueError) as error:
            raise ApiError("INVALID_BASE64", f"body: not valid base64 ({error})",
                           put_status=_ILLEGAL) from None
    else:
        try:
            body = text.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError("VALIDATION_FAILED", "body: not encodable as UTF-8 (lone surrogate)",
                           put_status=_ILLEGAL) from None
    if len(body) > message_size_max_bytes:
        raise _too_large(len(body), message_size_max_bytes)
    return body


def _too_large(size: int, size_max: int) -> ApiError:
    return ApiError("MESSAGE_TOO_LARGE", f"message body of {size} bytes is over the limit of "
                    f"{size_max} bytes (message_size_max_bytes)", put_status=_ILLEGAL)


def _message(topic: str, parsed: MessageAttributes, body: bytes, born_host: bytes) -> Message:
    properties = parsed.properties
    if properties and not RESERVED_PROPERTY_NAMES.isdisjoint(properties):
        reserved = sorted(RESERVED_PROPERTY_NAMES.intersection(properties))
        raise ApiError("VALIDATION_FAILED", f"properties: reserved names {reserved}; use the "
                       "keys/tags fields or the Idempotency-Key header", put_status=_ILLEGAL)
    if properties and any(name.startswith(RESERVED_PREFIX) for name in properties):
        raise ApiError("VALIDATION_FAILED", f"properties: names starting with {RESERVED_PREFIX}"
                       " are the broker's", put_status=_ILLEGAL)
    if parsed.keys:
        properties[PROPERTY_KEYS] = " ".join(parsed.keys)
    if parsed.tags is not None:
        properties[PROPERTY_TAGS] = parsed.tags
    return Message(topic, body, properties, parsed.queue_id, 0, time.time_ns() // 1_000_000,
                   born_host)


def born_host_of(client: tuple[str, int] | None) -> bytes:
    """RocketMQ's BORNHOST: the client's IPv4 address and port (loopback when unknown)."""
    if client is None:
        return _DEFAULT_HOST
    address = _ipv4_bytes(client[0])
    if address is None or not 0 <= client[1] < 65536:
        return _DEFAULT_HOST
    return address + _PORT.pack(client[1])


@lru_cache(maxsize=1024)
def _ipv4_bytes(host: str) -> bytes | None:
    try:
        return socket.inet_aton(host)
    except OSError:
        return None


# -- putting ------------------------------------------------------------------------------------


async def check_queue(broker: Broker, message: Message) -> None:
    """The topic is writable (created if allowed) and the queue id is one of its queues."""
    topic = message.topic
    queue_count = broker.cached_write_queue_count(topic)
    if queue_count is None:
        try:
            queue_count = await asyncio.to_thread(broker.ensure_writable_topic, topic)
        except MetadataError as error:
            raise ApiError(error.error_code, str(error), put_status=_ILLEGAL,
                           setting=error.setting) from None
        except MetadataWriteFailed as error:  # the topic's creation could not be written
            raise from_put_status(error.outcome.status, error.outcome.detail) from None
    queue_id = message.queue_id
    if queue_id is not None and queue_id >= queue_count:
        raise ApiError("INVALID_QUEUE_ID", f"queue_id {queue_id} is not a write queue of topic "
                       f"{topic!r} (write_queue_count {queue_count})", put_status=_ILLEGAL)


async def put_one(broker: Broker, message: Message, key: str | None,
                  topic: str | None = None, deliver_at_ms: int | None = None) -> Answer:
    """Store one message (or replay the first result of its idempotency key). A delayed
    message is its scheduled copy, `topic` its real topic and `deliver_at_ms` its due time."""
    topic = topic if topic is not None else message.topic
    if key is None:
        result, status = await _put(broker, message)
        return _answer(topic, result, status, deliver_at_ms)
    window = broker.idempotency
    remembered = (await claim_keys(window, topic, [key])).get(key)
    if remembered is not None:
        return Answer(remembered.status.value, PUT_HTTP_STATUS[remembered.status],
                      orjson.dumps(_replay_document(topic, remembered)), replayed=True)
    message.properties[PROPERTY_IDEMPOTENCY_KEY] = key
    try:
        result, status = await _put(broker, message)
        if status.is_stored:
            remembered = _remembered(result, status, deliver_at_ms)
    finally:
        window.finish(topic, key, remembered)
    return _answer(topic, result, status, deliver_at_ms)


async def _put(broker: Broker, message: Message) -> tuple[PutMessageResult, PutMessageStatus]:
    if broker.dledger is not None:
        # Answered only once the member decides: committed, refused, or indeterminate after
        # the quorum deadline (the host bounds the wait, ha/dledger/core/put_status.py).
        return await broker.dledger.put(message)
    result, completion = broker.store.put_message(message)
    return result, await _final_status(completion)


def _answer(topic: str, result: PutMessageResult, status: PutMessageStatus,
            deliver_at_ms: int | None = None) -> Answer:
    if not status.is_stored:
        raise from_put_status(status, result.detail)
    return Answer(status.value, PUT_HTTP_STATUS[status],
                  orjson.dumps(_stored_document(topic, status, result, replayed=False,
                                                deliver_at_ms=deliver_at_ms)))


def _remembered(result: PutMessageResult, status: PutMessageStatus,
                deliver_at_ms: int | None = None) -> RememberedPut:
    return RememberedPut(status, result.msg_id, result.queue_id, result.queue_offset,
                         result.commit_log_offset, result.wrote_bytes, deliver_at_ms)


def _replay_document(topic: str, put: RememberedPut) -> dict[str, Any]:
    return _stored_document(topic, put.status, put, replayed=True,
                            deliver_at_ms=put.deliver_at_ms)


def _stored_document(topic: str, status: PutMessageStatus, put: PutMessageResult | RememberedPut,
                     *, replayed: bool, deliver_at_ms: int | None = None) -> dict[str, Any]:
    """What a stored put answers, alone or as a batch entry; `replayed` when an idempotency key
    answers it again."""
    document = {
        "status": status.value,
        "http_status": PUT_HTTP_STATUS[status],
        "topic": topic,
        "msg_id": put.msg_id,
        "queue_id": put.queue_id,
        "queue_offset": put.queue_offset,
        "commit_log_offset": put.commit_log_offset,
        "wrote_bytes": put.wrote_bytes,
        "replayed": replayed,
    }
    if deliver_at_ms is not None:
        document["deliver_at_ms"] = deliver_at_ms
    return document


# -- batches ------------------------------------------------------------------------------------


async def put_batch(broker: Broker, topic: str, entries: list[tuple[Message, str | None]],
                    due_times: list[int | None] | None = None
                    ) -> tuple[int, list[dict[str, Any]]]:
    """Store a batch under one lock hold; one result per entry, in order. Entries whose key the
    window (or an earlier entry of this batch) holds are replayed, not stored again.
    `due_times`: each delayed entry's due time (its message is then its scheduled copy)."""
    due = due_times if due_times is not None else [None] * len(entries)
    window = broker.idempotency
    keys = list(dict.fromkeys(key for _, key in entries if key is not None))
    remembered = await claim_keys(window, topic, keys)
    documents: list[dict[str, Any] | None] = [None] * len(entries)
    to_store: list[int] = []
    first_index_of_key: dict[str, int] = {}
    later_duplicates: list[tuple[int, int]] = []
    for index, (_, key) in enumerate(entries):
        if key is None:
            to_store.append(index)
        elif key in first_index_of_key:
            later_duplicates.append((index, first_index_of_key[key]))
        elif key in remembered:
            documents[index] = _replay_document(topic, remembered[key])
        else:
            first_index_of_key[key] = index
            to_store.append(index)
    try:
        outcomes = await _put_many(broker, [entries[index][0] for index in to_store])
    except BaseException:
        for key in first_index_of_key:
            window.finish(topic, key, None)
        raise
    for index, (result, status) in zip(to_store, outcomes, strict=True):
        documents[index] = (_stored_document(topic, status, result, replayed=False,
                                             deliver_at_ms=due[index])
                            if status.is_stored else _refused_document(topic, result, status))
        key = entries[index][1]
        if key is not None:
            window.finish(topic, key, _remembered(result, status, due[index])
                          if status.is_stored else None)
    for index, first in later_duplicates:
        first_document = documents[first]
        assert first_document is not None
        documents[index] = ({**first_document, "replayed": True}
                            if first_document["status"] in _STORED_NAMES else first_document)
    results = [document for document in documents if document is not None]
    assert len(results) == len(entries)
    return _batch_http_status(results), results


async def claim_keys(window: IdempotencyWindow, topic: str,
                     keys: list[str]) -> dict[str, RememberedPut]:
    """Claim all `keys` (see IdempotencyWindow.claim), waiting for other requests' puts while
    holding none of them; the remembered puts to replay."""
    while True:
        claimed = window.claim(topic, keys)
        if isinstance(claimed, dict):
            return claimed
        await claimed


async def _put_many(broker: Broker, messages: list[Message]
                    ) -> list[tuple[PutMessageResult, PutMessageStatus]]:
    if not messages:
        return []
    if broker.dledger is not None:
        # Each entry its own append, all in flight at once (the host batches them per round).
        dledger = broker.dledger
        return [await put for put in [dledger.put(m) for m in messages]]
    pairs = broker.store.put_messages(messages)
    first = pairs[0][0].status
    if first in _REQUEST_LEVEL_REFUSALS and all(result.status is first for result, _ in pairs):
        # The store refused the whole batch before appending (slave, busy, stopping).
        raise from_put_status(first, pairs[0][0].detail)
    return [(result, await _final_status(completion)) for result, completion in pairs]


async def _final_status(completion: PutCompletion) -> PutMessageStatus:
    return completion.result() if completion.is_done else await completion


def _refused_document(topic: str, result: PutMessageResult,
                      status: PutMessageStatus) -> dict[str, Any]:
    """A batch entry not stored (a stored one answers _stored_document)."""
    return {"status": status.value, "http_status": PUT_HTTP_STATUS[status], "topic": topic,
            "wrote_bytes": 0, "replayed": False, "detail": result.detail,
            "error_code": status.value}


def _batch_http_status(results: list[dict[str, Any]]) -> int:
    """201 or 202 when every entry has that code; 207 (per-entry codes) otherwise."""
    codes = {document["http_status"] for document in results}
    if len(codes) == 1:
        (code,) = codes
        if code in (201, 202):
            return int(code)
    return HTTP_MULTI_STATUS


_STORED_NAMES = frozenset(status.value for status in PutMessageStatus if status.is_stored)
_REQUEST_LEVEL_REFUSALS = frozenset({PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                     PutMessageStatus.OS_PAGE_CACHE_BUSY})

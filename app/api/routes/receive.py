"""Group consumption over HTTP: `POST /v1/groups/{group}/topics/{topic}/messages:receive`,
`...:ack` and `...:change-invisibility` (app/broker/consumption.py decides; docs/http-api.md).

Served on the master (a slave answers 503 NOT_A_MASTER). Each answer keeps the promise of a
produce: 200 once the decision's records are held as the broker's role promises, 202 when they
are stored here with a guarantee missing, a refusal (503, 507, ...) when nothing was written.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson
from fastapi import APIRouter, Response
from starlette.concurrency import run_in_threadpool

from app.api.deps import GatewayDep, GroupPath, TopicPath, requires
from app.api.errors import PROBLEMS, PUT_HTTP_STATUS, ApiError, from_put_status
from app.api.openapi import problem_responses
from app.api.routes.consume import consumed, parsed_tags
from app.api.schemas.receive import (
    AckRequest,
    AckResult,
    ChangeInvisibilityRequest,
    ChangeInvisibilityResult,
    ReceiveRequest,
    ReceiveResult,
)
from app.broker.broker import Broker
from app.broker.consumption_types import (
    AckAsk,
    Delivered,
    HandleResult,
    PopRefused,
    ReceiveAsk,
)
from app.broker.metadata_log import MetadataWriteFailed
from app.settings import Scope as TokenScope
from store import MessageStore, PutMessageStatus
from store.consumption.names import retry_topic
from store.metadata import MetadataError

router = APIRouter(tags=["group consumption"], dependencies=[requires(TokenScope.CONSUME)])
PATH = "/v1/groups/{group}/topics/{topic}/messages"
# A waiting receive tries again at least this often: a retry in place (an order key) becomes
# receivable with time, not with an arrival.
_WAIT_SLICE_MS = 1000
_JSON = "application/json"


def _pop_broker(gateway: Any, group: str, topic: str) -> tuple[Broker, int]:
    """The master, with the group and topic checked: the topic's read queue count."""
    broker: Broker = gateway.master_broker()
    metadata = broker.metadata_store
    config = metadata.find_group(name=group)
    if config is None:
        raise ApiError("GROUP_NOT_FOUND", f"group {group!r} does not exist")
    if not config.consume_enabled:
        raise ApiError("GROUP_CONSUME_DISABLED", f"group {group!r} has consume_enabled false")
    topic_config = metadata.topic_view(topic)
    if topic_config is None:
        raise ApiError("TOPIC_NOT_FOUND", f"topic {topic!r} does not exist")
    if not topic_config.readable:
        raise ApiError("TOPIC_NOT_READABLE", f"topic {topic!r} does not allow reads")
    return broker, topic_config.read_queue_count


def _check_invisible(broker: Broker, invisible_ms: int, *, release_allowed: bool) -> None:
    settings = broker.settings
    if release_allowed and invisible_ms == 0:
        return
    if invisible_ms < settings.pop_invisible_ms_min:
        raise ApiError("INVALID_INVISIBLE_TIME", f"invisible_ms {invisible_ms} is below "
                       f"{settings.pop_invisible_ms_min} (pop_invisible_ms_min)",
                       setting="pop_invisible_ms_min")
    if invisible_ms > settings.pop_invisible_ms_max:
        raise ApiError("INVALID_INVISIBLE_TIME", f"invisible_ms {invisible_ms} is above "
                       f"{settings.pop_invisible_ms_max} (pop_invisible_ms_max)",
                       setting="pop_invisible_ms_max")


def _refusal(error: PopRefused, gateway: Any) -> ApiError:
    broker = gateway.broker
    if broker is not None and broker.is_slave:  # a DLedger leader that lost its term
        refused: ApiError = gateway.not_a_master()
        return refused
    if error.code in PutMessageStatus.__members__:
        return from_put_status(PutMessageStatus[error.code], error.detail)
    return ApiError(error.code, error.detail, setting=error.setting)


@router.post(PATH + ":receive", operation_id="receive-messages", response_model=ReceiveResult,
             responses={202: {"model": ReceiveResult, "description": "Received; the record "
                              "of the receive is stored with a guarantee missing."},
                        **problem_responses(400, 401, 403, 404, 409, 429, 503, 507)})
async def receive_messages(group: GroupPath, topic: TopicPath, request: ReceiveRequest,
                           gateway: GatewayDep) -> Response:
    """Up to `max_messages` messages of the topic for the group: the broker chooses the
    queues, and each message is invisible to the group's other receives for `invisible_ms`
    or until acked. Every message carries a `receipt_handle` (for ack and
    change-invisibility) and its `delivery_attempt`. An empty list when nothing is
    receivable (after `wait_ms`, when given). 429 POP_IN_FLIGHT_MAX_REACHED when the group
    holds pop_in_flight_per_group_max messages in flight (fewer are answered when some
    fit)."""
    http_status, body = await receive_answer(
        gateway, group, topic, max_messages=request.max_messages,
        invisible_ms=request.invisible_ms, wait_ms=request.wait_ms, tags=request.tags,
        body_encoding=request.body_encoding)
    return Response(body, status_code=http_status, media_type=_JSON)


async def receive_answer(gateway: Any, group: str, topic: str, *, max_messages: int,
                         invisible_ms: int, wait_ms: int, tags: str | None,
                         body_encoding: str) -> tuple[int, bytes]:
    """A receive's answer (HTTP status, JSON body), for both lanes; refusals raise."""
    broker, queue_count = _pop_broker(gateway, group, topic)
    _check_invisible(broker, invisible_ms, release_allowed=False)
    tag_filter = parsed_tags(tags)
    await _ensure_topics(broker, group, topic)
    ask = ReceiveAsk(group, topic, queue_count, max_messages, invisible_ms, tag_filter)
    deadline_s = time.monotonic() + min(wait_ms, broker.settings.long_poll_wait_ms_max) / 1000
    queues = _queues(broker, group, topic, queue_count) if wait_ms else []
    try:
        while True:
            pokes_seen = broker.store.arrivals.pokes(queues)
            delivered, outcome = await broker.pop_batches.receive(ask)
            left_s = deadline_s - time.monotonic()
            if delivered or left_s <= 0 or not broker.is_running:
                break
            await _wait_any(broker.store, queues, min(left_s * 1000, _WAIT_SLICE_MS),
                            pokes_seen)
        status = await outcome.status()
    except PopRefused as error:
        raise _refusal(error, gateway) from None
    document = {"status": status.value,
                "messages": [_received(item, body_encoding) for item in delivered]}
    return _ok_status(status), orjson.dumps(document)


@router.post(PATH + ":ack", operation_id="ack-messages", response_model=AckResult,
             responses={207: {"model": AckResult, "description": "The handles' outcomes "
                                                                 "differ: see each one."},
                        202: {"model": AckResult, "description": "Acked; the record is "
                                                                 "stored with a guarantee "
                                                                 "missing."},
                        **problem_responses(400, 401, 403, 404, 409, 503, 507)})
async def ack_messages(group: GroupPath, topic: TopicPath, request: AckRequest,
                       gateway: GatewayDep) -> Response:
    """Ack received messages by their receipt handles (up to 1,024), each answered on its
    own: 200 acked; 409 STALE_RECEIPT_HANDLE when the message is no longer in flight under
    that handle (redelivered, changed or acked since: a stale handle never acks a later
    delivery); 400 INVALID_RECEIPT_HANDLE for garbage or a handle of another group or topic.
    All alike: that status (a problem+json for 400 and 409, listing `results`); else 207."""
    http_status, body = await ack_answer(gateway, group, topic, request.receipt_handles)
    return Response(body, status_code=http_status, media_type=_JSON)


async def ack_answer(gateway: Any, group: str, topic: str,
                     handles: list[str]) -> tuple[int, bytes]:
    """An ack's answer (HTTP status, JSON body), for both lanes; refusals raise."""
    broker, _ = _pop_broker(gateway, group, topic)
    try:
        results, outcome = await broker.pop_batches.ack(AckAsk(group, topic, handles))
        status = await outcome.status()
    except PopRefused as error:
        raise _refusal(error, gateway) from None
    ok_status = _ok_status(status)
    outcomes = [_handle_outcome(result, ok_status) for result in results]
    statuses = {item["status"] for item in outcomes}
    if len(statuses) == 1 and (code := results[0].code) != "OK":
        raise ApiError(code, results[0].detail if len(results) == 1 else
                       f"every one of the {len(results)} handles: {results[0].detail}",
                       results=outcomes)
    http_status = statuses.pop() if len(statuses) == 1 else 207
    return (200 if http_status == 201 else http_status,
            orjson.dumps({"status": status.value, "results": outcomes}))


@router.post(PATH + ":change-invisibility", operation_id="change-invisibility",
             response_model=ChangeInvisibilityResult,
             responses={202: {"model": ChangeInvisibilityResult, "description": "Changed; "
                              "the record is stored with a guarantee missing."},
                        **problem_responses(400, 401, 403, 404, 409, 503, 507)})
async def change_invisibility(group: GroupPath, topic: TopicPath,
                              request: ChangeInvisibilityRequest,
                              gateway: GatewayDep) -> Response:
    """A new invisible time for a message in flight, from now: it answers a new receipt
    handle, and the one sent is stale from then on (409 if used). `invisible_ms` 0 releases
    the message: it is receivable again after the group's backoff, with the next delivery
    attempt (or goes to the dead letters after its last), and no handle is answered."""
    http_status, body = await change_answer(gateway, group, topic, request.receipt_handle,
                                            request.invisible_ms)
    return Response(body, status_code=http_status, media_type=_JSON)


async def change_answer(gateway: Any, group: str, topic: str, handle: str,
                        invisible_ms: int) -> tuple[int, bytes]:
    """A change of invisibility's answer (HTTP status, JSON body), for both lanes."""
    broker, _ = _pop_broker(gateway, group, topic)
    _check_invisible(broker, invisible_ms, release_allowed=True)
    await _ensure_topics(broker, group, topic)
    try:
        [result], outcome = await broker.pop_batches.ack(
            AckAsk(group, topic, [handle], invisible_ms))
        if result.code != "OK":
            raise ApiError(result.code, result.detail)
        status = await outcome.status()
    except PopRefused as error:
        raise _refusal(error, gateway) from None
    document = {"status": status.value, "receipt_handle": result.new_handle,
                "invisible_until_ms": result.invisible_until_ms,
                "released": result.new_handle is None}
    return _ok_status(status), orjson.dumps(document)


def _ok_status(status: PutMessageStatus) -> int:
    return 200 if status is PutMessageStatus.PUT_OK else PUT_HTTP_STATUS[status]


def _handle_outcome(result: HandleResult, ok_status: int) -> dict[str, Any]:
    if result.code == "OK":
        return {"receipt_handle": result.handle, "status": ok_status, "error_code": None,
                "detail": None}
    return {"receipt_handle": result.handle,
            "status": PROBLEMS[result.code].http_status, "error_code": result.code,
            "detail": result.detail}


def _received(item: Delivered, body_encoding: str) -> dict[str, Any]:
    document = consumed(item.message, body_encoding, item.origin)
    document["receipt_handle"] = item.handle
    document["delivery_attempt"] = item.attempt
    document["invisible_until_ms"] = item.invisible_until_ms
    return document


async def _ensure_topics(broker: Broker, group: str, topic: str) -> None:
    """The group's retry and dead-letter topics exist before a decision may need them (a
    look in the metadata view first: no thread hop once they do)."""
    if broker.pop_topics_exist(group, topic):
        return
    try:
        await run_in_threadpool(broker.ensure_pop_topics, group, topic)
    except MetadataError as error:
        raise ApiError(error.error_code if error.error_code in PROBLEMS else "METADATA_ERROR",
                       str(error), setting=error.setting) from None
    except MetadataWriteFailed as error:
        raise from_put_status(error.outcome.status, error.outcome.detail) from None


def _queues(broker: Broker, group: str, topic: str, queue_count: int) -> list[tuple[str, int]]:
    retry = retry_topic(group, topic)
    return [(topic, queue_id) for queue_id in range(queue_count)] + \
        [(retry, queue_id) for queue_id in range(broker.consumption.retry_queue_count(group))]


async def _wait_any(store: MessageStore, queues: list[tuple[str, int]], wait_ms: float,
                    pokes_seen: int) -> None:
    """Until a message arrives in one of the queues, or one becomes receivable there again
    without arriving (a poke: a retry in place, an ack letting the next of an order key go;
    or one since `pokes_seen`, which the receive before may have missed), or `wait_ms`; 429
    LONG_POLL_BUSY past the long-poll bound (every queue waited on holds a place)."""
    loop = asyncio.get_running_loop()
    arrived = asyncio.Event()

    def wake() -> None:
        with contextlib.suppress(RuntimeError):  # a loop closed meanwhile
            loop.call_soon_threadsafe(arrived.set)

    waiters = []
    try:
        for topic, queue_id in queues:
            bounds = store.queue_offset_range(topic, queue_id)
            waiter = store.park_reader(topic, queue_id, bounds[1] if bounds else 0, wake)
            if waiter is None:
                raise ApiError("LONG_POLL_BUSY", f"{store.arrivals.waiters_max} reads wait "
                               "already (long_poll_waiters_max); retry later or receive "
                               "without wait_ms")
            waiters.append(waiter)
        if store.arrivals.pokes(queues) != pokes_seen:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_ms / 1000):
                await arrived.wait()
    finally:
        for waiter in waiters:
            store.unpark_reader(waiter)

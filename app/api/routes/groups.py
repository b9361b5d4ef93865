"""Subscription groups: list, create, describe, delete; consumer offsets (commit, list, reset
to a time) and lag.

Lag, the offset list and the offset commit are served by the lean lane (app/api/lean_lane.py)
and, for what that leaves, by FastAPI, with the same answer functions: groups and topics from
the metadata view, offsets from the in-memory offset table, no query.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Response, status
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from app.api import metadata_writes
from app.api.deps import BrokerDep, GatewayDep, GroupPath, QueueIdPath, TopicPath, requires
from app.api.errors import ApiError
from app.api.gateway import Gateway
from app.api.lag import queue_lag
from app.api.lean_lane import (
    Fallback,
    LeanHandler,
    LeanRoute,
    admit,
    admitted_body,
    name_matching,
    plain_json,
    query_of,
    send_json,
    whole_number,
)
from app.api.metrics_pop import group_counts
from app.api.openapi import problem_responses
from app.api.schemas.fields import GROUP_PATTERN, QUEUE_ID_MAX, TOPIC_PATTERN
from app.api.schemas.groups import (
    ConsumerOffsetList,
    ConsumerOffsetView,
    Group,
    GroupBackoff,
    GroupCreate,
    GroupList,
    GroupUpdate,
    LagReport,
    OffsetCommit,
    OffsetResetByTime,
)
from app.broker.broker import Broker
from app.settings import Scope as TokenScope
from store.metadata import ConsumerOffset, GroupAlreadyExists, GroupNotFound, SubscriptionGroup
from store.metadata.groups import DEFAULT_RETRY_QUEUE_COUNT, DEFAULT_RETRY_TIMES_MAX

router = APIRouter(tags=["groups"])

TopicFilter = Annotated[str | None, Query(pattern=TOPIC_PATTERN, description="Only this topic.")]


def group_view(group: SubscriptionGroup) -> Group:
    return Group(**{**group.model_dump(), "backoff": GroupBackoff.of(group.backoff)})


def offset_view(offset: ConsumerOffset) -> ConsumerOffsetView:
    return ConsumerOffsetView(**offset_document(offset))


def offset_document(offset: ConsumerOffset) -> dict[str, Any]:
    """A ConsumerOffsetView's document."""
    return _offset_fields(offset.group_name, offset.topic, offset.queue_id,
                          (offset.queue_offset, offset.updated_at_ms))


def _offset_fields(group: str, topic: str, queue_id: int,
                   entry: tuple[int, int]) -> dict[str, Any]:
    """A ConsumerOffsetView's document from an offset table's entry (offset, updated at)."""
    return {"group": group, "topic": topic, "queue_id": queue_id, "offset": entry[0],
            "updated_at_ms": entry[1]}


@router.get("/v1/groups", operation_id="list-groups", dependencies=[requires(TokenScope.CONSUME)],
            responses=problem_responses(401, 403, 503))
def list_groups(broker: BrokerDep) -> GroupList:
    return GroupList(groups=[group_view(group)
                             for group in broker.metadata_store.list_groups()])


@router.post("/v1/groups", operation_id="create-group", status_code=status.HTTP_201_CREATED,
             dependencies=[requires(TokenScope.ADMIN)],
             responses=problem_responses(202, 400, 401, 403, 409, 429, 503, 507))
def create_group(group: GroupCreate, gateway: GatewayDep) -> Group:
    return group_view(metadata_writes.create_group(
        gateway.master_broker(), group.name, consume_enabled=group.consume_enabled,
        broadcast_enabled=group.broadcast_enabled, retry_queue_count=group.retry_queue_count,
        retry_times_max=group.retry_times_max,
        backoff="" if group.backoff is None else group.backoff.backoff().text, fifo=group.fifo))


@router.patch("/v1/groups/{group}", operation_id="update-group",
              dependencies=[requires(TokenScope.ADMIN)],
              responses=problem_responses(202, 400, 401, 403, 404, 429, 503, 507))
def update_group(group: GroupPath, update: GroupUpdate, gateway: GatewayDep) -> Group:
    """Change a group's switches and retry policy (404 GROUP_NOT_FOUND when unknown). Fields
    left out stay; `backoff` null sets the broker's default back. Every replica applies the
    change from the log, and the master's next decisions use it: a message released
    afterwards waits the new backoff (one released before keeps the time it was given), and
    `fifo` applies from each queue's next receive (messages in flight stay in flight)."""
    backoff = None
    if "backoff" in update.model_fields_set:
        backoff = "" if update.backoff is None else update.backoff.backoff().text
    return group_view(metadata_writes.update_group(
        gateway.master_broker(), group, consume_enabled=update.consume_enabled,
        broadcast_enabled=update.broadcast_enabled, retry_queue_count=update.retry_queue_count,
        retry_times_max=update.retry_times_max, backoff=backoff, fifo=update.fifo))


@router.get("/v1/groups/{group}", operation_id="describe-group",
            dependencies=[requires(TokenScope.CONSUME)],
            responses=problem_responses(400, 401, 403, 404, 503))
def describe_group(group: GroupPath, broker: BrokerDep) -> Group:
    return group_view(broker.metadata_store.get_group(name=group))


@router.delete("/v1/groups/{group}", operation_id="delete-group",
               status_code=status.HTTP_204_NO_CONTENT, dependencies=[requires(TokenScope.ADMIN)],
               responses=problem_responses(202, 400, 401, 403, 404, 429, 503, 507))
def delete_group(group: GroupPath, gateway: GatewayDep) -> Response:
    """Delete a group, its committed offsets and its consumption state (404 GROUP_NOT_FOUND
    when unknown). Messages in flight for it are forgotten: their receipt handles are stale
    from then on (409), also for a group created again under the name, which starts as a new
    group does. Retry and dead-letter copies already put stay in their topics."""
    metadata_writes.delete_group(gateway.master_broker(), group)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


_OFFSETS_PATH = "/v1/groups/{group}/offsets"


@router.get(_OFFSETS_PATH, operation_id="list-consumer-offsets",
            dependencies=[requires(TokenScope.CONSUME)], response_model=ConsumerOffsetList,
            responses=problem_responses(400, 401, 403, 503))
def list_consumer_offsets(group: GroupPath, broker: BrokerDep,
                          topic: TopicFilter = None) -> Response:
    """The group's committed offsets (the next offset to consume, per queue)."""
    return Response(offsets_answer(broker, group, topic), media_type="application/json")


def offsets_answer(broker: Broker, group: str, topic: str | None) -> bytes:
    """The ConsumerOffsetList document, from the in-memory offset table."""
    offsets = broker.metadata_store.list_consumer_offsets(group_name=group, topic=topic)
    return orjson.dumps({"offsets": [offset_document(offset) for offset in offsets]})


_GROUP = re.compile(GROUP_PATTERN)
_TOPIC = re.compile(TOPIC_PATTERN)


def _topic_filter(scope: Scope) -> str | None:
    topic = query_of(scope).get("topic")
    return None if topic is None else name_matching(topic, _TOPIC)


def _group_read(answer: Callable[[Broker, str, str | None], bytes]) -> LeanHandler:
    """The lean lane's handler of a group's lag or offsets (app/api/lean_lane.py)."""
    async def handler(scope: Scope, path_params: dict[str, str], receive: Receive, send: Send,
                      gateway: Gateway) -> None:
        broker = admit(scope, gateway, TokenScope.CONSUME)
        group = name_matching(path_params["group"], _GROUP)
        await send_json(send, answer(broker, group, _topic_filter(scope)))

    return handler


_COMMIT_PATH = "/v1/groups/{group}/offsets/{topic}/queues/{queue_id}"


@router.put(_COMMIT_PATH, operation_id="commit-consumer-offset",
            dependencies=[requires(TokenScope.CONSUME)], response_model=ConsumerOffsetView,
            responses=problem_responses(202, 400, 401, 403, 404, 409, 429, 503, 507))
async def commit_consumer_offset(group: GroupPath, topic: TopicPath, queue_id: QueueIdPath,
                                 commit: OffsetCommit, gateway: GatewayDep) -> Response:
    """Commit the next offset to consume. It only moves forward unless allow_backwards (a
    reset); it may not pass the queue's max offset. The group is created on first commit when
    auto_create_groups is on."""
    return Response(await commit_answer(gateway, group, topic, queue_id, commit.offset,
                                        commit.allow_backwards),
                    media_type="application/json")


async def commit_answer(gateway: Gateway, group: str, topic: str, queue_id: int, offset: int,
                        allow_backwards: bool) -> bytes:
    """Commit, and the ConsumerOffsetView document of the queue's offset as it now is."""
    broker = gateway.master_broker()
    bounds = broker.store.queue_offset_range(topic, queue_id)
    max_offset = bounds[1] if bounds is not None else 0
    if offset > max_offset:
        raise ApiError("INVALID_OFFSET", f"offset {offset} is past the queue's max "
                       f"offset {max_offset}")
    metadata = broker.metadata_store
    known, change = metadata.plan_known_offset(group_name=group, topic=topic, queue_id=queue_id,
                                               queue_offset=offset, reset=allow_backwards)
    if known:
        # The hot path, on the event loop: a queue committed before needs no query, and the
        # record's guarantees and its apply are awaited, not waited for on a worker thread.
        if change is not None:
            await metadata_writes.write(broker, [change])
    else:
        await run_in_threadpool(_commit_creating_group, gateway, broker, group, topic,
                                queue_id, OffsetCommit.model_construct(
                                    offset=offset, allow_backwards=allow_backwards))
    stored = metadata.consumer_offset_entry(group_name=group, topic=topic, queue_id=queue_id)
    if stored is None:
        raise AssertionError(f"offset of {group}/{topic}/{queue_id} missing after commit")
    return orjson.dumps(_offset_fields(group, topic, queue_id, stored))


async def commit_lean(scope: Scope, path_params: dict[str, str], receive: Receive, send: Send,
                      gateway: Gateway) -> None:
    """The commit's checks in the order the body guard and FastAPI make them: the token, the
    body's size (413) and the body, then the parameters and the body's fields."""
    headers = scope["headers"]
    body = await admitted_body(scope, receive, gateway, TokenScope.CONSUME)
    commit = _plain_commit(headers, body)
    if commit is None:
        raise Fallback(body)
    offset, allow_backwards = commit
    try:
        group = name_matching(path_params["group"], _GROUP)
        topic = name_matching(path_params["topic"], _TOPIC)
        queue_id = whole_number(path_params["queue_id"], 0, QUEUE_ID_MAX)
    except Fallback:
        raise Fallback(body) from None
    await send_json(send, await commit_answer(gateway, group, topic, queue_id, offset,
                                              allow_backwards))


_COMMIT_FIELDS = frozenset({"offset", "allow_backwards"})


def _plain_commit(headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, bool] | None:
    """The body's OffsetCommit fields (offset, allow_backwards) when it is JSON of exactly
    that shape and its content type is JSON or absent; None for anything FastAPI must
    judge."""
    parsed, document = plain_json(headers, body)
    if not parsed:
        return None
    if type(document) is not dict or not document.keys() <= _COMMIT_FIELDS:
        return None
    offset = document.get("offset")
    allow_backwards = document.get("allow_backwards", False)
    if type(offset) is not int or not 0 <= offset <= 2**53 - 1 \
            or type(allow_backwards) is not bool:
        return None
    return offset, allow_backwards


@router.post("/v1/groups/{group}/offsets/{topic}:reset", operation_id="reset-consumer-offsets",
             dependencies=[requires(TokenScope.ADMIN)],
             responses=problem_responses(202, 400, 401, 403, 404, 409, 429, 503, 507))
def reset_consumer_offsets(group: GroupPath, topic: TopicPath, reset: OffsetResetByTime,
                           gateway: GatewayDep) -> ConsumerOffsetList:
    """Reset the group's offsets on a topic to a time: per queue, the first message stored at
    or after `timestamp_ms` (a binary search over the queue by store time); backwards or
    forwards. The group is created when auto_create_groups is on."""
    broker = gateway.master_broker()
    if broker.metadata_store.find_topic(name=topic) is None:
        raise ApiError("TOPIC_NOT_FOUND", f"topic {topic!r} does not exist")
    queue_ids = _queue_ids(broker, topic) if reset.queue_id is None else [reset.queue_id]
    for queue_id in queue_ids:
        offset = broker.store.queue_offset_at_time(topic, queue_id, reset.timestamp_ms)
        commit = OffsetCommit(offset=offset or 0, allow_backwards=True)
        _commit_creating_group(gateway, broker, group, topic, queue_id, commit)
    offsets = broker.metadata_store.list_consumer_offsets(group_name=group, topic=topic)
    return ConsumerOffsetList(offsets=[offset_view(offset) for offset in offsets
                                       if offset.queue_id in queue_ids])


def _commit_creating_group(gateway: Gateway, broker: Broker, group: str, topic: str,
                           queue_id: int, commit: OffsetCommit) -> None:
    try:
        _commit(broker, group, topic, queue_id, commit)
    except GroupNotFound:
        if not gateway.settings.auto_create_groups:
            raise
        if broker.metadata_store.find_group(name=group) is None:
            try:
                metadata_writes.create_group(
                    broker, group, consume_enabled=True, broadcast_enabled=False,
                    retry_queue_count=DEFAULT_RETRY_QUEUE_COUNT,
                    retry_times_max=DEFAULT_RETRY_TIMES_MAX)
            except GroupAlreadyExists:
                pass  # another commit created it first
        _commit(broker, group, topic, queue_id, commit)


def _commit(broker: Broker, group: str, topic: str, queue_id: int, commit: OffsetCommit) -> None:
    metadata_writes.set_offset(broker, group, topic, queue_id, commit.offset,
                               reset=commit.allow_backwards)


_LAG_PATH = "/v1/groups/{group}/lag"


@router.get(_LAG_PATH, operation_id="get-consumer-lag",
            dependencies=[requires(TokenScope.CONSUME)], response_model=LagReport,
            responses=problem_responses(400, 401, 403, 404, 503))
def get_consumer_lag(group: GroupPath, broker: BrokerDep, topic: TopicFilter = None) -> Response:
    """Lag = the queue's max offset - the group's committed offset, per queue of every topic
    the group has committed to (or of `topic`); consumer_offset -1 means no commit yet (lag
    counts from the queue's min offset). Summaries: max and total, per topic and overall."""
    return Response(lag_answer(broker, group, topic), media_type="application/json")


def lag_answer(broker: Broker, group: str, topic: str | None) -> bytes:
    """The LagReport document: offsets from memory, groups and topics from the view."""
    metadata = broker.metadata_store
    committed = {(offset.topic, offset.queue_id): offset.queue_offset
                 for offset in metadata.list_consumer_offsets(group_name=group, topic=topic)}
    if not committed and metadata.find_group(name=group) is None:
        raise ApiError("GROUP_NOT_FOUND", f"group {group!r} does not exist")
    topics = {topic} if topic is not None else {name for name, _ in committed}
    queues = [_queue_lag(broker, name, queue_id, committed.get((name, queue_id)))
              for name in sorted(topics) for queue_id in _queue_ids(broker, name)]
    per_topic = [{"topic": name,
                  "max_lag": max((q["lag"] for q in queues if q["topic"] == name), default=0),
                  "total_lag": sum(q["lag"] for q in queues if q["topic"] == name)}
                 for name in sorted(topics)]
    return orjson.dumps({"group": group, "max_lag": max((q["lag"] for q in queues), default=0),
                         "total_lag": sum(q["lag"] for q in queues), "topics": per_topic,
                         "queues": queues, "consumption": group_counts(broker, group, topic)})


def _queue_ids(broker: Broker, topic: str) -> list[int]:
    config = broker.metadata_store.topic_view(topic)
    from_store = broker.store.queues.topics().get(topic, [])
    count = max(config.read_queue_count if config is not None else 0,
                max(from_store, default=-1) + 1)
    return list(range(count))


def _queue_lag(broker: Broker, topic: str, queue_id: int,
               committed: int | None) -> dict[str, Any]:
    """A QueueLag's document."""
    bounds = broker.store.queue_offset_range(topic, queue_id)
    low, high = bounds if bounds is not None else (0, 0)
    return {"topic": topic, "queue_id": queue_id, "broker_offset": high,
            "consumer_offset": -1 if committed is None else committed,
            "lag": queue_lag(low, high, committed)}


LEAN_ROUTES = (LeanRoute("GET", _LAG_PATH, _group_read(lag_answer)),
               LeanRoute("GET", _OFFSETS_PATH, _group_read(offsets_answer)),
               LeanRoute("PUT", _COMMIT_PATH, commit_lean))

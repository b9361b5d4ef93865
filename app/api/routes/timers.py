"""Delayed messages: cancel one before it is due (`DELETE /v1/messages/{msg_id}`, the msg id
produce answered), and the schedule's figures (`GET /admin/timers`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from starlette.concurrency import run_in_threadpool

from app.api.deps import BrokerDep, MasterBrokerDep, requires
from app.api.errors import PUT_HTTP_STATUS, ApiError, from_put_status
from app.api.openapi import problem_responses
from app.api.schemas.timers import CancelView, TimersView
from app.api.timer_views import timers_view
from app.settings import Scope
from store import PutMessageStatus
from store.message_id import MSG_ID_HEX_LENGTH, MSG_ID_PATTERN, LookupStatus
from store.timers.lane_entry import schedule_of
from store.timers.names import LANE_TOPICS, PROPERTY_ORIGIN_OFFSET
from store.timers.scheduler import CancelOutcome

router = APIRouter()


@router.delete(
    "/v1/messages/{msg_id}", operation_id="cancel-delayed-message", tags=["produce"],
    dependencies=[requires(Scope.PRODUCE)],
    responses={202: {"model": CancelView, "description": "Cancelled; the marker is stored "
                                                         "with a guarantee missing."},
               **problem_responses(400, 401, 403, 404, 409, 429, 501, 503, 507)})
async def cancel_delayed_message(
    msg_id: Annotated[str, Path(json_schema_extra={"pattern": MSG_ID_PATTERN}, description=(
            "The msg_id produce answered for a delayed message."))],
    broker: MasterBrokerDep,
    response: Response,
) -> CancelView:
    """Cancel a delayed message before it is due: it is never delivered (a cancel marker in
    the log, as RocketMQ 5's delete marker; every replica keeps it). 200 cancelled (also when
    it was cancelled before), 202 cancelled with a guarantee missing (as a produce's 202),
    404 when the id names no delayed message, 409 MESSAGE_ALREADY_DUE once it is due
    (delivered, or being delivered), 429 past timer_cancels_pending_max."""
    scheduler = broker.timers
    assert scheduler is not None, "the broker starts its scheduler before serving"
    found = await run_in_threadpool(broker.store.get_message_by_id, msg_id)
    if found.status is LookupStatus.MALFORMED_ID:
        raise ApiError("INVALID_MESSAGE_ID", f"{msg_id!r} is not a message id "
                       f"({MSG_ID_HEX_LENGTH} hex digits)")
    record = found.message
    schedule = None if record is None or record.topic not in LANE_TOPICS \
        or PROPERTY_ORIGIN_OFFSET in record.properties else schedule_of(record.properties)
    if record is None or schedule is None:
        raise ApiError("NOT_A_SCHEDULED_MESSAGE", f"no delayed message {msg_id} on this broker")
    due_ms, topic = schedule.due_ms, schedule.topic
    result = await run_in_threadpool(scheduler.cancel, record.commit_log_offset, due_ms)
    outcome = result.outcome
    if outcome is CancelOutcome.DUE:
        raise ApiError("MESSAGE_ALREADY_DUE", f"message {msg_id} was due at {due_ms}: it is "
                       "delivered, or being delivered", deliver_at_ms=due_ms)
    if outcome is CancelOutcome.TOO_MANY:
        raise ApiError("TIMER_CANCELS_MAX_REACHED", "too many cancelled messages are not due "
                       "yet", setting="timer_cancels_pending_max")
    if outcome is CancelOutcome.NOT_ACTIVE:
        raise ApiError("NOT_A_MASTER", "this broker does not deliver delayed messages now "
                       "(not the master, or not a DLedger leader caught up in its term)")
    if outcome is CancelOutcome.ALREADY:
        return CancelView(msg_id=msg_id, topic=topic, deliver_at_ms=due_ms,
                          status=PutMessageStatus.PUT_OK, already_cancelled=True)
    assert result.put is not None
    put, completion = result.put
    status = completion.result() if completion.is_done else await completion
    if not status.is_stored:
        raise from_put_status(status, put.detail or "the cancel marker was not stored")
    # 200 cancelled with every guarantee; otherwise what a produce answers (202).
    response.status_code = 200 if status is PutMessageStatus.PUT_OK else PUT_HTTP_STATUS[status]
    return CancelView(msg_id=msg_id, topic=topic, deliver_at_ms=due_ms, status=status)


@router.get("/admin/timers", operation_id="admin-timers", tags=["admin"],
            dependencies=[requires(Scope.MONITOR)], responses=problem_responses(401, 403, 503))
def admin_timers(broker: BrokerDep) -> TimersView:
    """Delayed messages: pending per delay level and timer lane (from the log, the same on
    every replica), the oldest due time, delivered, rolled, dropped and cancelled counts, and
    the lateness of this broker's deliveries (a master's)."""
    return timers_view(broker)

"""The one table from outcomes to HTTP answers, and RFC 9457 problem+json bodies.

Every refusal the gateway sends is a code in `PROBLEMS`: a store `PutMessageStatus` name, a
metadata `MetadataError.error_code`, or a gateway code (bad JSON, missing token, ...). Routes
never choose an HTTP status themselves: they raise `ApiError(code)`, return a put status, or let
a `MetadataError` through, and this module turns it into the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from store import PutMessageStatus
from store.metadata import MetadataError

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE_PREFIX = "urn:twinlog:problem:"
RETRY_AFTER_S = 1


@dataclass(frozen=True, slots=True)
class ProblemKind:
    http_status: int
    title: str
    retry_after_s: int | None = None


PROBLEMS: dict[str, ProblemKind] = {
    # -- put statuses (store.PutMessageStatus); the five stored ones are successes ----------------
    "PUT_OK": ProblemKind(201, "Stored"),
    "FLUSH_DISK_TIMEOUT": ProblemKind(202, "Stored, but the flush to disk timed out"),
    "FLUSH_SLAVE_TIMEOUT": ProblemKind(202, "Stored, but the slave did not confirm in time"),
    "SLAVE_NOT_AVAILABLE": ProblemKind(202, "Stored, but no slave was available to replicate"),
    "MESSAGE_ILLEGAL": ProblemKind(400, "The message is not valid"),
    "PROPERTIES_SIZE_EXCEEDED": ProblemKind(413, "The message properties are too large"),
    "OS_PAGE_CACHE_BUSY": ProblemKind(429, "The broker is busy; retry later", RETRY_AFTER_S),
    "SERVICE_NOT_AVAILABLE": ProblemKind(503, "This broker does not take writes now"),
    "CREATE_MAPPED_FILE_FAILED": ProblemKind(507, "The broker could not create a log file"),
    "UNKNOWN_ERROR": ProblemKind(500, "The broker failed to store the message"),
    "IN_SYNC_REPLICAS_NOT_ENOUGH": ProblemKind(503, "Not enough in-sync replicas"),
    "COMMIT_INDETERMINATE": ProblemKind(
        202, "Appended on the DLedger leader, not committed in time: it may still commit or be "
             "lost"),
    # -- gateway codes ---------------------------------------------------------------------------
    "MALFORMED_JSON": ProblemKind(400, "The request body is not valid JSON"),
    "VALIDATION_FAILED": ProblemKind(400, "The request does not match the API schema"),
    "INVALID_BASE64": ProblemKind(400, "The message body is not valid base64"),
    "INVALID_IDEMPOTENCY_KEY": ProblemKind(400, "The Idempotency-Key header is not valid"),
    "UNSUPPORTED_MEDIA_TYPE": ProblemKind(415, "Unsupported request content type"),
    "REQUEST_TOO_LARGE": ProblemKind(413, "The request body is too large"),
    "MESSAGE_TOO_LARGE": ProblemKind(413, "The message body is too large"),
    "TOO_MANY_MESSAGES": ProblemKind(413, "Too many messages in one batch"),
    "REQUEST_HEADERS_TOO_LARGE": ProblemKind(431, "The request headers are too large"),
    "REQUEST_TIMEOUT": ProblemKind(408, "The request did not arrive in time"),
    "TOO_MANY_CONNECTIONS": ProblemKind(503, "The broker holds as many connections as it "
                                             "allows; retry later", RETRY_AFTER_S),
    "UNAUTHORIZED": ProblemKind(401, "A valid bearer token is required"),
    "FORBIDDEN": ProblemKind(403, "The token lacks the scope this operation needs"),
    "NOT_FOUND": ProblemKind(404, "No such resource"),
    "METHOD_NOT_ALLOWED": ProblemKind(405, "Method not allowed"),
    "QUEUE_NOT_FOUND": ProblemKind(404, "No such queue"),
    "TOPIC_NOT_READABLE": ProblemKind(403, "The topic does not allow reads"),
    "INVALID_MESSAGE_ID": ProblemKind(400, "Not a message id"),
    "MESSAGE_NOT_FOUND": ProblemKind(404, "No such message"),
    "LONG_POLL_BUSY": ProblemKind(429, "Too many reads wait already; retry later",
                                  RETRY_AFTER_S),
    "NOT_A_MASTER": ProblemKind(503, "This broker is a slave; write to the master"),
    # DLedger mode: the body names the leader (leader_id, leader_http_address) when one is known.
    "NOT_LEADER": ProblemKind(503, "This member is not the DLedger leader; write to the leader",
                              RETRY_AFTER_S),
    "TRANSFER_REFUSED": ProblemKind(409, "The leadership transfer was refused"),
    "NOT_READY": ProblemKind(503, "The broker is not ready"),
    "LOG_START_MOVED": ProblemKind(503, "Retention moved the log's start during the export; "
                                        "retry"),
    "INTERNAL_ERROR": ProblemKind(500, "Internal error"),
    "SNAPSHOT_RUNNING": ProblemKind(409, "A snapshot export is already running"),
    "ROLE_CHANGE_REFUSED": ProblemKind(409, "The role change was refused"),
    "NOTHING_TO_SNAPSHOT": ProblemKind(409, "No new records since the last snapshot"),
    "SNAPSHOT_RANGE_REMOVED": ProblemKind(
        409, "Retention removed the snapshot's range during the export; retry"),
    # -- metadata (store.metadata.MetadataError.error_code) -------------------------------------
    "METADATA_ERROR": ProblemKind(400, "The metadata request was refused"),
    "INVALID_TOPIC_NAME": ProblemKind(400, "Invalid topic name"),
    "INVALID_GROUP_NAME": ProblemKind(400, "Invalid group name"),
    "INVALID_QUEUE_COUNT": ProblemKind(400, "Invalid queue count"),
    # 409, not 400: any count 1..1024 is valid (the spec says so); a count below the topic's
    # current one conflicts with its state (its queues' messages would be stranded).
    "QUEUE_COUNT_SHRINKS": ProblemKind(409, "Queue counts may only grow"),
    # 409, not 400: each count is valid alone (the spec says so); together they conflict.
    "WRITE_QUEUES_EXCEED_READ_QUEUES": ProblemKind(
        409, "More write queues than read queues: the extra ones could not be read"),
    # 409, not 400: the id is well formed (0..1023, as the spec says) and the topic's current
    # queue count refuses it, a conflict with the broker's state (so is an offset past the end).
    "INVALID_QUEUE_ID": ProblemKind(409, "The queue id is not one of the topic's queues"),
    "INVALID_PERMISSION": ProblemKind(400, "Invalid permission"),
    "INVALID_RETRY_TIMES": ProblemKind(400, "Invalid retry times"),
    "INVALID_BACKOFF": ProblemKind(400, "Invalid backoff"),
    "INVALID_OFFSET": ProblemKind(409, "The offset is past the queue's end"),
    "OFFSET_MOVES_BACKWARDS": ProblemKind(409, "The offset would move backwards"),
    "INVALID_DELAY_LEVEL": ProblemKind(400, "Invalid delay level"),
    # -- delayed messages (store/timers/scheduling.py, app/api/routes/timers.py) ---------------
    # 409, not 400: each value is valid alone (the spec says so); the broker's settings or
    # the other fields refuse it (as INVALID_QUEUE_ID). The body names the setting.
    "DELAY_CONFLICT": ProblemKind(409, "Give one of delay_level, deliver_at_ms and delay_ms"),
    "DELAY_TOO_LONG": ProblemKind(409, "The delay is longer than timer_max_delay_ms"),
    "DELAY_LEVEL_NOT_CONFIGURED": ProblemKind(409, "No such level in delay_levels"),
    "NOT_A_SCHEDULED_MESSAGE": ProblemKind(404, "No delayed message has this id"),
    "MESSAGE_ALREADY_DUE": ProblemKind(409, "The message is due: delivered, or being delivered"),
    "TIMER_CANCELS_MAX_REACHED": ProblemKind(
        429, "timer_cancels_pending_max cancels are pending already", RETRY_AFTER_S),
    # -- group consumption (app/api/routes/receive.py) ------------------------------------------
    "INVALID_RECEIPT_HANDLE": ProblemKind(
        400, "Not a receipt handle of this group and topic (garbage, edited, or another's)"),
    "STALE_RECEIPT_HANDLE": ProblemKind(
        409, "The message is no longer in flight under this handle (redelivered, changed, or "
             "acked)"),
    "INVALID_INVISIBLE_TIME": ProblemKind(
        400, "The invisible time is outside the broker's bounds"),
    "INVALID_TAG_EXPRESSION": ProblemKind(400, "Not a tag expression ('*' or 'TagA || TagB')"),
    "GROUP_CONSUME_DISABLED": ProblemKind(403, "The group does not allow consumption"),
    "POP_IN_FLIGHT_MAX_REACHED": ProblemKind(
        429, "The group holds as many messages in flight as allowed; ack some, or retry later",
        RETRY_AFTER_S),
    "POP_QUEUE_STATES_MAX_REACHED": ProblemKind(
        429, "The broker keeps as many group consumption states as allowed", RETRY_AFTER_S),
    "TOPIC_NOT_FOUND": ProblemKind(404, "No such topic"),
    # A topic this broker does not know while its tables trail its log (app/api/topic_lookup.py).
    "METADATA_CATCHING_UP": ProblemKind(
        503, "This broker's tables have not applied its whole log yet; retry", RETRY_AFTER_S),
    "TOPIC_ALREADY_EXISTS": ProblemKind(409, "The topic already exists"),
    "TOPIC_NOT_WRITABLE": ProblemKind(403, "The topic does not accept writes"),
    # A bound of the broker was reached: the body's `setting` names the setting to raise.
    "TOPICS_MAX_REACHED": ProblemKind(409, "The broker holds topics_max topics already"),
    "QUEUES_PER_TOPIC_MAX_EXCEEDED": ProblemKind(
        400, "More queues than queues_per_topic_max allows"),
    "GROUP_NOT_FOUND": ProblemKind(404, "No such subscription group"),
    "GROUP_ALREADY_EXISTS": ProblemKind(409, "The subscription group already exists"),
    "GROUPS_MAX_REACHED": ProblemKind(409, "The broker holds groups_max groups already"),
    "INVALID_EXPORT": ProblemKind(400, "Invalid metadata export"),
}

# Looked up on every put: indexed by the enum itself, no string work on the hot path.
PUT_HTTP_STATUS: dict[PutMessageStatus, int] = {
    status: PROBLEMS[status.value].http_status for status in PutMessageStatus
}


class ApiError(Exception):
    """A refusal with a code from PROBLEMS; `extra` becomes extension members of the body."""

    def __init__(self, code: str, detail: str, *, put_status: PutMessageStatus | None = None,
                 **extra: Any) -> None:
        assert code in PROBLEMS, code
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.put_status = put_status
        self.extra = extra

    @property
    def http_status(self) -> int:
        return PROBLEMS[self.code].http_status


def from_metadata_error(error: MetadataError) -> ApiError:
    code = error.error_code if error.error_code in PROBLEMS else "METADATA_ERROR"
    return ApiError(code, str(error), setting=error.setting)


def from_put_status(status: PutMessageStatus, detail: str, **extra: Any) -> ApiError:
    return ApiError(status.value, detail or PROBLEMS[status.value].title, put_status=status,
                    **extra)


@dataclass(frozen=True, slots=True)
class Problem:
    """A problem+json answer, ready to send."""

    http_status: int
    body: bytes
    headers: list[tuple[bytes, bytes]]


def render(error: ApiError, instance: str | None = None) -> Problem:
    kind = PROBLEMS[error.code]
    document: dict[str, Any] = {
        "type": PROBLEM_TYPE_PREFIX + error.code.lower().replace("_", "-"),
        "title": kind.title,
        "status": kind.http_status,
        "detail": error.detail,
        "error_code": error.code,
    }
    if instance is not None:
        document["instance"] = instance
    if error.put_status is not None:
        document["put_status"] = error.put_status.value
    for name, value in error.extra.items():
        if value is not None:
            document[name] = value
    headers = [(b"content-type", PROBLEM_CONTENT_TYPE.encode())]
    if kind.retry_after_s is not None:
        headers.append((b"retry-after", str(kind.retry_after_s).encode()))
    if kind.http_status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="twinlog"'))
    return Problem(kind.http_status, orjson.dumps(document), headers)


def code_for_http_status(http_status: int) -> str:
    """The gateway code for a bare HTTP status raised by the framework (404, 405, ...)."""
    return {
        400: "VALIDATION_FAILED",
        401: "UNAUTHORIZED",
        403: "FORBIDDEN",
        404: "NOT_FOUND",
        405: "METHOD_NOT_ALLOWED",
        413: "REQUEST_TOO_LARGE",
        415: "UNSUPPORTED_MEDIA_TYPE",
        503: "NOT_READY",
    }.get(http_status, "VALIDATION_FAILED" if 400 <= http_status < 500 else "INTERNAL_ERROR")

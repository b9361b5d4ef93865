"""Group consumption: receive, ack and change of invisibility (app/api/routes/receive.py)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from app.api.schemas.fields import STRICT, WholeNumber
from app.api.schemas.messages import ConsumedMessage
from store import PutMessageStatus
from store.consumption.handles import HANDLE_CHARS_MAX
from store.consumption.tags import TAG_EXPRESSION_LENGTH_MAX

RECEIVE_MESSAGES_MAX = 1024
ACK_HANDLES_MAX = 1024
INVISIBLE_MS_LIMIT = 7 * 86_400_000  # the schema's bound; the broker's settings bound it more
WAIT_MS_LIMIT = 300_000


class ReceiveRequest(BaseModel):
    model_config = STRICT
    max_messages: Annotated[int, Field(ge=1, le=RECEIVE_MESSAGES_MAX), WholeNumber] = 32
    invisible_ms: Annotated[int, Field(ge=1, le=INVISIBLE_MS_LIMIT, description=(
        "How long the messages are invisible to the group's other receives; within "
        "pop_invisible_ms_min..pop_invisible_ms_max (10 s..12 h by default).")),
        WholeNumber] = 60_000
    wait_ms: Annotated[int, Field(ge=0, le=WAIT_MS_LIMIT, description=(
        "Long poll: when nothing is receivable, wait up to this long (cut to "
        "long_poll_wait_ms_max). 0: answer at once.")), WholeNumber] = 0
    tags: str | None = Field(None, max_length=TAG_EXPRESSION_LENGTH_MAX, description=(
        "'*' (or absent): every message; 'TagA || TagB': those tags. Messages of other tags "
        "count as consumed for the group."))
    body_encoding: Literal["base64", "utf8"] = "base64"


class ReceivedMessage(ConsumedMessage):
    """A message received for the group. msg_id, topic, queue_id and queue_offset name the
    message as produced, also for a retry (which the broker stores in the group's retry
    topic)."""

    receipt_handle: str
    delivery_attempt: int = Field(description="1 for the first delivery, then one more at "
                                              "each redelivery.")
    invisible_until_ms: int


class ReceiveResult(BaseModel):
    status: PutMessageStatus = Field(description=(
        "PUT_OK, or the guarantee missing for the receive's record (answered 202: on a "
        "failover the messages may be delivered again before their invisible time)."))
    messages: list[ReceivedMessage]


class AckRequest(BaseModel):
    model_config = STRICT
    receipt_handles: list[str] = Field(min_length=1, max_length=ACK_HANDLES_MAX)


class HandleOutcome(BaseModel):
    receipt_handle: str = Field(max_length=HANDLE_CHARS_MAX)
    status: int = Field(description="200 acked, 202 acked with a guarantee missing, 400 "
                                    "invalid, 409 stale.")
    error_code: str | None = None
    detail: str | None = None


class AckResult(BaseModel):
    status: PutMessageStatus
    results: list[HandleOutcome]


class ChangeInvisibilityRequest(BaseModel):
    model_config = STRICT
    receipt_handle: str = Field(min_length=1, max_length=HANDLE_CHARS_MAX)
    invisible_ms: Annotated[int, Field(ge=0, le=INVISIBLE_MS_LIMIT, description=(
        "The new invisible time from now; 0 releases the message: receivable again after "
        "the group's backoff (or dead-lettered, if that was its last attempt).")),
        WholeNumber]


class ChangeInvisibilityResult(BaseModel):
    status: PutMessageStatus
    receipt_handle: str | None = Field(description=(
        "The handle of the message from now on (the one sent is stale); null when released "
        "(invisible_ms 0): nothing is held any more."))
    invisible_until_ms: int | None
    released: bool

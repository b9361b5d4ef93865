"""What group consumption's decisions answer (app/broker/consumption.py): the refusal, the
messages delivered, a handle's result, the outcome of the records a decision wrote, and
the receives and acks a decision takes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from store import PutMessageStatus, StoredMessage
from store.consumption.tags import TagFilter
from store.waits.completion import PutCompletion


@dataclass(eq=False)
class PopRefused(Exception):
    """A request the broker refuses; `code` is an API problem code (a PutMessageStatus name
    when the store refused a record), `setting` the bound that refused it, if any."""

    code: str
    detail: str
    setting: str | None = None


class Delivered(NamedTuple):
    """(A named tuple: one is built for every message received.)"""

    handle: str
    attempt: int
    message: StoredMessage
    origin: tuple[str, int, int, str]  # topic, queue id, queue offset, msg id of the original
    invisible_until_ms: int


class HandleResult(NamedTuple):
    """(A named tuple: one is built for every handle acked.)"""

    handle: str
    code: str  # "OK", "STALE_RECEIPT_HANDLE", "INVALID_RECEIPT_HANDLE"
    detail: str = ""
    new_handle: str | None = None
    invisible_until_ms: int | None = None


@dataclass(slots=True, eq=False)
class Outcome:
    """What a decision wrote: the completions its answer awaits (none: nothing written)."""

    completions: list[PutCompletion]
    refused: PopRefused | None = None  # a record of the decision the store did not take

    async def status(self) -> PutMessageStatus:
        """PUT_OK, or the first guarantee missing (a stored status: the answer is a 202);
        the refusal, when a record was refused (nothing of it was applied)."""
        if self.refused is not None:
            raise self.refused
        worst = PutMessageStatus.PUT_OK
        for completion in self.completions:
            status = await completion
            if status is not PutMessageStatus.PUT_OK and worst is PutMessageStatus.PUT_OK:
                worst = status
        return worst


@dataclass(frozen=True, slots=True)
class ReceiveAsk:
    group: str
    topic: str
    queue_count: int  # the topic's read queue count
    max_messages: int
    invisible_ms: int
    tags: TagFilter


@dataclass(frozen=True, slots=True)
class AckAsk:
    """An ack of `handles`, or with `invisible_ms` a change of invisibility of its one handle
    (a new invisible time from now; 0 releases the message for a retry after the group's
    backoff): decided in the same batches, one record per queue."""

    group: str
    topic: str
    handles: Sequence[str]
    invisible_ms: int | None = None


# What a receive or an ack is answered: its messages or handles' results and the outcome of
# the records they rest on, or the refusal (nothing of it was decided).
ReceiveAnswer = tuple[list[Delivered], Outcome] | PopRefused
AckAnswer = tuple[list[HandleResult], Outcome]

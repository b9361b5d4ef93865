"""What group consumption's decisions answer (app/broker/consumption.py): the refusal, the
messages delivered, a handle's result, and the outcome of the records a decision wrote."""

from __future__ import annotations

from dataclasses import dataclass

from store import PutMessageStatus, StoredMessage
from store.waits.completion import PutCompletion


@dataclass(eq=False)
class PopRefused(Exception):
    """A request the broker refuses; `code` is an API problem code (a PutMessageStatus name
    when the store refused a record), `setting` the bound that refused it, if any."""

    code: str
    detail: str
    setting: str | None = None


@dataclass(frozen=True, slots=True)
class Delivered:
    handle: str
    attempt: int
    message: StoredMessage
    origin: tuple[str, int, int, str]  # topic, queue id, queue offset, msg id of the original
    invisible_until_ms: int


@dataclass(frozen=True, slots=True)
class HandleResult:
    handle: str
    code: str  # "OK", "STALE_RECEIPT_HANDLE", "INVALID_RECEIPT_HANDLE"
    detail: str = ""
    new_handle: str | None = None
    invisible_until_ms: int | None = None


@dataclass(slots=True)
class Outcome:
    """What a decision wrote: the completions its answer awaits (none: nothing written)."""

    completions: list[PutCompletion]

    async def status(self) -> PutMessageStatus:
        """PUT_OK, or the first guarantee missing (a stored status: the answer is a 202)."""
        worst = PutMessageStatus.PUT_OK
        for completion in self.completions:
            status = await completion
            if status is not PutMessageStatus.PUT_OK and worst is PutMessageStatus.PUT_OK:
                worst = status
        return worst

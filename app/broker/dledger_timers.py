"""DLedger mode: the timer scheduler (store/timers/scheduler.py) writes through the group
member, fenced by the term it was activated in.

The scheduler moves a lane's cursor past an entry once the record consuming it is in the log
it writes to. Here that is the leader's log in one term: an append answered PUT_OK
(committed) or COMMIT_INDETERMINATE (appended in this term, not yet confirmed: a leader never
cuts its own log, so while it leads this term the entry commits; once it stops leading it,
the scheduler is deactivated and the next term's takes its cursors from what the group
committed). Every append names the term (`DLedgerCommitLog.put`), so a member that led
term t, lost it and leads again in t' never writes term t's decisions in t': the host
refuses them (NOT_LEADER), the lane is tried again, and the broker activates the scheduler
afresh for t' once its log is committed and dispatched (app/broker/broker.py).

So no lane entry is consumed twice in one term, and a new term starts from the committed log:
no delivery is written twice. The wait for an append's answer is bounded: the host answers
every append within `dledger_quorum_deadline_ms` once encoded; past `answer_wait_s` the
writer stops writing in this term (an entry may have been appended unseen: writing it again
could deliver it twice), and says so once; the next term starts clean. A batch is appended
as a prefix (each put only if the one before was encoded); should a later one still be
appended past a refused one (a disk error), the writer stops writing in this term likewise.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from store import Message, PutCompletion, PutMessageResult, PutMessageStatus

if TYPE_CHECKING:
    from ha.dledger.commit_log import DLedgerCommitLog, DLedgerPut

log = logging.getLogger(__name__)

# Appended in the writer's term: the scheduler may move on.
_APPENDED = frozenset({PutMessageStatus.PUT_OK, PutMessageStatus.COMMIT_INDETERMINATE})


class DLedgerTimerWriter:
    """The scheduler's `Writer` in DLedger mode (see the module docstring)."""

    def __init__(self, member: DLedgerCommitLog, answer_wait_s: float) -> None:
        self._member = member
        self._answer_wait_s = answer_wait_s
        self._term: int | None = None
        self.unanswered_total = 0  # appends not answered within answer_wait_s

    @property
    def term(self) -> int | None:
        return self._term

    def fence(self, term: int | None) -> None:
        """Write in `term` from now on (None: write nothing)."""
        self._term = term

    def __call__(self, messages: Sequence[Message]
                 ) -> list[tuple[PutMessageResult, PutCompletion]]:
        term = self._term
        if term is None:
            fenced = _refused("this member does not schedule delayed messages in this term")
            return [fenced] * len(messages)
        puts: list[DLedgerPut] = []
        for message in messages:  # each only if the one before was appended: no hole
            puts.append(self._member.put(message, term, puts[-1] if puts else None))
        deadline_s = time.monotonic() + self._answer_wait_s
        answers = [self._answer(put, deadline_s, term) for put in puts]
        seen_refusal = False
        for result, _ in answers:
            if result.status is not PutMessageStatus.PUT_OK:
                seen_refusal = True
            elif seen_refusal:  # appended past a refusal (a disk error): cursors cannot say so
                self._stop_term(term, "a run of appends has a hole")
                break
        return answers

    def _stop_term(self, term: int, reason: str) -> None:
        if self._term == term:
            self._term = None
            log.error("timers: %s: no more delayed messages are written in term %d (the "
                      "next leader term starts from the committed log)", reason, term)

    def _answer(self, put: DLedgerPut, deadline_s: float,
                term: int) -> tuple[PutMessageResult, PutCompletion]:
        try:
            put.future.wait(max(0.0, deadline_s - time.monotonic()))
        except TimeoutError:
            self.unanswered_total += 1
            self._stop_term(term, f"an append was not answered within {self._answer_wait_s} s")
            return _refused("the append was not answered in time")
        result, status = put.outcome()
        if status not in _APPENDED:
            return result, PutCompletion.done(status)
        # PUT_OK: in the log (the scheduler's contract); the completion says how far.
        return dataclasses.replace(result, status=PutMessageStatus.PUT_OK), \
            PutCompletion.done(status)


def _refused(detail: str) -> tuple[PutMessageResult, PutCompletion]:
    status = PutMessageStatus.SERVICE_NOT_AVAILABLE
    return PutMessageResult(status, detail=detail), PutCompletion.done(status)

"""DLedger mode: group consumption's records and copies go through the group member.

The leader decides as a classic master does (app/broker/consumption.py) and puts the decision's
copies, then its pop records, through the member as one run, fenced by the term this member
takes writes in (a member that lost that term refuses them: NOT_LEADER, nothing written), each
only if the one before was encoded (a prefix, never a hole). A record counts as stored here
once it is encoded at the leader's log end: a leader never cuts its own log while it leads,
so the decision is applied to this member's states at once and the next decision sees it.
Its answer waits for the commit: 200 once committed, 202 COMMIT_INDETERMINATE when the quorum
did not answer in time (it may still commit, or be lost), a refusal when nothing was written.
Every member applies the committed records by dispatch, in log order, as a classic slave does.

What a leader applied ahead of the commit can still be lost when it stops leading: the next
leader's log cuts this member's uncommitted tail (`StoredLog.on_cut`). When a cut reaches
below the last record applied that way, the states are rebuilt from the committed log (the
pop records of the metadata topic, with dispatch held still), so records the next leader
commits apply to exactly what the group committed. Where the member cannot know whether a
record went in (its encode not decided within the wait), it decides nothing more in that
term, as the timer writer does (app/broker/dledger_timers.py); the next term starts from the
committed log. The same holds once a record applied here is known not written (the disk
refused it after it was encoded): the states are rebuilt, a decision planned before does
not apply its record to them (GroupConsumption's state generation), and no put of the term
is encoded any more (the put's guard, asked on the host thread): a record decided from
states holding the lost one never follows it into the log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from app.broker.consumption import DELIVERY_ID_ERA_SHIFT, GroupConsumption
from app.settings import Settings
from store import Message, MessageStore, PutCompletion, PutMessageResult, PutMessageStatus
from store.clock import ClockMs, wall_ms
from store.metadata import MetadataStore
from store.system_topics import METADATA_TOPIC
from store.waits.completion import Pending

if TYPE_CHECKING:
    from ha.dledger.commit_log import DLedgerCommitLog, DLedgerPut

log = logging.getLogger(__name__)
# A leader's delivery ids start at its term << 32: a receive a previous leader answered
# COMMIT_INDETERMINATE whose record the group lost handed out ids the next leader's committed
# states never saw; the same id handed out again would let that stale handle ack the new
# delivery (RocketMQ #9583, #11174). 2^32 decisions a queue and term are out of reach.


class DLedgerPopAppender:
    """GroupConsumption's `appender` (records) and `copy_appender` (copies) in DLedger
    mode: see the module docstring. `term()` is the term this member takes writes in, or
    None."""

    def __init__(self, member: DLedgerCommitLog, term: Callable[[], int | None],
                 encode_wait_s: float) -> None:
        self._member = member
        self._term = term
        self._encode_wait_s = encode_wait_s
        self._stopped_term: int | None = None
        self._lock = threading.Lock()
        # The end of the last record applied here before it committed (a cut below it
        # takes records the states hold: they are rebuilt).
        self.ahead_end_offset = -1
        self.encode_timeouts_total = 0
        # Called (on the host thread) when a record applied here is known not written.
        self.on_lost: Callable[[], None] = lambda: None

    def __call__(self, messages: Sequence[Message]
                 ) -> list[tuple[PutMessageResult, PutCompletion]]:
        term = self._term()
        if term is None or term == self._stopped_term:
            return [_refused("this member is not the DLedger leader taking writes "
                             "(any more): nothing written")] * len(messages)

        def guard() -> str | None:
            # A record decided from states holding one the disk refused since must not
            # follow it into the log (a hole: every member's dispatch would apply it to
            # states that lack the refused one).
            return None if self._stopped_term != term else \
                f"group consumption decides nothing more in term {term}: nothing written"

        puts: list[DLedgerPut] = []
        for message in messages:
            puts.append(self._member.put(message, term, puts[-1] if puts else None, guard))
        deadline_s = time.monotonic() + self._encode_wait_s
        answers = []
        for put in puts:
            try:
                encoded = put.encoded.wait(max(0.0, deadline_s - time.monotonic()))
            except TimeoutError:
                self.encode_timeouts_total += 1
                self._stop_term(term, "an append was not encoded within "
                                      f"{self._encode_wait_s} s")
                answers.append(_refused("the append was not encoded in time"))
                continue
            if not encoded:
                result, status = put.outcome()
                answers.append((result, PutCompletion.done(status)))
                continue
            end_offset = put.end_offset
            with self._lock:
                self.ahead_end_offset = max(self.ahead_end_offset, end_offset or -1)
            answers.append((PutMessageResult(PutMessageStatus.PUT_OK),
                            self._completion(put, term)))
        return answers

    def _completion(self, put: DLedgerPut, term: int) -> PutCompletion:
        """The put's final status: PUT_OK once committed, COMMIT_INDETERMINATE, or a refusal
        of a record encoded but not written (a disk error: the states hold it, so they are
        rebuilt, and this term decides nothing more)."""
        pending = Pending()

        def decided(_value: object) -> None:
            _, status = put.outcome()
            if not status.is_stored:
                self._stop_term(term, f"a record applied here was not written ({status.name})")
                self.on_lost()
            pending.set(status)

        put.future.add_callback(decided)
        return PutCompletion(pending=pending)

    def _stop_term(self, term: int, reason: str) -> None:
        if self._stopped_term != term:
            self._stopped_term = term
            log.error("group consumption: %s: no more receives, acks or changes are decided "
                      "in term %d (the next leader term starts from the committed log)",
                      reason, term)

    def cut(self, offset: int) -> bool:
        """The member's log was cut back to `offset`: whether the cut took a record applied
        here ahead of the commit (then the states must be rebuilt)."""
        with self._lock:
            if offset >= self.ahead_end_offset:
                return False
            self.ahead_end_offset = -1
            return True


def rebuild(consumption: GroupConsumption, store: MessageStore) -> int:
    """The states as the committed log gives them (dispatch held still: no record is applied
    in between); how many pop records were applied."""

    def replay() -> int:
        with consumption.state_lock:
            consumption.reset()
            bounds = store.queue_offset_range(METADATA_TOPIC, 0)
            return consumption.replay(bounds[1] if bounds is not None else 0)

    count = store.dispatch.hold_still(replay)
    log.warning("group consumption: states rebuilt from %d committed pop records (records "
                "applied ahead of the commit were cut)", count)
    return count


def dledger_consumption(settings: Settings, member: DLedgerCommitLog,
                        metadata: Callable[[], MetadataStore], term: Callable[[], int | None],
                        *, clock_ms: ClockMs = wall_ms) -> GroupConsumption:
    """A DLedger member's GroupConsumption: its appends go through `member`."""
    appender = DLedgerPopAppender(member, term, settings.dledger_quorum_deadline_ms / 1000)
    consumption = GroupConsumption(settings, member.store, metadata, clock_ms=clock_ms,
                                   appender=appender, copy_appender=appender)

    def lost() -> None:
        rebuild(consumption, member.store)

    appender.on_lost = lost

    def delivery_id_floor() -> int:
        return (term() or 0) << DELIVERY_ID_ERA_SHIFT

    consumption.delivery_id_floor = delivery_id_floor
    return consumption


def watch_cuts(member: DLedgerCommitLog, consumption: GroupConsumption) -> None:
    """Rebuild the states when the member's log loses a record applied ahead of the commit
    (once the member's log is open: before, this run applied nothing ahead)."""
    appender = consumption.appender
    assert isinstance(appender, DLedgerPopAppender)

    def cut(offset: int) -> None:
        if appender.cut(offset):
            rebuild(consumption, member.store)

    member.storage.log.on_cut = cut


def _refused(detail: str) -> tuple[PutMessageResult, PutCompletion]:
    status = PutMessageStatus.SERVICE_NOT_AVAILABLE
    return PutMessageResult(status, detail=detail), PutCompletion.done(status)

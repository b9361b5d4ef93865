"""Metadata changes written as records of the commit log, answered once they hold.

A topic, group or consumer-offset change is planned against the tables (MetadataStore's
`plan_*`, which refuses what the direct writes refuse), put in the log as a record of the
metadata topic (store/system_topics.py) with the guarantees of any put, and answered once this
broker's dispatch has applied it: the answer then reads back what it wrote, and a slave applies
the same record from its copy of the log, in the same order, so a promoted slave holds exactly
the state its log holds (DESIGN: everything a failover must keep travels in the replicated log).

A forward offset commit (classic modes) is shown at once: under the append lock, once its
record is appended, the offset table takes it ahead of its apply (MetadataStore.apply_ahead),
and its answer waits for the put's guarantees alone, not for dispatch to apply it. What it
shows is in the log already; it is never persisted before its apply, and a cut of the log that
removes its record drops it (store/metadata/offset_table.py). Resets and every other change
wait for their apply.

The answer keeps the promise of a put: PUT_OK when held as the broker's role promises (on a
SYNC_MASTER, by a slave); FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE or FLUSH_DISK_TIMEOUT when it
is applied here but not held as promised (202); a refusal (SERVICE_NOT_AVAILABLE,
OS_PAGE_CACHE_BUSY, ...) when nothing was written. Topic and group changes are planned and
written one at a time (`_change_lock`), so each plan reads the tables every earlier change has
reached; offset commits are not serialized (the last one in log order wins, forward only).

In DLedger mode the leader puts each change, one record and so one entry, through its group
member (DLedgerCommitLog) like a produce (a batch of topics is one record: an entry commits
whole or not at all). The answer is success only once the record is committed and applied
here; a record answered COMMIT_INDETERMINATE (a quorum timeout, a lost leadership) is a 202
that says it may still commit or be lost, and is applied on every member only if it commits;
a refusal (not the leader, pending appends full) wrote nothing. Every member applies the
committed records by dispatch, in log order, so a new leader holds exactly the tables its
committed log holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from store import Message, MessageStore, PutMessageResult, PutMessageStatus
from store.metadata.log_records import MetadataChange, OffsetSet, TopicDelete, encode, op_of
from store.system_topics import METADATA_TOPIC, PROPERTY_OP, PROPERTY_SUBJECT_TOPIC
from store.waits.completion import PutCompletion

if TYPE_CHECKING:  # a classic broker never loads the DLedger member's modules
    from ha.dledger.commit_log import DLedgerCommitLog, DLedgerPut

# How long an answer waits for this broker's dispatch to apply what it wrote.
APPLY_TIMEOUT_MS = 5000


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    status: PutMessageStatus
    detail: str = ""


class MetadataWriteFailed(Exception):
    """A metadata change not written (a refusal: nothing is in the log), or written but not
    applied here in time; the API answers it as a put of that status."""

    def __init__(self, outcome: WriteOutcome) -> None:
        super().__init__(outcome.detail or outcome.status.value)
        self.outcome = outcome


def record_of(change: MetadataChange) -> Message:
    properties = {PROPERTY_OP: op_of(change)}
    if isinstance(change, TopicDelete):
        properties[PROPERTY_SUBJECT_TOPIC] = change.name
    return Message(METADATA_TOPIC, encode(change), properties=properties, queue_id=0)


class MetadataLog:
    def __init__(self, store: MessageStore, *, apply_timeout_ms: int = APPLY_TIMEOUT_MS,
                 dledger: DLedgerCommitLog | None = None) -> None:
        """`dledger`: the group member whose puts carry the records (DLedger mode)."""
        self._store = store
        self._dledger = dledger
        self._apply_timeout_ms = apply_timeout_ms
        # Held by a topic or group change from its plan to its answer (the plan must see
        # every change before it); offset commits never take it.
        self.change_lock = threading.Lock()
        # Held around each append of metadata records (a moment): a snapshot holds it while
        # it reads the tables and appends, so no record falls between what it read and it.
        self.append_lock = threading.Lock()
        # Classic modes: shows a forward commit just appended (its change, its record's
        # commit-log offset) before dispatch applies it; None: every answer waits for the apply.
        self.apply_ahead: Callable[[OffsetSet, int], None] | None = None

    async def write(self, changes: Sequence[MetadataChange]) -> WriteOutcome:
        """Put the changes' records (all in one append), then wait for their guarantees and
        for this broker to apply them. The outcome is PUT_OK or a degraded stored status;
        MetadataWriteFailed when nothing was written or it was not applied in time."""
        if self._dledger is not None:
            puts = self._put_through(self._dledger, changes)
            decided = [await put for put in puts]
            committed = _committed(decided)
            if isinstance(committed, WriteOutcome):
                return committed
            applied = await PutCompletion(pending=self._store.wait_dispatched(
                committed, self._apply_timeout_ms))
            return _settled([], applied, self._apply_timeout_ms)
        completions, end_offset = self._append(changes)
        if end_offset is None:  # a forward commit shown ahead: its guarantees alone
            return _held(await completions[0])
        statuses = [await completion for completion in completions]
        applied = await PutCompletion(
            pending=self._store.wait_dispatched(end_offset, self._apply_timeout_ms))
        return _settled(statuses, applied, self._apply_timeout_ms)

    def write_blocking(self, changes: Sequence[MetadataChange]) -> WriteOutcome:
        """`write` for a caller on a worker thread (a sync route, an auto-created topic)."""
        if self._dledger is not None:
            puts = self._put_through(self._dledger, changes)
            for put in puts:
                put.future.wait(None)  # the host bounds it (the quorum deadline)
            committed = _committed([put.outcome() for put in puts])
            if isinstance(committed, WriteOutcome):
                return committed
            applied = self._store.wait_dispatched(committed, self._apply_timeout_ms).wait(None)
            return _settled([], applied, self._apply_timeout_ms)
        completions, end_offset = self._append(changes)
        statuses = [completion.result() for completion in completions]
        applied = PutMessageStatus.PUT_OK if end_offset is None else self._store.wait_dispatched(
            end_offset, self._apply_timeout_ms).wait(None)
        return _settled(statuses, applied, self._apply_timeout_ms)

    def _append(self, changes: Sequence[MetadataChange]
                ) -> tuple[list[PutCompletion], int | None]:
        """The records appended: their completions and the end of the last, which the answer
        waits for dispatch to apply (None: shown ahead, no wait); a refusal raises."""
        assert changes
        with self.append_lock:
            if len(changes) == 1:
                change = changes[0]
                result, completion = self._store.put_system_message(record_of(change))
                if result.status is PutMessageStatus.PUT_OK and self.apply_ahead is not None \
                        and isinstance(change, OffsetSet) and not change.reset:
                    self.apply_ahead(change, result.commit_log_offset)
                    return [completion], None
                results = [(result, completion)]
            else:
                assert not any(isinstance(change, TopicDelete) for change in changes)
                results = self._store.put_system_messages(
                    [record_of(change) for change in changes])
        for result, _ in results:
            if result.status is not PutMessageStatus.PUT_OK:
                raise MetadataWriteFailed(WriteOutcome(result.status, result.detail or ""))
        end_offset = max(result.commit_log_offset + result.wrote_bytes for result, _ in results)
        return [completion for _, completion in results], end_offset


    def _put_through(self, member: DLedgerCommitLog,
                     changes: Sequence[MetadataChange]) -> list[DLedgerPut]:
        """DLedger mode: one change, one entry, which commits whole or not at all (a batch of
        topics is one TopicsPut: app/api/metadata_writes.py). Several entries could commit in
        part: a leader change may keep a prefix of them. Queued under the append lock, as a
        classic append, so a snapshot being queued is never passed."""
        assert len(changes) == 1, "one metadata change per entry in DLedger mode"
        with self.append_lock:
            return [member.put(record_of(changes[0]))]


def _committed(decided: Sequence[tuple[PutMessageResult, PutMessageStatus]]
               ) -> WriteOutcome | int:
    """DLedger mode: the end offset of the last record once every one committed; the outcome
    to answer when one did not (a refusal raises: nothing of it was written)."""
    for result, status in decided:
        if not status.is_stored:
            raise MetadataWriteFailed(WriteOutcome(status, result.detail or ""))
    for result, status in decided:
        if status is not PutMessageStatus.PUT_OK:
            return WriteOutcome(status, (result.detail or status.value) + "; a metadata "
                                "change applies on every member only if its record commits")
    return max(result.commit_log_offset + result.wrote_bytes for result, _ in decided)


def _settled(statuses: list[PutMessageStatus], applied: PutMessageStatus,
             apply_timeout_ms: int) -> WriteOutcome:
    if applied is not PutMessageStatus.PUT_OK:
        raise MetadataWriteFailed(WriteOutcome(
            PutMessageStatus.SERVICE_NOT_AVAILABLE,
            f"stored in the log, but not applied on this broker within {apply_timeout_ms} ms "
            "(dispatch is behind); it applies when dispatch reaches it"))
    for status in statuses:
        if status is not PutMessageStatus.PUT_OK:
            return _held(status)
    return _HELD


_HELD = WriteOutcome(PutMessageStatus.PUT_OK)


def _held(status: PutMessageStatus) -> WriteOutcome:
    """The outcome of a change applied on this broker (or shown ahead) whose record's
    guarantees came out as `status`."""
    if status is PutMessageStatus.PUT_OK:
        return _HELD
    return WriteOutcome(status, "applied on this broker, but not held as its role promises")

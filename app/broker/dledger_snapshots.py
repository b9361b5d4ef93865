"""DLedger mode: metadata snapshots written by the leader through its group member.

As in the classic modes (app/broker/metadata_snapshots.py), retention keeps every file from
the last whole snapshot on, and a snapshot is written when retention reaches that file or
once `metadata_snapshot_records_max` metadata records follow the last. Here only the leader
writes one, as entries of its term appended through the member like any metadata change,
and it counts once committed (and dispatched here); a follower's retention waits for the
leader's next snapshot, as a classic slave waits for its master's. A member restarted below
what retention left, or wiped and reset to its leader's base, then finds a whole snapshot in
its log and loads it (store/system_feed.py).

Exactness, as a classic master's: the tables are read under MetadataLog's append lock (no
metadata put is queued meanwhile) once dispatch passed every record the log holds; the parts
are queued together (DLedgerCommitLog.put_run: consecutive entries, nothing between them) and
built on the host thread right before the first is encoded, from the queues' next offsets
there. A metadata record encoded between the tables' read and that point (one put before the
lock was taken and not yet committed) makes the build refuse: nothing is appended, and the
write tries again. Parts that commit only in part (a leader change in the run) are not a
whole snapshot: replicas pass them over and retention keeps waiting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from app.broker.metadata_log import MetadataLog
from app.broker.metadata_snapshots import MetadataSnapshots, PopImagesSource, draft_snapshot
from store import Message, MessageStore, PutMessageStatus
from store.metadata import MetadataStore

if TYPE_CHECKING:  # a classic broker never loads the DLedger member's modules
    from ha.dledger.commit_log import DLedgerCommitLog

log = logging.getLogger(__name__)

_NOT_APPLIED = "the tables have not applied every metadata record the log holds"


class DLedgerMetadataSnapshots(MetadataSnapshots):
    """MetadataSnapshots' write and its triggers, the parts put through the member by the
    leader only (a follower's `write` answers False at once)."""

    def __init__(self, store: MessageStore, member: DLedgerCommitLog,
                 metadata_log: MetadataLog, metadata: Callable[[], MetadataStore], *,
                 part_bytes_max: int, pop_images: PopImagesSource | None = None) -> None:
        super().__init__(store, metadata_log, metadata, part_bytes_max=part_bytes_max,
                         pop_images=pop_images)
        self._member = member

    def _may_write(self) -> bool:
        return self._member.leading_term() is not None

    def _write_parts(self) -> int | str | None:
        """The parts put through the member and decided: the end offset of the last once
        every one committed, None when the build refused (tables behind the log), or why
        they did not all commit."""
        term = self._member.leading_term()
        if term is None:
            return "this member no longer leads"
        with self._metadata_log.append_lock:
            draft = draft_snapshot(self._metadata(), self._store.commit_log.queue_offsets(),
                                   self.part_bytes_max, self._pop_images)

            def build(queue_offsets: dict[tuple[str, int], int]) -> Sequence[Message] | str:
                records = draft.records(queue_offsets)
                return _NOT_APPLIED if records is None else records

            puts = self._member.put_run(draft.part_count, build, term)
        for put in puts:
            put.future.wait(None)  # the host bounds it (the quorum deadline)
        decided = [put.outcome() for put in puts]
        first_result = decided[0][0]
        if first_result.detail == _NOT_APPLIED:
            return None
        for result, status in decided:
            if status is not PutMessageStatus.PUT_OK:
                return f"{status.value}: {result.detail or ''}"
        log.info("metadata snapshot committed at %d (term %d): %s",
                 first_result.commit_log_offset, term, draft.describe())
        return max(result.commit_log_offset + result.wrote_bytes for result, _ in decided)


def snapshots_for_mode(store: MessageStore, member: DLedgerCommitLog | None,
                       metadata_log: MetadataLog, metadata: Callable[[], MetadataStore], *,
                       part_bytes_max: int,
                       pop_images: PopImagesSource | None = None) -> MetadataSnapshots:
    """The broker's snapshot writer: a classic master's, or (`member` given) a DLedger
    leader's."""
    if member is None:
        return MetadataSnapshots(store, metadata_log, metadata, part_bytes_max=part_bytes_max,
                                 pop_images=pop_images)
    return DLedgerMetadataSnapshots(store, member, metadata_log, metadata,
                                    part_bytes_max=part_bytes_max, pop_images=pop_images)

"""Metadata snapshots written into the log, so that retention never takes metadata with it.

Every metadata change is a record of the log (app/broker/metadata_log.py); retention removes
whole files, and with them the first records. So a classic master writes a snapshot of its
tables (topics, groups, consumer offsets), of group consumption's states (read after the
tables, under the same check) and of every queue's next queue offset, as records
of the metadata topic (store/metadata/log_records.py's MetadataSnapshot, in parts of at most
256 KiB each, and half of `message_size_max_bytes`), whenever retention reaches the file that
holds the last whole snapshot (or, before the first one, the first metadata record).
Retention then removes that file once the new snapshot is dispatched (store/retention.py).
It also writes one once `metadata_snapshot_records_max` metadata records follow the last
(`write_if_due`, checked every few seconds), which bounds what a rebuild or a start replays.
So at every moment the retained log holds a whole snapshot at or past its min offset, and a
replay from it gives the tables of the whole log (store/system_feed.py). A slave writes
none: its retention keeps its last snapshot's file until its master's next one arrives.

A snapshot must be exactly the tables its position in the log says. It is written under
MetadataLog's append lock (no metadata record can be appended meanwhile), once dispatch has
applied every record below the log's end, and its queue starts are read in the commit log's
append lock hold that writes it (CommitLog.append_built).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from app.broker.metadata_log import MetadataLog, record_of
from store import Message, MessageStore, PutMessageStatus
from store.consumption.snapshot import PopCountsImage, PopQueueImage
from store.metadata import MetadataStore
from store.metadata.log_records import (
    SNAPSHOT_PART_BYTES_MAX,
    QueueStart,
    SnapshotPlan,
    SnapshotTooLarge,
    plan_snapshot,
)
from store.system_topics import METADATA_TOPIC
from store.timers.names import has_queue_starts

# Group consumption's states and counts as the registry holds them (app/broker/pop_snapshots.py).
PopImagesSource = Callable[[], tuple[list[PopQueueImage], list[PopCountsImage]]]

log = logging.getLogger(__name__)

# A write waits this long for dispatch to apply what the log holds, this many times; then
# at most APPLIED_WAIT_MS for its own records to be applied (a large snapshot rewrites every
# row; past that, the next retention round finds it applied).
DISPATCH_WAIT_MS = 1000
ATTEMPTS_MAX = 5
APPLIED_WAIT_MS = 10_000


def _queue_starts(queue_offsets: dict[tuple[str, int], int]) -> list[QueueStart]:
    return [QueueStart(topic, queue_id, next_offset)
            for (topic, queue_id), next_offset in sorted(queue_offsets.items())
            if has_queue_starts(topic)]


class SnapshotDraft:
    """A snapshot's tables, read and cut into parts ahead; its queue starts are read where
    it is appended (`records`), the only part that must be taken in the append's hold."""

    def __init__(self, applied_queue_offset: int, plan: SnapshotPlan,
                 table_records: list[Message], counts: tuple[int, int, int, int]) -> None:
        self.applied_queue_offset = applied_queue_offset  # the tables' metadata position
        self.plan = plan
        self._table_records = table_records
        self._counts = counts

    @property
    def part_count(self) -> int:
        return self.plan.part_count

    def records(self, queue_offsets: dict[tuple[str, int], int]) -> list[Message] | None:
        """Every part's record for a place in the log where the queues' next offsets are
        `queue_offsets`; None when the tables have not applied every metadata record
        before that place (the snapshot would not be the tables its place says)."""
        if queue_offsets.get((METADATA_TOPIC, 0), 0) != self.applied_queue_offset:
            return None
        queue_parts = self.plan.queue_parts(_queue_starts(queue_offsets))
        return self._table_records + [record_of(part) for part in queue_parts]

    def describe(self) -> str:
        topics, groups, offsets, pop_queues = self._counts
        return (f"{topics} topics, {groups} groups, {offsets} offsets, {pop_queues} pop queue "
                f"states, {self.plan.part_count} parts")


def draft_snapshot(metadata: MetadataStore, queue_offsets_about: dict[tuple[str, int], int],
                   part_bytes_max: int, pop_images: PopImagesSource | None = None) -> SnapshotDraft:
    """The tables as they are applied now, and group consumption's states (`pop_images`, read
    after the tables: a pop record appended since makes the append's check refuse the
    snapshot), planned into parts (SnapshotTooLarge past SNAPSHOT_PARTS_MAX);
    `queue_offsets_about`, what the queue starts are about to be, sizes their parts."""
    applied, (topics, groups, offsets) = metadata.snapshot_tables()
    pop_queues, pop_counts = pop_images() if pop_images is not None else ([], [])
    plan = plan_snapshot(topics, groups, offsets, _queue_starts(queue_offsets_about),
                         part_bytes_max, pop_queues=pop_queues, pop_counts=pop_counts)
    return SnapshotDraft(applied, plan, [record_of(part) for part in plan.table_parts()],
                         (len(topics), len(groups), len(offsets), len(pop_queues)))


class _NotApplied(Exception):
    """The tables have not applied every metadata record appended yet."""


class MetadataSnapshots:
    def __init__(self, store: MessageStore, metadata_log: MetadataLog,
                 metadata: Callable[[], MetadataStore], *,
                 part_bytes_max: int = SNAPSHOT_PART_BYTES_MAX,
                 pop_images: PopImagesSource | None = None) -> None:
        """`pop_images`: group consumption's states and counts (read after the tables: a pop
        record appended since then makes the append's check refuse the snapshot)."""
        self._store = store
        self._pop_images = pop_images
        self._metadata_log = metadata_log
        self._metadata = metadata
        self.part_bytes_max = part_bytes_max
        self.written_count = 0
        self.last_error: str | None = None

    def write(self) -> bool:
        """Write a snapshot at the log's end and wait until dispatch passed it; False (and
        `last_error` says why) when it could not be written: retention then keeps the file
        and asks again next round. A writer that may not write (`_may_write`) answers False
        at once."""
        for _ in range(ATTEMPTS_MAX):
            if not self._may_write():
                return False
            end = self._store.max_offset
            status = self._store.wait_dispatched(end, DISPATCH_WAIT_MS).wait(None)
            if status is not PutMessageStatus.PUT_OK:
                continue
            try:
                written = self._write_parts()
            except SnapshotTooLarge as error:
                return self._failed(str(error))
            if written is None:
                continue  # a record appended since the wait: its apply first
            if isinstance(written, str):
                return self._failed(written)
            applied = self._store.wait_dispatched(written, APPLIED_WAIT_MS).wait(None)
            if applied is not PutMessageStatus.PUT_OK:
                return self._failed("the snapshot is written, dispatch has not reached it")
            self.written_count += 1
            self.last_error = None
            return True
        return self._failed(f"dispatch did not catch up with the log's end in "
                            f"{ATTEMPTS_MAX} waits of {DISPATCH_WAIT_MS} ms")

    def write_if_due(self, records_max: int) -> bool:
        """A snapshot when `records_max` metadata records (0: never) follow the last one, so
        that a rebuild or a start replays at most about that many: True when one was
        written."""
        if records_max <= 0 or not self._may_write() \
                or self._store.metadata_records_since_snapshot() < records_max:
            return False
        return self.write()

    def _may_write(self) -> bool:
        return True

    def _write_parts(self) -> int | str | None:
        """The snapshot's parts written: the end offset of the last, why they were not, or
        None when the tables lacked a record the log holds (written again after its apply)."""
        with self._metadata_log.append_lock:
            try:
                return self._append()
            except _NotApplied:
                return None

    def _append(self) -> int | str:
        """The snapshot appended (the caller holds the append lock, dispatch caught up):
        the end offset of its last part, or why it was not written. The tables' parts are
        encoded before the commit log's lock; only the queue starts are read and encoded in
        its hold."""
        draft = draft_snapshot(self._metadata(), self._store.commit_log.queue_offsets(),
                               self.part_bytes_max, self._pop_images)

        def build(queue_offsets: dict[tuple[str, int], int]) -> Sequence[Message]:
            records = draft.records(queue_offsets)
            if records is None:
                raise _NotApplied  # the tables read lack a record the log holds
            return records

        results = self._store.put_system_messages_built(build)
        for result, _ in results:
            if result.status is not PutMessageStatus.PUT_OK:
                return f"{result.status.value}: {result.detail}"
        log.info("metadata snapshot written at %d: %s", results[0][0].commit_log_offset,
                 draft.describe())
        return max(result.commit_log_offset + result.wrote_bytes for result, _ in results)

    def _failed(self, error: str) -> bool:
        self.last_error = error
        log.warning("metadata snapshot not written (retention keeps its files): %s", error)
        return False

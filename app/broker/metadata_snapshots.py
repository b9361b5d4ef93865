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
    SnapshotTooLarge,
    plan_snapshot,
)
from store.system_topics import METADATA_TOPIC
from store.timers.names import has_queue_starts

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


class _NotApplied(Exception):
    """The tables have not applied every metadata record appended yet."""


class MetadataSnapshots:
    def __init__(self, store: MessageStore, metadata_log: MetadataLog,
                 metadata: Callable[[], MetadataStore], *,
                 part_bytes_max: int = SNAPSHOT_PART_BYTES_MAX,
                 pop_images: Callable[[], tuple[list[PopQueueImage], list[PopCountsImage]]]
                 | None = None) -> None:
        """`pop_images`: group consumption's states and counts (read after the tables: a pop
        record appended since then makes the append's check refuse the snapshot)."""
        self._store = store
        self._pop_images = pop_images
        self._metadata_log = metadata_log
        self._metadata = metadata
        self._part_bytes_max = part_bytes_max
        self.written_count = 0
        self.last_error: str | None = None

    def write(self) -> bool:
        """Write a snapshot at the log's end and wait until dispatch passed it; False (and
        `last_error` says why) when it could not be written: retention then keeps the file
        and asks again next round."""
        for _ in range(ATTEMPTS_MAX):
            end = self._store.max_offset
            status = self._store.wait_dispatched(end, DISPATCH_WAIT_MS).wait(None)
            if status is not PutMessageStatus.PUT_OK:
                continue
            with self._metadata_log.append_lock:
                try:
                    written = self._append()
                except _NotApplied:
                    continue  # a record appended since the wait: its apply first
                except SnapshotTooLarge as error:
                    return self._failed(str(error))
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
        if records_max <= 0 or self._store.metadata_records_since_snapshot() < records_max:
            return False
        return self.write()

    def _append(self) -> int | str:
        """The snapshot appended (the caller holds the append lock, dispatch caught up):
        the end offset of its last part, or why it was not written. The tables' parts are
        encoded before the commit log's lock; only the queue starts are read and encoded in
        its hold."""
        applied, (topics, groups, offsets) = self._metadata().snapshot_tables()
        pop_queues, pop_counts = self._pop_images() if self._pop_images is not None \
            else ([], [])
        queues_about = _queue_starts(self._store.commit_log.queue_offsets())
        plan = plan_snapshot(topics, groups, offsets, queues_about, self._part_bytes_max,
                             pop_queues=pop_queues, pop_counts=pop_counts)
        table_records = [record_of(part) for part in plan.table_parts()]

        def build(queue_offsets: dict[tuple[str, int], int]) -> Sequence[Message]:
            if queue_offsets.get((METADATA_TOPIC, 0), 0) != applied:
                raise _NotApplied  # the tables read lack a record the log holds
            queue_parts = plan.queue_parts(_queue_starts(queue_offsets))
            return table_records + [record_of(part) for part in queue_parts]

        results = self._store.put_system_messages_built(build)
        for result, _ in results:
            if result.status is not PutMessageStatus.PUT_OK:
                return f"{result.status.value}: {result.detail}"
        log.info("metadata snapshot written at %d: %d topics, %d groups, %d offsets, %d pop "
                 "queue states, %d parts", results[0][0].commit_log_offset, len(topics),
                 len(groups), len(offsets), len(pop_queues), len(results))
        return max(result.commit_log_offset + result.wrote_bytes for result, _ in results)

    def _failed(self, error: str) -> bool:
        self.last_error = error
        log.warning("metadata snapshot not written (retention keeps its files): %s", error)
        return False

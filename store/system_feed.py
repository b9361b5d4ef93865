"""The metadata layer's feed of the log's metadata records, and what it does when the log
loses records the layer applied already.

The layer (SQL tables) applies each record of the metadata topic once, in log order, and says
how far it got (its next queue offset and the last record's commit-log offset). Its tables
must never hold what the log does not: so when the log loses records it was handed (a slave
cut back to agree with a new master; a power cut that took unflushed records while the
tables kept them), the layer is reset and every record the log still holds is handed again
from queue offset 0. Records carry whole rows and applying one is a pure function of the
tables, so the replay gives exactly the tables of the log's prefix.

Retention never leaves the layer short of records: the master writes a snapshot of its
tables (a record of the metadata topic, in parts: store/metadata/log_records.py) before
retention removes the file holding the last one, and every replica's retention keeps the
files from its last whole snapshot on (`retention_floor`). A rebuild, and a start whose
persisted position is below what retention left, replay from the last whole snapshot: its
part 0 replaces the tables, so the replay gives the tables of the whole log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from store.dispatch import (
    SystemRecord,
    SystemRecordHandler,
    SystemRunHandler,
    SystemRunStopped,
)
from store.reads import GetMessagesResult, GetMessageStatus
from store.system_topics import METADATA_TOPIC, PROPERTY_OP, SnapshotAt, snapshot_part

log = logging.getLogger(__name__)

REPLAY_BATCH_MESSAGES = 256


class _Snapshot:
    """A snapshot's part 0 (commit-log and queue offsets), its parts, the next part due."""

    __slots__ = ("offset", "queue_offset", "parts", "next_part")

    def __init__(self, offset: int, queue_offset: int, parts: int) -> None:
        self.offset, self.queue_offset, self.parts, self.next_part = (
            offset, queue_offset, parts, 1)


class MetadataReads(Protocol):
    def get_messages(self, topic: str, queue_id: int, offset: int, max_messages: int, *,
                     committed_only: bool) -> GetMessagesResult: ...


class SystemRecordFeed:
    """Hands metadata records to the layer and remembers the last one handed."""

    def __init__(self, reads: MetadataReads) -> None:
        self._reads = reads
        self._handler: SystemRecordHandler | None = None
        self._run_handler: SystemRunHandler | None = None
        self._reset: Callable[[], None] | None = None
        # Told of every cut (its offset): the layer drops what it shows ahead of its apply.
        self._cut: Callable[[int], None] | None = None
        # The commit-log offset of the last record handed (-1: none).
        self.last_handed_offset = -1
        self.rebuild_count = 0
        # True while the tables are reset and refilled from the log (`_rebuild`): they hold
        # only what the replay reached, so a topic they lack may still be in the log.
        self.rebuilding = False
        # The last whole snapshot the log holds (its part 0), and one whose parts are
        # still arriving; `_scanned` is False until the log was searched for one.
        self.latest_snapshot: _Snapshot | None = None
        self._arriving: _Snapshot | None = None
        self._scanned = False

    @property
    def handler(self) -> SystemRecordHandler | None:
        return self._handler

    def attach(self, handler: SystemRecordHandler, from_queue_offset: int,
               applied_offset: int | None, reset: Callable[[], None] | None,
               cut: Callable[[int], None] | None = None,
               snapshot: SnapshotAt | None = None,
               run_handler: SystemRunHandler | None = None) -> int:
        """Hand the records from `from_queue_offset` on. When the layer's last applied record
        (at `from_queue_offset - 1`, commit-log offset `applied_offset`) is not in the log,
        the layer is ahead of the log: it is reset and fed again from 0. `snapshot` is the
        last whole snapshot among the records the layer applied, as it persisted it: taken
        when the log holds it so, else the log is searched. Returns how many records were
        handed. The caller holds dispatch still. `run_handler`, when given, takes dispatch's
        runs of records that are neither a topic delete nor a snapshot part at once
        (`dispatched_run`)."""
        self._handler, self._reset, self._cut = handler, reset, cut
        self._run_handler = run_handler
        if not self._known(snapshot, from_queue_offset):
            self._scan()
        if reset is not None and from_queue_offset > 0 and applied_offset is not None \
                and self._offset_at(from_queue_offset - 1) != applied_offset:
            log.warning("metadata: the tables applied a record (queue offset %d, log offset "
                        "%d) that the log no longer holds; they are rebuilt from the log",
                        from_queue_offset - 1, applied_offset)
            return self._rebuild()
        first = self._first_queue_offset()
        if reset is not None and first is not None and from_queue_offset < first:
            log.warning("metadata: the tables are applied up to queue offset %d, retention "
                        "removed the records up to %d; they are rebuilt from the log's last "
                        "snapshot", from_queue_offset, first)
            return self._rebuild()
        # The tables hold the records up to `applied_offset`: a cut below it must rebuild
        # them even when nothing is handed after this start.
        self.last_handed_offset = (applied_offset if from_queue_offset > 0
                                   and applied_offset is not None else -1)
        return self._replay(from_queue_offset)

    def detach(self) -> None:
        self._handler = self._reset = self._cut = self._run_handler = None

    def dispatched(self, record: SystemRecord) -> None:
        """Dispatch's hand-off (SystemRecordHandler): the layer's, remembered."""
        handler = self._handler
        if handler is not None:
            handler(record)
            self.last_handed_offset = record.commit_log_offset
            self._note(record.commit_log_offset, record.queue_offset, record.op, record.body)

    def dispatched_run(self, records: Sequence[SystemRecord]) -> None:
        """Dispatch's hand-off of a run of records that are neither a topic delete nor a
        snapshot part (SystemRunHandler): the layer's run handler, remembered as `dispatched`
        remembers each (none is a snapshot part: nothing to follow)."""
        run_handler = self._run_handler
        if run_handler is None:
            for index, record in enumerate(records):
                try:
                    self.dispatched(record)
                except Exception as error:
                    raise SystemRunStopped(index, error) from error
            return
        try:
            run_handler(records)
        except SystemRunStopped as stopped:
            if stopped.applied:
                self.last_handed_offset = records[stopped.applied - 1].commit_log_offset
            raise
        self.last_handed_offset = records[-1].commit_log_offset

    def log_cut(self, offset: int) -> None:
        """The log was cut back to `offset` (dispatch held still): when that removed a record
        the layer applied, the layer is rebuilt from what is left. The layer's `cut` hears
        of every cut, first."""
        if self._cut is not None:
            self._cut(offset)
        latest = self.latest_snapshot
        if (latest is not None and latest.offset >= offset) or self._arriving is not None:
            self._scanned = False  # found again at the next need, in what the cut left
            self.latest_snapshot = self._arriving = None
        if self._handler is None or self.last_handed_offset < offset:
            return
        if self._reset is None:
            log.error("metadata: the log was cut below a record the tables applied (log "
                      "offset %d) and the layer cannot be reset", self.last_handed_offset)
            return
        log.warning("metadata: the log was cut back to %d, below the last record the tables "
                    "applied (%d); they are rebuilt from the log", offset,
                    self.last_handed_offset)
        self._rebuild()

    def _rebuild(self) -> int:
        assert self._reset is not None
        self.rebuilding = True
        try:
            self._reset()
            self.last_handed_offset = -1
            self.rebuild_count += 1
            self._scan()
            latest, first = self.latest_snapshot, self._first_queue_offset()
            # Every record when the log holds them all; else from the last snapshot, which
            # the tables, reset, load whole (MetadataStore: a snapshot after a gap is loaded).
            start = 0 if latest is None or not first else latest.queue_offset
            return self._replay(start)
        finally:
            self.rebuilding = False

    def _replay(self, queue_offset: int) -> int:
        handler = self._handler
        assert handler is not None
        count = 0
        while True:
            # What dispatch indexed, as it is: the records are applied as dispatched.
            result = self._reads.get_messages(METADATA_TOPIC, 0, queue_offset,
                                              REPLAY_BATCH_MESSAGES, committed_only=False)
            if (result.status is GetMessageStatus.OFFSET_TOO_SMALL
                    and result.next_offset > queue_offset):
                log.warning("metadata records below queue offset %d are gone (retention); "
                            "applying from %d", result.next_offset, result.next_offset)
                queue_offset = result.next_offset
                continue
            if not result.messages:
                return count
            for message in result.messages:
                op = message.properties.get(PROPERTY_OP, "")
                handler(SystemRecord(message.commit_log_offset, message.queue_offset, op,
                                     message.body))
                self.last_handed_offset = message.commit_log_offset
                self._note(message.commit_log_offset, message.queue_offset, op, message.body)
                count += 1
            queue_offset = result.next_offset

    # -- snapshots -------------------------------------------------------------------------

    def retention_floor(self) -> int | None:
        """The lowest commit-log offset retention must keep for the tables to be rebuilt
        from the log: the last whole snapshot's; with none, the first metadata record's
        (the master writes a snapshot when retention is held there); None when the log
        holds no metadata record."""
        self._scan()
        if self.latest_snapshot is not None:
            return self.latest_snapshot.offset
        first = self._first_queue_offset()
        return None if first is None else self._offset_at(first)

    def records_since_snapshot(self, next_queue_offset: int) -> int:
        """How many metadata records lie before `next_queue_offset` (the metadata queue's
        end) and after the last whole snapshot's start (or the first record the log holds:
        what a rebuild would replay)."""
        self._scan()
        if self.latest_snapshot is not None:
            return next_queue_offset - self.latest_snapshot.queue_offset
        first = self._first_queue_offset()
        return 0 if first is None else next_queue_offset - first

    def _note(self, offset: int, queue_offset: int, op: str, body: bytes) -> None:
        """Follow snapshot parts as dispatch hands them: a snapshot is whole at its last."""
        part = snapshot_part(op, body)
        if part is None:
            return
        index, parts = part
        arriving = self._arriving
        if index == 0:
            arriving = _Snapshot(offset, queue_offset, parts)
        elif arriving is not None and arriving.next_part == index and arriving.parts == parts:
            arriving.next_part += 1
        else:
            arriving = None
        if arriving is not None and arriving.next_part == arriving.parts:
            self.latest_snapshot, arriving = arriving, None
        self._arriving = arriving

    def _known(self, snapshot: SnapshotAt | None, from_queue_offset: int) -> bool:
        """Take the layer's last whole snapshot (`snapshot`, among the records below
        `from_queue_offset`) as the log's, when the log holds it as the layer saw it and no
        snapshot's parts straddle `from_queue_offset`: every record after it is then handed
        (and followed, `_note`) as the layer catches up, so the log need not be read back
        from its end. False when the layer names none, or the log does not hold it (retention,
        a cut, tables of another log) or ends mid-snapshot: the scan decides."""
        self._scanned = False
        self.latest_snapshot = self._arriving = None
        if snapshot is None or snapshot.queue_offset + snapshot.parts > from_queue_offset:
            return False
        last = snapshot.queue_offset + snapshot.parts - 1
        if self._part_at(snapshot.queue_offset) != (snapshot.commit_log_offset,
                                                    (0, snapshot.parts)):
            return False
        found = self._part_at(last)
        if found is None or found[1] != (snapshot.parts - 1, snapshot.parts):
            return False
        if from_queue_offset - 1 > last:
            found = self._part_at(from_queue_offset - 1)
            part = None if found is None else found[1]
            if found is None or (part is not None and part[0] != part[1] - 1):
                return False  # a snapshot's parts straddle the position
        self.latest_snapshot = _Snapshot(snapshot.commit_log_offset, snapshot.queue_offset,
                                         snapshot.parts)
        self._scanned = True
        return True

    def _scan(self) -> None:
        """Find the last whole snapshot, from the log's end back: its last part, then its
        part 0 (a snapshot's parts are appended together, in one lock hold)."""
        if self._scanned:
            return
        self._scanned = True
        self.latest_snapshot = self._arriving = None
        first = self._first_queue_offset()
        if first is None:
            return
        end = self._reads.get_messages(METADATA_TOPIC, 0, first, 0, committed_only=False).max_offset
        while end > first:
            start = max(first, end - REPLAY_BATCH_MESSAGES)
            result = self._reads.get_messages(METADATA_TOPIC, 0, start, end - start,
                                              committed_only=False)
            for message in reversed(result.messages):
                op = message.properties.get(PROPERTY_OP, "")
                part = snapshot_part(op, message.body)
                if part is None or part[0] != part[1] - 1:
                    continue
                first_part = message.queue_offset - part[1] + 1
                if first_part >= first and self._is_part_zero(first_part, part[1]):
                    start_offset = self._offset_at(first_part)
                    assert start_offset is not None
                    self.latest_snapshot = _Snapshot(start_offset, first_part, part[1])
                    return
            end = start

    def _is_part_zero(self, queue_offset: int, parts: int) -> bool:
        found = self._part_at(queue_offset)
        return found is not None and found[1] == (0, parts)

    def _part_at(self, queue_offset: int) -> tuple[int, tuple[int, int] | None] | None:
        """The record at `queue_offset`: its commit-log offset and, for a snapshot part, its
        (part, parts); None when the log does not hold it."""
        result = self._reads.get_messages(METADATA_TOPIC, 0, queue_offset, 1, committed_only=False)
        if not result.messages or result.messages[0].queue_offset != queue_offset:
            return None
        message = result.messages[0]
        return message.commit_log_offset, snapshot_part(message.properties.get(PROPERTY_OP, ""),
                                                        message.body)

    def _first_queue_offset(self) -> int | None:
        """The metadata topic's first queue offset the log holds; None when it holds none."""
        result = self._reads.get_messages(METADATA_TOPIC, 0, 0, 1, committed_only=False)
        if result.messages:
            return result.messages[0].queue_offset
        if result.status is GetMessageStatus.OFFSET_TOO_SMALL and result.next_offset > 0:
            found = self._reads.get_messages(METADATA_TOPIC, 0, result.next_offset, 1,
                                             committed_only=False)
            if found.messages:
                return found.messages[0].queue_offset
        return None

    def _offset_at(self, queue_offset: int) -> int | None:
        found = self._part_at(queue_offset)
        return None if found is None else found[0]

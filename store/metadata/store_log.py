"""Metadata records of the log: the tables apply them in log order (MetadataStore's part)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from store.dispatch import SystemRecord
from store.metadata import apply
from store.metadata.apply import AppliedPosition
from store.metadata.log_records import (
    GroupDelete,
    GroupPut,
    MetadataChange,
    MetadataRecordError,
    MetadataSnapshot,
    OffsetSet,
    TopicDelete,
    TopicPut,
    TopicsPut,
    decode,
)
from store.metadata.models import (
    LogPosition,
)
from store.metadata.offset_table import ConsumerOffsetTable, OffsetStep
from store.metadata.offsets import OffsetKey
from store.metadata.store_base import APPENDED_CHANGES_MAX, MetadataStoreBase
from store.system_topics import SnapshotAt


class LogRecordsMixin(MetadataStoreBase):
    """Metadata records of the log: the tables apply them in log order (MetadataStore's part)."""

    @property
    def log_position(self) -> LogPosition:
        """How far into the log's metadata records the tables are applied (in memory: what
        the next flush persists)."""
        return self._applied.model()

    def consistent_export(self) -> threading.RLock:
        """Held around reading `log_position` and exporting a table: no record applies in
        between (an export then says exactly which records it reflects)."""
        return self._write_lock

    def apply_record(self, record: SystemRecord) -> MetadataChange | None:
        """Apply one metadata record of the log (dispatch's `on_system_record`, in log order).
        Raises MetadataRecordError for a record this build cannot read: dispatch then stays
        at it (and says so) rather than go on with tables that would differ from the log."""
        appended = self._take_appended(record.commit_log_offset) if self._appended else None
        change = decode(record.op, record.body) if appended is None else appended
        with self._write_lock:
            if record.queue_offset < self._applied.queue_offset:
                self._passed(change, record.commit_log_offset)
                return None  # in the tables already (a bootstrap from the master took it)
            if record.queue_offset > self._applied.queue_offset and \
                    not (isinstance(change, MetadataSnapshot) and change.part == 0):
                self._lacking = True  # records below it are not in the tables
            if type(change) is OffsetSet:
                # The hot path (every commit, on every replica): applied and passed in one
                # hold of the offset table's lock.
                self._check_open()
                self._offsets.apply_passed(
                    OffsetKey(change.group_name, change.topic, change.queue_id),
                    change.queue_offset, reset=change.reset, now_ms=change.at_ms,
                    log_offset=record.commit_log_offset)
                self._applied = AppliedPosition(record.queue_offset + 1,
                                                record.commit_log_offset, self._clock_ms())
                return change
            if not isinstance(change, MetadataSnapshot) or self._loads(change, record):
                self.apply_change(change)
            self._passed(change, record.commit_log_offset)  # after: never a step back
            # Every record moves it: plain ints, a LogPosition only for who reads it.
            self._applied = AppliedPosition(record.queue_offset + 1, record.commit_log_offset,
                                            self._clock_ms())
            if not isinstance(change, OffsetSet) and not self._snapshot_loading:
                # Topic and group rows are durable at once: so is the position that says they
                # hold this record (with the offsets before it), or a power cut that takes the
                # record from the log would leave its rows where no rebuild looks for them
                # (store/system_feed.py checks the record at the persisted position).
                self.flush_consumer_offsets()
        return change

    def apply_offset_run(self, records: Sequence[SystemRecord]) -> int:
        """`apply_record` for a run of offset.set records (dispatch's run of consecutive ones),
        in one hold of the locks and one position move: exactly the tables and position that
        applying them one by one gives. Returns how many it applied: all of them, or those
        before the first it cannot decode (the caller hands that one to `apply_record`, which
        raises as it would have)."""
        self._check_open()
        kept = self._kept_run(records) if self._appended else None
        changes: list[OffsetSet] = []
        for index, record in enumerate(records):
            change = kept[index] if kept is not None else None
            if change is None:
                try:
                    decoded = decode(record.op, record.body)
                except MetadataRecordError:
                    break
                if type(decoded) is not OffsetSet:
                    break
                change = decoded
            changes.append(change)
        if kept is not None:
            self._take_appended_run(records[:len(changes)])
        if not changes:
            return 0
        with self._write_lock:
            next_queue_offset = self._applied.queue_offset
            last_offset = -1
            steps: list[OffsetStep] = []
            for record, change in zip(records, changes, strict=False):  # a prefix applies
                applies = record.queue_offset >= next_queue_offset
                if applies:  # else in the tables already (a bootstrap took it): passed only
                    if record.queue_offset > next_queue_offset:
                        self._lacking = True  # records below it are not in the tables
                    next_queue_offset = record.queue_offset + 1
                    last_offset = record.commit_log_offset
                steps.append((OffsetKey(change.group_name, change.topic, change.queue_id),
                              change.queue_offset, change.reset, change.at_ms,
                              record.commit_log_offset, applies))
            self._offsets.apply_run(steps)
            if last_offset >= 0:
                self._applied = AppliedPosition(next_queue_offset, last_offset,
                                                self._clock_ms())
        return len(changes)

    def apply_ahead(self, change: OffsetSet, log_offset: int) -> None:
        """A forward commit whose record this broker just appended at `log_offset`: readers
        see it from now on, before dispatch applies the record (MetadataLog: the commit's
        answer does not wait for that apply). Nothing when the record is applied already or
        what readers see is as far. Never persisted from here: the persister writes only
        applied entries; the apply of the record takes over (`passed`), and a cut of the log
        that removes the record drops it (`cut_ahead`)."""
        assert not change.reset, "a reset applies on the dispatch path only"
        applied = self._applied
        if applied.queue_offset > 0 and applied.commit_log_offset >= log_offset:
            return  # dispatch applied it (and maybe later records) already
        with self._appended_lock:
            if len(self._appended) < APPENDED_CHANGES_MAX:
                self._appended[log_offset] = change
        self._offsets.apply_ahead(OffsetKey(change.group_name, change.topic, change.queue_id),
                                  change.queue_offset, now_ms=change.at_ms,
                                  log_offset=log_offset)

    def _take_appended(self, log_offset: int) -> OffsetSet | None:
        """The change kept for the record at `log_offset`, if any; kept changes whose records
        dispatch passed before they were kept (it was faster than the appender) go: they are
        kept in log order, so from the first on."""
        with self._appended_lock:
            appended = self._appended
            change = appended.pop(log_offset, None)
            while appended:
                first = next(iter(appended))
                if first >= log_offset:
                    break
                del appended[first]
            return change

    def _kept_run(self, records: Sequence[SystemRecord]) -> list[OffsetSet | None]:
        """The change kept for each record of a run, if any (taken once applied)."""
        with self._appended_lock:
            appended = self._appended
            return [appended.get(record.commit_log_offset) for record in records]

    def _take_appended_run(self, records: Sequence[SystemRecord]) -> None:
        """`_take_appended` for each record of a run, in one hold of the lock."""
        with self._appended_lock:
            appended = self._appended
            for record in records:
                log_offset = record.commit_log_offset
                appended.pop(log_offset, None)
                while appended:
                    first = next(iter(appended))
                    if first >= log_offset:
                        break
                    del appended[first]

    def _passed(self, change: MetadataChange, log_offset: int) -> None:
        """The record at `log_offset` is applied: a commit shown ahead of it goes."""
        if isinstance(change, OffsetSet):
            self._offsets.passed(OffsetKey(change.group_name, change.topic,
                                           change.queue_id), log_offset)

    def cut_ahead(self, log_offset: int) -> None:
        """The log was cut back to `log_offset` (store/system_feed.py): commits shown ahead
        of their records' apply go when the cut removed their records."""
        self._offsets.cut_ahead(log_offset)
        with self._appended_lock:
            for offset in [offset for offset in self._appended if offset >= log_offset]:
                del self._appended[offset]

    def apply_derived(self, record: SystemRecord, moved: Sequence[OffsetSet]) -> None:
        """A record of the metadata topic that another layer applies (group consumption's
        pop records, store/consumption/records.py): the tables take only the group offsets
        it moved (`moved`, derived from it in log order on every replica) and move their
        position past it, so that a restart does not hand it to `apply_record`."""
        with self._write_lock:
            if record.queue_offset < self._applied.queue_offset:
                return
            if record.queue_offset > self._applied.queue_offset:
                self._lacking = True  # records below it are not in the tables
            for change in moved:
                self.apply_change(change)
            self._applied = AppliedPosition(record.queue_offset + 1, record.commit_log_offset,
                                            self._clock_ms())

    def _loads(self, part: MetadataSnapshot, record: SystemRecord) -> bool:
        """Whether a snapshot part is loaded into the tables. Where they applied the record
        before its part 0 they hold the snapshot already (it is exact: app/broker/
        metadata_snapshots.py), so its parts pass as nothing: no rewrite, and no moment with
        half the tables. Where they did not (a rebuild that starts at it), every part is
        loaded, and the position is persisted only with the last: a crash midway finds the
        tables reset and rebuilds them again. Either way, a snapshot whose parts all came in
        order becomes the last whole one, persisted with the position."""
        queue_offset = record.queue_offset
        if part.part == 0:
            self._snapshot_loading = (queue_offset != self._applied.queue_offset
                                      or self._lacking)
            self._snapshot_arriving = SnapshotAt(queue_offset, record.commit_log_offset,
                                                 part.parts)
        loading = self._snapshot_loading
        if part.part == part.parts - 1:
            arriving = self._snapshot_arriving
            if arriving is not None and arriving.parts == part.parts and \
                    arriving.queue_offset + part.part == queue_offset:
                self._snapshot_at = arriving
            self._snapshot_arriving = None
            self._snapshot_loading = False
            if loading:
                self._lacking = False
        return loading

    @property
    def applied_snapshot(self) -> SnapshotAt | None:
        """The last whole snapshot among the records applied (None: not known): a start
        hands it to the feed, which then need not read the log back to find it."""
        return self._snapshot_at

    def reset_applied_state(self) -> None:
        """The log lost records these tables applied: empty the tables its records fill and
        go back to its start, so that its records, applied again, give exactly its state
        (store/system_feed.py). Offsets committed but not persisted go too: they came from
        records as well."""
        self._check_open()
        with self._write_lock:
            now_ms = self._clock_ms()
            apply.clear_applied(self._engine, now_ms)
            self._offsets = ConsumerOffsetTable(())
            self._view.replace_topics(())
            self._view.replace_groups(())
            self._snapshot_loading = self._lacking = False
            self._snapshot_at = self._snapshot_arriving = None
            self._applied = AppliedPosition(0, 0, now_ms)
            self._persisted_position_queue_offset = 0

    def bootstrap_position(self, position: LogPosition) -> None:
        """After taking a master's tables (slave sync's bootstrap): records below `position`
        are in them, and apply from there on; persisted at once."""
        with self._write_lock:
            if position.queue_offset > self._applied.queue_offset:
                self._applied = AppliedPosition.of(position)
                self._lacking = False  # the master's tables: all it applied below there
                # Snapshots below the position were not applied here: the last is not known.
                self._snapshot_at = self._snapshot_arriving = None
                apply.write_log_position(self._engine, position, None)
                self._persisted_position_queue_offset = position.queue_offset

    def apply_change(self, change: MetadataChange) -> None:
        """Apply one change to the tables: a pure function of the tables and the change."""
        self._check_open()
        with self._write_lock:
            if isinstance(change, OffsetSet):
                self._offsets.apply(OffsetKey(change.group_name, change.topic, change.queue_id),
                                    change.queue_offset, reset=change.reset,
                                    now_ms=change.at_ms)
            elif isinstance(change, TopicPut):
                self._view.put_topic(apply.put_topic(self._engine, change))
            elif isinstance(change, TopicsPut):
                for config in apply.put_topics(self._engine, change.topics):
                    self._view.put_topic(config)
            elif isinstance(change, TopicDelete):
                apply.delete_topic(self._engine, change)
                self._view.drop_topic(change.name)
                self._offsets.forget(topic=change.name)
            elif isinstance(change, GroupPut):
                self._view.put_group(apply.put_group(self._engine, change))
            elif isinstance(change, GroupDelete):
                apply.delete_group(self._engine, change)
                self._view.drop_group(change.name)
                self._offsets.forget(group_name=change.name)
            elif isinstance(change, MetadataSnapshot):
                self._apply_snapshot(change)
            else:
                raise AssertionError(f"unknown change {change!r}")

    def _apply_snapshot(self, snapshot: MetadataSnapshot) -> None:
        """A snapshot part: part 0 makes the tables its own, later parts add theirs."""
        topics_written, groups_written, offsets_written = apply.put_snapshot(self._engine,
                                                                             snapshot)
        if snapshot.part == 0:
            self._offsets = ConsumerOffsetTable(())
            self._view.replace_topics(())
            self._view.replace_groups(())
        for topic in topics_written:
            self._view.put_topic(topic)
        for group in groups_written:
            self._view.put_group(group)
        self._offsets.put_persisted(offsets_written)  # written with the rows

    def snapshot_tables(self) -> tuple[int, tuple[list[TopicPut], list[GroupPut],
                                                  list[OffsetSet]]]:
        """The tables as a snapshot holds them (app/broker/metadata_snapshots.py) and the
        position they are applied to (the next metadata record's queue offset), read in one
        hold of the write lock: no record applies in between."""
        self._check_open()
        with self._write_lock:
            topics = [TopicPut(t.name, t.read_queue_count, t.write_queue_count, t.permission,
                               t.created_at_ms, t.updated_at_ms) for t in self._view.topics()]
            groups = [GroupPut(g.name, g.consume_enabled, g.broadcast_enabled,
                               g.retry_queue_count, g.retry_times_max, g.created_at_ms,
                               g.updated_at_ms, g.backoff, g.fifo) for g in self._view.groups()]
            offsets = [OffsetSet(o.group_name, o.topic, o.queue_id, o.queue_offset, True,
                                 o.updated_at_ms) for o in self._offsets.entries()]
            return self._applied.queue_offset, (topics, groups, offsets)

"""Dispatch's hand-off of the log's metadata records to a broker's layers (on the dispatch
thread, in log order, on every replica): the tables (MetadataStore), group consumption's
registry and the writable queue counts. Consumer offset commits, the records of every commit
on every replica, come in runs (dispatch hands its consecutive plain records at once): a run
of them is applied in one go, with exactly the state record by record would give."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.broker import pop_snapshots
from app.broker.consumption import GroupConsumption, deleted_group
from app.broker.writable_topics import WritableTopics
from store.consumption.records import is_pop_op
from store.dispatch import SystemRecord, SystemRunStopped
from store.metadata import MetadataStore
from store.metadata.log_records import (
    OP_GROUP_DELETE,
    OP_OFFSET_SET,
    TopicDelete,
    TopicPut,
    TopicsPut,
)


class SystemRecords:
    def __init__(self, metadata_store: Callable[[], MetadataStore],
                 consumption: GroupConsumption, writable_topics: WritableTopics) -> None:
        self._metadata_store = metadata_store
        self._consumption = consumption
        self._writable_topics = writable_topics

    def apply(self, record: SystemRecord) -> None:
        """Dispatch's hand-off of a metadata record (on the dispatch thread, in log order)."""
        metadata_store = self._metadata_store()
        if is_pop_op(record.op):
            pop_snapshots.follow(self._consumption, record, None)
            moved = self._consumption.apply_record(record)
            metadata_store.apply_derived(record, moved)
            return
        if record.op == OP_GROUP_DELETE:  # its states go first (GroupConsumption.drop_group)
            self._consumption.drop_group(deleted_group(record.body))
        change = metadata_store.apply_record(record)
        pop_snapshots.follow(self._consumption, record, change)
        if isinstance(change, TopicPut):
            self._writable_topics.changed(change.name, change.write_queue_count)
        elif isinstance(change, TopicsPut):
            for topic in change.topics:
                self._writable_topics.changed(topic.name, topic.write_queue_count)
        elif isinstance(change, TopicDelete):
            self._writable_topics.deleted(change.name)

    def apply_run(self, records: Sequence[SystemRecord]) -> None:
        """Dispatch's hand-off of a run of records (none a topic delete or a snapshot part),
        in log order: consecutive offset commits in one apply of the tables
        (MetadataStore.apply_offset_run), the others one by one (`apply`). Raises
        SystemRunStopped at the first that fails, the records before it applied."""
        metadata_store = self._metadata_store()
        done, count = 0, len(records)
        try:
            while done < count:
                end = done
                while end < count and records[end].op == OP_OFFSET_SET:
                    end += 1
                if end > done:
                    run = records[done:end]
                    applied = metadata_store.apply_offset_run(run)
                    pop_snapshots.follow_run(self._consumption, run[:applied])
                    done += applied
                    if applied == len(run):
                        continue
                # One that is not an offset commit, or one the run could not decode (which
                # raises here as it would alone).
                self.apply(records[done])
                done += 1
        except Exception as error:
            raise SystemRunStopped(done, error) from error

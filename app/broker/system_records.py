"""Dispatch's hand-off of the log's metadata records to a broker's layers (on the dispatch
thread, in log order, on every replica): the tables (MetadataStore), group consumption's
registry and the writable queue counts."""

from __future__ import annotations

from collections.abc import Callable

from app.broker import pop_snapshots
from app.broker.consumption import GroupConsumption
from app.broker.writable_topics import WritableTopics
from store.consumption.records import is_pop_op
from store.dispatch import SystemRecord
from store.metadata import MetadataStore
from store.metadata.log_records import TopicDelete, TopicPut, TopicsPut


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
        change = metadata_store.apply_record(record)
        pop_snapshots.follow(self._consumption, record, change)
        if isinstance(change, TopicPut):
            self._writable_topics.changed(change.name, change.write_queue_count)
        elif isinstance(change, TopicsPut):
            for topic in change.topics:
                self._writable_topics.changed(topic.name, topic.write_queue_count)
        elif isinstance(change, TopicDelete):
            self._writable_topics.deleted(change.name)

"""Dispatch's hand-off of a metadata record on a broker (on the dispatch thread, in log
order): a pop record goes to group consumption, which derives the group offsets it moved for
the tables; any other record to the tables, then to group consumption's following of
snapshots, and a topic change or delete to the cache of writable topics."""

from __future__ import annotations

from app.broker import pop_snapshots
from app.broker.consumption import GroupConsumption
from app.broker.writable_topics import WritableTopics
from store.consumption.records import is_pop_op
from store.dispatch import SystemRecord
from store.metadata import MetadataStore
from store.metadata.log_records import TopicDelete, TopicPut, TopicsPut


def apply_system_record(metadata: MetadataStore, consumption: GroupConsumption,
                        writable_topics: WritableTopics, record: SystemRecord) -> None:
    """Dispatch's hand-off of a metadata record (on the dispatch thread, in log order)."""
    if is_pop_op(record.op):
        pop_snapshots.follow(consumption, record, None)
        moved = consumption.apply_record(record)
        metadata.apply_derived(record, moved)
        return
    change = metadata.apply_record(record)
    pop_snapshots.follow(consumption, record, change)
    if isinstance(change, TopicPut):
        writable_topics.changed(change.name, change.write_queue_count)
    elif isinstance(change, TopicsPut):
        for topic in change.topics:
            writable_topics.changed(topic.name, topic.write_queue_count)
    elif isinstance(change, TopicDelete):
        writable_topics.deleted(change.name)

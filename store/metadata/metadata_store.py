"""MetadataStore: the broker's one handle on its metadata (engine, caches, offset persister).

The store serializes every database write behind one lock: SQLite has a single writer anyway,
and it keeps the in-memory offset table, the topic and group view (store/metadata/view.py) and
the database in step. Reads of topics, groups and offsets never query: they come from the view
and the offset table, which every write keeps current. Two writes stay off that lock because
they are hot: an offset commit for a queue already known, and a produce-time topic check for a
topic already known.
"""

from store.metadata.store_base import (
    DEFAULT_CONSUMER_OFFSET_PERSIST_INTERVAL_MS,
    MetadataStoreState,
)
from store.metadata.store_groups import GroupsMixin
from store.metadata.store_log import LogRecordsMixin
from store.metadata.store_offsets import OffsetsMixin
from store.metadata.store_plans import PlansMixin
from store.metadata.store_sync import SyncMixin
from store.metadata.store_topics import TopicsMixin

__all__ = ["DEFAULT_CONSUMER_OFFSET_PERSIST_INTERVAL_MS", "MetadataStore", "MetadataStoreState"]


class MetadataStore(TopicsMixin, GroupsMixin, OffsetsMixin, LogRecordsMixin, PlansMixin,
                    SyncMixin):
    """Topics, groups, consumer and delay offsets of one broker, in the database at a URL."""

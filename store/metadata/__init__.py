"""Broker metadata in a SQL database: topics, subscription groups, consumer and delay offsets.

These are the four tables RocketMQ's SlaveSynchronize copies from master to slave. SQLite in the
data dir is the default; any SQLAlchemy URL works. Schema changes are Alembic migrations
(migrations/ at the repository root), applied by upgrade_to_head at start.

The broker uses MetadataStore; the repository functions (keyword-only, each one transaction)
are for tools and tests.
"""

from __future__ import annotations

from store.metadata.database import (
    DATABASE_FILE_NAME,
    create_metadata_engine,
    sqlite_database_url,
)
from store.metadata.delay_offsets import (
    get_delay_offset,
    list_delay_offsets,
    set_delay_offset,
    set_delay_offsets,
)
from store.metadata.errors import (
    GroupAlreadyExists,
    GroupNotFound,
    GroupsMaxReached,
    InvalidBackoff,
    InvalidDelayLevel,
    InvalidExport,
    InvalidGroupName,
    InvalidOffset,
    InvalidPermission,
    InvalidQueueCount,
    InvalidQueueId,
    InvalidRetryTimes,
    InvalidTopicName,
    MetadataError,
    MetadataStoreStateError,
    OffsetMovesBackwards,
    QueuesPerTopicMaxExceeded,
    TopicAlreadyExists,
    TopicNotFound,
    TopicNotWritable,
    TopicsMaxReached,
    WriteQueuesExceedReadQueues,
)
from store.metadata.groups import (
    create_group,
    delete_group,
    find_group,
    get_group,
    list_groups,
    update_group,
)
from store.metadata.metadata_store import MetadataStore, MetadataStoreState
from store.metadata.migrate import downgrade_to_base, head_revision, upgrade_to_head
from store.metadata.models import (
    READ_WRITE,
    ConsumerOffset,
    DataVersion,
    DelayOffset,
    SubscriptionGroup,
    TopicConfig,
    TopicPermission,
)
from store.metadata.offsets import (
    OffsetKey,
    commit_consumer_offset,
    get_consumer_offset,
    list_consumer_offsets,
    persist_consumer_offsets,
    reset_consumer_offset,
)
from store.metadata.rules import (
    DEFAULT_QUEUE_COUNT,
    DELAY_LEVEL_MAX,
    DELAY_LEVEL_MIN,
    DELAY_LEVEL_NAMES,
    QUEUE_COUNT_MAX,
    delay_level_duration_ms,
)
from store.metadata.sync import (
    TableExport,
    export_table,
    import_delay_offsets,
    import_groups,
    import_topics,
    merge_consumer_offsets,
)
from store.metadata.topics import (
    NewTopic,
    create_topic,
    create_topics,
    delete_topic,
    ensure_writable_topic,
    find_topic,
    get_topic,
    list_topics,
    update_topic,
)
from store.metadata.versions import MetadataTable, get_data_version, get_data_versions

__all__ = [
    "DATABASE_FILE_NAME",
    "DEFAULT_QUEUE_COUNT",
    "DELAY_LEVEL_MAX",
    "DELAY_LEVEL_MIN",
    "DELAY_LEVEL_NAMES",
    "QUEUE_COUNT_MAX",
    "READ_WRITE",
    "ConsumerOffset",
    "DataVersion",
    "DelayOffset",
    "GroupAlreadyExists",
    "GroupNotFound",
    "GroupsMaxReached",
    "InvalidDelayLevel",
    "InvalidExport",
    "InvalidGroupName",
    "InvalidOffset",
    "InvalidPermission",
    "InvalidQueueCount",
    "InvalidQueueId",
    "InvalidBackoff",
    "InvalidRetryTimes",
    "InvalidTopicName",
    "MetadataError",
    "MetadataStore",
    "MetadataStoreState",
    "MetadataStoreStateError",
    "MetadataTable",
    "NewTopic",
    "OffsetKey",
    "OffsetMovesBackwards",
    "QueuesPerTopicMaxExceeded",
    "SubscriptionGroup",
    "TableExport",
    "TopicAlreadyExists",
    "TopicConfig",
    "TopicNotFound",
    "TopicNotWritable",
    "TopicPermission",
    "TopicsMaxReached",
    "WriteQueuesExceedReadQueues",
    "commit_consumer_offset",
    "create_group",
    "create_metadata_engine",
    "create_topic",
    "create_topics",
    "delay_level_duration_ms",
    "delete_group",
    "delete_topic",
    "downgrade_to_base",
    "ensure_writable_topic",
    "export_table",
    "find_group",
    "find_topic",
    "get_consumer_offset",
    "get_data_version",
    "get_data_versions",
    "get_delay_offset",
    "get_group",
    "get_topic",
    "head_revision",
    "import_delay_offsets",
    "import_groups",
    "import_topics",
    "list_consumer_offsets",
    "list_delay_offsets",
    "list_groups",
    "list_topics",
    "merge_consumer_offsets",
    "persist_consumer_offsets",
    "reset_consumer_offset",
    "set_delay_offset",
    "set_delay_offsets",
    "sqlite_database_url",
    "update_group",
    "update_topic",
    "upgrade_to_head",
]

"""twinlog's message store: commit log, consume queues, flush, recovery, retention.

Knows nothing of HTTP or replication sockets; replication plugs in via `ReplicationGuard`.
"""

from store.config import StoreConfig
from store.errors import (
    ConfigError,
    OffsetNotAvailableError,
    StoreCorruptError,
    StoreError,
    StoreStateError,
)
from store.files.disk import Disk
from store.health import StoreHealth, WriteFault
from store.message_store import MessageStore
from store.reads import GetMessagesResult, GetMessageStatus
from store.record import Message, RecordHead, StoredMessage
from store.recovery import RecoveryReport
from store.replication_guard import ReplicationGuard
from store.status import (
    AppendRawStatus,
    BrokerRole,
    FlushDiskType,
    PutMessageResult,
    PutMessageStatus,
)
from store.store_lifecycle import Lifecycle
from store.waits.completion import PutCompletion

__all__ = [
    "AppendRawStatus",
    "BrokerRole",
    "ConfigError",
    "Disk",
    "FlushDiskType",
    "GetMessageStatus",
    "GetMessagesResult",
    "Lifecycle",
    "Message",
    "MessageStore",
    "OffsetNotAvailableError",
    "PutCompletion",
    "PutMessageResult",
    "PutMessageStatus",
    "RecordHead",
    "RecoveryReport",
    "ReplicationGuard",
    "StoreConfig",
    "StoreCorruptError",
    "StoreError",
    "StoreHealth",
    "StoreStateError",
    "StoredMessage",
    "WriteFault",
]

"""Expected outcomes of a put, as RocketMQ names them (reference section 3)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from store.identity_enum import IdentityEnum


class PutMessageStatus(IdentityEnum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    # DLedger mode: appended on the leader, but no quorum confirmed it by the deadline (or the
    # leader stepped down meanwhile): it may still commit, or be lost (indeterminate).
    COMMIT_INDETERMINATE = "COMMIT_INDETERMINATE"

    @property
    def is_stored(self) -> bool:
        """True when the message is in the master's commit log (RocketMQ's isOk())."""
        return self in _STORED


_STORED = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
        PutMessageStatus.COMMIT_INDETERMINATE,
    }
)


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class AppendRawStatus(enum.Enum):
    """Outcome of appending replicated bytes at an expected offset (the slave's write)."""

    OK = "OK"
    OFFSET_MISMATCH = "OFFSET_MISMATCH"
    SPANS_FILES = "SPANS_FILES"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    STORE_NOT_WRITABLE = "STORE_NOT_WRITABLE"  # an msync/fsync failed: see store/health.py


@dataclass(slots=True)
class PutMessageResult:
    """What an append did. `msg_id` is derived on demand: it is off the hot path."""

    status: PutMessageStatus
    queue_id: int = -1
    queue_offset: int = -1
    commit_log_offset: int = -1
    wrote_bytes: int = 0
    store_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    detail: str = ""

    @property
    def msg_id(self) -> str:
        """RocketMQ's offset message id: store host (ip, port) and commit-log offset, in hex."""
        if self.commit_log_offset < 0:
            return ""
        return (self.store_host + self.commit_log_offset.to_bytes(8, "big")).hex().upper()

    @property
    def end_offset(self) -> int:
        return self.commit_log_offset + self.wrote_bytes

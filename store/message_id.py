"""Message ids: RocketMQ's offset msg id, the STOREHOST (IPv4 + port, 8 bytes) and the record's
commit-log offset (8 bytes), as 32 upper-case hex digits; and finding a record by its id.

An id names the record that starts at its offset and carries its STOREHOST: the lookup reads
the record there and checks both, so an offset inside a record, past the log or removed by
retention, and an id of another broker, all answer NOT_FOUND rather than another message.
"""

from __future__ import annotations

import enum
import string
from dataclasses import dataclass

from store.commit_log import CommitLog
from store.errors import OffsetNotAvailableError
from store.record import RecordError, StoredMessage

MSG_ID_HEX_LENGTH = 32
# What `parse_msg_id` accepts, for the HTTP spec: 16 hex digits of host, then 16 of a
# non-negative signed 64-bit offset (its first digit 0-7).
MSG_ID_PATTERN = r"^[0-9A-Fa-f]{16}[0-7][0-9A-Fa-f]{15}$"
_HOST_SIZE_BYTES = 8
_HEX_DIGITS = frozenset(string.hexdigits)


class LookupStatus(enum.Enum):
    FOUND = "FOUND"
    MALFORMED_ID = "MALFORMED_ID"
    NOT_FOUND = "NOT_FOUND"


@dataclass(frozen=True, slots=True)
class MessageId:
    store_host: bytes
    commit_log_offset: int


@dataclass(frozen=True, slots=True)
class LookupResult:
    status: LookupStatus
    message: StoredMessage | None = None


def parse_msg_id(text: str) -> MessageId | None:
    """The id's host and offset, or None when it is not 32 hex digits naming an offset."""
    if len(text) != MSG_ID_HEX_LENGTH or not _HEX_DIGITS.issuperset(text):
        return None
    raw = bytes.fromhex(text)
    offset = int.from_bytes(raw[_HOST_SIZE_BYTES:], "big", signed=True)
    if offset < 0:
        return None
    return MessageId(raw[:_HOST_SIZE_BYTES], offset)


def find_by_msg_id(commit_log: CommitLog, text: str) -> LookupResult:
    """Ids are made by `StoredMessage.msg_id`; this is its inverse, checked on the record."""
    msg_id = parse_msg_id(text)
    if msg_id is None:
        return LookupResult(LookupStatus.MALFORMED_ID)
    try:
        message = commit_log.read_record(msg_id.commit_log_offset)
    except (OffsetNotAvailableError, RecordError):
        return LookupResult(LookupStatus.NOT_FOUND)
    if (message.commit_log_offset != msg_id.commit_log_offset
            or message.store_host != msg_id.store_host):
        return LookupResult(LookupStatus.NOT_FOUND)
    return LookupResult(LookupStatus.FOUND, message)

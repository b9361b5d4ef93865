"""Errors of the metadata layer: each names what was wrong, and nothing was written.

Every class carries a stable `error_code` so that the gateway can map all of them in one table
(DESIGN: exceptions are mapped at one boundary) without parsing messages.
"""

from __future__ import annotations

from typing import ClassVar


class MetadataError(Exception):
    """A metadata request was refused; the database and the in-memory state are unchanged."""

    error_code: ClassVar[str] = "METADATA_ERROR"
    # The broker setting that bounds what was refused, for errors that are a limit being hit.
    setting: ClassVar[str | None] = None


class InvalidTopicName(MetadataError):
    error_code = "INVALID_TOPIC_NAME"


class InvalidGroupName(MetadataError):
    error_code = "INVALID_GROUP_NAME"


class InvalidQueueCount(MetadataError):
    error_code = "INVALID_QUEUE_COUNT"


class WriteQueuesExceedReadQueues(MetadataError):
    """More write queues than read queues: messages in the extra ones could not be read."""

    error_code = "WRITE_QUEUES_EXCEED_READ_QUEUES"


class InvalidQueueId(MetadataError):
    error_code = "INVALID_QUEUE_ID"


class QueuesPerTopicMaxExceeded(InvalidQueueCount):
    """More queues than the broker's `queues_per_topic_max` setting allows."""

    error_code = "QUEUES_PER_TOPIC_MAX_EXCEEDED"
    setting = "queues_per_topic_max"


class InvalidPermission(MetadataError):
    error_code = "INVALID_PERMISSION"


class InvalidRetryTimes(MetadataError):
    error_code = "INVALID_RETRY_TIMES"


class InvalidBackoff(MetadataError):
    error_code = "INVALID_BACKOFF"


class InvalidOffset(MetadataError):
    error_code = "INVALID_OFFSET"


class OffsetMovesBackwards(InvalidOffset):
    """A commit below the current offset; only an explicit reset may move an offset back."""

    error_code = "OFFSET_MOVES_BACKWARDS"


class InvalidDelayLevel(MetadataError):
    error_code = "INVALID_DELAY_LEVEL"


class TopicNotFound(MetadataError):
    error_code = "TOPIC_NOT_FOUND"


class TopicAlreadyExists(MetadataError):
    error_code = "TOPIC_ALREADY_EXISTS"


class TopicsMaxReached(MetadataError):
    """The broker holds `topics_max` topics already: a new one is refused, nothing is written."""

    error_code = "TOPICS_MAX_REACHED"
    setting = "topics_max"


class TopicNotWritable(MetadataError):
    error_code = "TOPIC_NOT_WRITABLE"


class GroupNotFound(MetadataError):
    error_code = "GROUP_NOT_FOUND"


class GroupAlreadyExists(MetadataError):
    error_code = "GROUP_ALREADY_EXISTS"


class GroupsMaxReached(MetadataError):
    """The broker holds `groups_max` groups already: a new one (created, or by an offset
    commit) is refused, nothing is written."""

    error_code = "GROUPS_MAX_REACHED"
    setting = "groups_max"


class InvalidExport(MetadataError):
    """Exported table data (from a master) that cannot be applied as it is."""

    error_code = "INVALID_EXPORT"


class MetadataStoreStateError(RuntimeError):
    """The MetadataStore was used out of its lifecycle order: a bug in the caller."""

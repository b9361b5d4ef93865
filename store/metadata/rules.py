"""Input rules for metadata: each check raises a clear MetadataError before anything is written."""

from __future__ import annotations

import re

from store.consumption.policy import Backoff
from store.metadata.errors import (
    InvalidBackoff,
    InvalidDelayLevel,
    InvalidGroupName,
    InvalidOffset,
    InvalidPermission,
    InvalidQueueCount,
    InvalidQueueId,
    InvalidRetryTimes,
    InvalidTopicName,
    QueuesPerTopicMaxExceeded,
    WriteQueuesExceedReadQueues,
)
from store.metadata.models import READ_WRITE
from store.system_topics import SYSTEM_TOPIC_PREFIX, is_system_topic
from store.topic import topic_problem

# Every queue has its own consume-queue files, so the count per topic is bounded.
QUEUE_COUNT_MAX = 1024
DEFAULT_QUEUE_COUNT = 4
# RocketMQ's Validators.checkGroup: the topic character set, up to 255 characters.
GROUP_NAME_LENGTH_MAX = 255
_GROUP_NAME_PATTERN = re.compile(r"[A-Za-z0-9_%|-]+")
RETRY_TIMES_MAX = 128
# Offsets travel as JSON integers, which are exact only below 2^53 (DESIGN, HTTP API).
QUEUE_OFFSET_LIMIT = 2**53
# RocketMQ's messageDelayLevel default: level n (1-based) waits DELAY_LEVEL_NAMES[n - 1].
DELAY_LEVEL_NAMES = (
    *("1s", "5s", "10s", "30s"),
    *("1m", "2m", "3m", "4m", "5m", "6m", "7m", "8m", "9m", "10m", "20m", "30m"),
    *("1h", "2h"),
)
DELAY_LEVEL_MIN = 1
DELAY_LEVEL_MAX = len(DELAY_LEVEL_NAMES)
_DURATION_UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000}


def delay_level_duration_ms(delay_level: int) -> int:
    """How long a message sent with `delay_level` waits before delivery."""
    check_delay_level(delay_level)
    name = DELAY_LEVEL_NAMES[delay_level - 1]
    return int(name[:-1]) * _DURATION_UNIT_MS[name[-1]]


def check_topic_name(name: str) -> None:
    problem = topic_problem(name)
    if problem is not None:
        raise InvalidTopicName(f"invalid topic name {name!r}: {problem}")
    if is_system_topic(name):
        raise InvalidTopicName(f"invalid topic name {name!r}: names starting with "
                               f"{SYSTEM_TOPIC_PREFIX} are the broker's own")


def check_group_name(name: str) -> None:
    if not name:
        raise InvalidGroupName("invalid group name '': group name is empty")
    if len(name.encode("utf-8")) > GROUP_NAME_LENGTH_MAX:
        raise InvalidGroupName(
            f"invalid group name {name[:32]!r}...: longer than {GROUP_NAME_LENGTH_MAX} bytes"
        )
    if _GROUP_NAME_PATTERN.fullmatch(name) is None:
        raise InvalidGroupName(
            f"invalid group name {name!r}: may only contain the characters [A-Za-z0-9_%|-]"
        )


def check_queue_count(field: str, count: int, *, minimum: int = 1) -> None:
    if not minimum <= count <= QUEUE_COUNT_MAX:
        raise InvalidQueueCount(
            f"{field} must be between {minimum} and {QUEUE_COUNT_MAX}, got {count}"
        )


def check_queue_count_cap(field: str, count: int, queues_per_topic_max: int) -> None:
    """The broker's own cap on queues per topic, below the hard QUEUE_COUNT_MAX."""
    check_queue_count(field, count)
    if count > queues_per_topic_max:
        raise QueuesPerTopicMaxExceeded(
            f"{field} {count} is above this broker's queues_per_topic_max"
            f" ({queues_per_topic_max})"
        )


def check_queue_counts(read_queue_count: int, write_queue_count: int) -> None:
    """Writes go to write queues, consumers read read queues: a write queue past the read
    queues would hold acknowledged messages that no one can read."""
    if write_queue_count > read_queue_count:
        raise WriteQueuesExceedReadQueues(f"write_queue_count {write_queue_count} is more than "
                                f"read_queue_count {read_queue_count}: messages in the extra "
                                "write queues could not be read")


def check_permission(permission: int) -> None:
    if permission < 0 or permission & ~int(READ_WRITE):
        raise InvalidPermission(
            f"permission must combine READ (4) and WRITE (2) only, got {permission}"
        )


def check_retry_times_max(retry_times_max: int) -> None:
    if not 0 <= retry_times_max <= RETRY_TIMES_MAX:
        raise InvalidRetryTimes(
            f"retry_times_max must be between 0 and {RETRY_TIMES_MAX}, got {retry_times_max}"
        )


def check_backoff(backoff: str) -> None:
    """A group's backoff as stored: "" (the broker's default) or a `Backoff.text`."""
    if backoff:
        try:
            Backoff.parse(backoff)
        except ValueError as error:
            raise InvalidBackoff(str(error)) from None


def check_queue_id(queue_id: int) -> None:
    if not 0 <= queue_id < QUEUE_COUNT_MAX:
        raise InvalidQueueId(
            f"queue_id must be between 0 and {QUEUE_COUNT_MAX - 1}, got {queue_id}"
        )


def check_queue_offset(queue_offset: int) -> None:
    if not 0 <= queue_offset < QUEUE_OFFSET_LIMIT:
        raise InvalidOffset(f"offset must be between 0 and 2^53 - 1, got {queue_offset}")


def check_delay_level(delay_level: int) -> None:
    if not DELAY_LEVEL_MIN <= delay_level <= DELAY_LEVEL_MAX:
        raise InvalidDelayLevel(
            f"delay level must be between {DELAY_LEVEL_MIN} and {DELAY_LEVEL_MAX}"
            f" ({DELAY_LEVEL_NAMES[0]} .. {DELAY_LEVEL_NAMES[-1]}), got {delay_level}"
        )

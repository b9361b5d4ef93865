"""The names group consumption gives: its retry and dead-letter topics, and the properties of
the copies it puts there (the message's origin and the deliveries it had)."""

from __future__ import annotations

# A message's order key, set on produce as a user property: FIFO within it (SQS's
# MessageGroupId, RocketMQ 5's message group).
PROPERTY_ORDER_KEY = "MESSAGE_GROUP"
# On a retry or dead-letter copy: where the message was first stored, and its deliveries.
PROPERTY_ORIGIN_TOPIC = "TWINLOG_POP_TOPIC"
PROPERTY_ORIGIN_QUEUE_ID = "TWINLOG_POP_QUEUE_ID"
PROPERTY_ORIGIN_OFFSET = "TWINLOG_POP_QUEUE_OFFSET"
PROPERTY_ORIGIN_MSG_ID = "TWINLOG_POP_MSG_ID"
PROPERTY_ATTEMPTS = "TWINLOG_POP_ATTEMPTS"
ORIGIN_PROPERTIES = (PROPERTY_ORIGIN_TOPIC, PROPERTY_ORIGIN_QUEUE_ID, PROPERTY_ORIGIN_OFFSET,
                     PROPERTY_ORIGIN_MSG_ID, PROPERTY_ATTEMPTS)
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


def retry_topic(group: str, topic: str) -> str:
    """The retry topic of one group's consumption of one topic (RocketMQ 5's POP retry topic,
    `%RETRY%{group}_{topic}`): a receive of the topic reads it too."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def dlq_topic(group: str) -> str:
    return f"{DLQ_PREFIX}{group}"

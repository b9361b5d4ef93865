"""The topics and property names of delayed messages (see the package docstring)."""

from __future__ import annotations

from store.system_topics import SYSTEM_TOPIC_PREFIX, is_system_topic

# Delay levels: queue level - 1. Timer lanes: queue k waits timer_precision_ms * 2**k.
SCHEDULE_TOPIC = SYSTEM_TOPIC_PREFIX + "SCHEDULE"
TIMER_TOPIC = SYSTEM_TOPIC_PREFIX + "TIMER"
# Cancel markers and drop records: not a lane, never read by the scheduler.
TIMER_LOG_TOPIC = SYSTEM_TOPIC_PREFIX + "TIMER_LOG"
LANE_TOPICS = (SCHEDULE_TOPIC, TIMER_TOPIC)

# Names starting with this are the broker's; a producer may not set them.
RESERVED_PREFIX = "TWINLOG_"
# On a lane entry (the scheduled copy, or a roll): its real topic and queue, its due time,
# and when the scheduler looks at it again, in one property (store/timers/lane_entry.py).
PROPERTY_SCHEDULE = "TWINLOG_S"
# The same, as entries written before that encoding carry them (read, never written).
PROPERTY_REAL_TOPIC = "TWINLOG_REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "TWINLOG_REAL_QID"  # absent: round robin at delivery
PROPERTY_WAKE_MS = "TWINLOG_WAKE_MS"
# On a delivered message (and a cancel marker): when it was due.
PROPERTY_DUE_MS = "TWINLOG_DUE_MS"
# On a roll and a drop: the commit-log offset of the scheduled copy (the original).
PROPERTY_ORIGIN_OFFSET = "TWINLOG_ORIGIN_OFFSET"
# On a delivered message: the msg id of the scheduled copy the producer was answered.
PROPERTY_SCHEDULED_MSG_ID = "TWINLOG_SCHEDULED_MSG_ID"
PROPERTY_DROP_REASON = "TWINLOG_DROP_REASON"
# The two properties dispatch hands to the timer state (one prefix, one search a record):
# the lane entry a scheduler record consumes ("S:3:17", "T:5:2"), and a cancel's target.
STATE_PROPERTY_PREFIX = "TWINLOG_TIMER_"
PROPERTY_FROM = STATE_PROPERTY_PREFIX + "FROM"
PROPERTY_CANCEL = STATE_PROPERTY_PREFIX + "CANCEL"

# What a lane entry carries and a delivered message does not.
SCHEDULING_PROPERTIES = frozenset({
    PROPERTY_SCHEDULE, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_WAKE_MS,
    PROPERTY_ORIGIN_OFFSET,
})

DROP_CANCELLED = "cancelled"
DROP_TOPIC_MISSING = "topic_missing"
DROP_ORIGIN_GONE = "origin_gone"
DROP_REASONS = (DROP_CANCELLED, DROP_TOPIC_MISSING, DROP_ORIGIN_GONE)


def has_queue_starts(topic: str) -> bool:
    """Whether a metadata snapshot and the bootstrap pull carry the topic's queue starts: every
    user topic, and the lanes. A lane's progress (state.py) is derived from the records that
    consume its entries, which name their queue offsets; a replica whose log begins past a
    lane's last entry but holds a record consuming it would, promoted, start the lane again
    at 0, below its progress, and never deliver what it put there."""
    return not is_system_topic(topic) or topic in LANE_TOPICS

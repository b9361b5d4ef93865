"""What a lane entry (a scheduled copy, or a roll) carries to be scheduled, in one property.

`TWINLOG_S` = "<due ms>:<due ms - wake ms>:<queue id or empty>:<real topic>" (the topic last:
a name may hold anything but the property separators). One short property rather than four
named ones: a pending message costs its record's bytes in the log and in the log's mapped
pages, and these were 96 of them (names and topic) before; they are about 50 now.

Entries written before this encoding (four properties: TWINLOG_REAL_TOPIC, TWINLOG_REAL_QID,
TWINLOG_DUE_MS, TWINLOG_WAKE_MS) are read as well.
"""

from __future__ import annotations

from dataclasses import dataclass

from store.timers.names import (
    PROPERTY_DUE_MS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SCHEDULE,
    PROPERTY_WAKE_MS,
)


@dataclass(frozen=True, slots=True)
class Schedule:
    topic: str
    queue_id: int | None  # None: round robin at delivery
    due_ms: int
    wake_ms: int


def encode_schedule(schedule: Schedule) -> str:
    queue = "" if schedule.queue_id is None else str(schedule.queue_id)
    return (f"{schedule.due_ms}:{schedule.due_ms - schedule.wake_ms}:{queue}:"
            f"{schedule.topic}")


def schedule_of(properties: dict[str, str]) -> Schedule | None:
    """The entry's schedule; None when it carries none (not a lane entry, or damaged)."""
    text = properties.get(PROPERTY_SCHEDULE)
    try:
        if text is not None:
            due, before_due, queue, topic = text.split(":", 3)
            due_ms = int(due)
            return Schedule(topic, int(queue) if queue else None, due_ms,
                            due_ms - int(before_due))
        due_text = properties.get(PROPERTY_DUE_MS)
        real_topic = properties.get(PROPERTY_REAL_TOPIC)
        if due_text is None or real_topic is None:
            return None
        due_ms = int(due_text)
        queue_text = properties.get(PROPERTY_REAL_QUEUE_ID)
        wake_text = properties.get(PROPERTY_WAKE_MS)
        return Schedule(real_topic, int(queue_text) if queue_text is not None else None, due_ms,
                        int(wake_text) if wake_text is not None else due_ms)
    except ValueError:
        return None


def with_schedule(properties: dict[str, str], schedule: Schedule) -> dict[str, str]:
    """`properties` (a producer's, without the broker's) and the schedule."""
    scheduled = dict(properties)
    scheduled[PROPERTY_SCHEDULE] = encode_schedule(schedule)
    return scheduled

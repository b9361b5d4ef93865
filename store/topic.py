"""Topic name rules shared by the store, the metadata and the gateway."""

from __future__ import annotations

import re

TOPIC_LENGTH_MAX = 127
_TOPIC_PATTERN = re.compile(r"[A-Za-z0-9_%|-]+")


def topic_problem(topic: str) -> str | None:
    """Return why `topic` is not a valid topic name, or None when it is valid."""
    if not topic:
        return "topic is empty"
    if len(topic.encode("utf-8")) > TOPIC_LENGTH_MAX:
        return f"topic is longer than {TOPIC_LENGTH_MAX} bytes"
    if _TOPIC_PATTERN.fullmatch(topic) is None:
        return "topic may only contain the characters [A-Za-z0-9_%|-]"
    return None


def is_valid_topic(topic: str) -> bool:
    return topic_problem(topic) is None

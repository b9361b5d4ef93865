"""Time as an input: the metadata layer never reads the clock inside its logic."""

from __future__ import annotations

import time
from collections.abc import Callable

ClockMs = Callable[[], int]


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch, as RocketMQ's DataVersion timestamp."""
    return time.time_ns() // 1_000_000

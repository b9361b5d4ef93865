"""Now, in milliseconds: the one place the broker reads the clock for "now".

Two clocks, never mixed: `wall_ms` (Unix epoch, what is stored and shown: data versions,
timestamps, the idempotency window) and `monotonic_ms` (deadlines, ages, intervals: never goes
back). Logic that takes time as an input takes a `ClockMs` (tests pass a fake one).
"""

from __future__ import annotations

import time
from collections.abc import Callable

ClockMs = Callable[[], int]


def wall_ms() -> int:
    """Milliseconds since the Unix epoch, as RocketMQ's DataVersion timestamp."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Milliseconds on the monotonic clock (only differences mean anything)."""
    return time.monotonic_ns() // 1_000_000

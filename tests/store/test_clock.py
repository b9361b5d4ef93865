"""The one clock module: wall and monotonic milliseconds."""

from __future__ import annotations

import time

from store.clock import monotonic_ms, wall_ms


def test_wall_clock_is_integer_milliseconds() -> None:
    """The wall clock is milliseconds since the epoch, whole."""
    before_ms = time.time_ns() // 1_000_000
    now_ms = wall_ms()
    after_ms = time.time_ns() // 1_000_000
    assert isinstance(now_ms, int) and before_ms <= now_ms <= after_ms


def test_monotonic_clock_is_integer_milliseconds() -> None:
    """The monotonic clock is whole milliseconds of time.monotonic, and never goes back."""
    before_ms = time.monotonic_ns() // 1_000_000
    first_ms = monotonic_ms()
    second_ms = monotonic_ms()
    after_ms = time.monotonic_ns() // 1_000_000
    assert isinstance(first_ms, int) and before_ms <= first_ms <= second_ms <= after_ms

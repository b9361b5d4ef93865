"""The export's bandwidth budget: it reads the log no faster than `bytes_per_s`, so that on a
busy broker produce keeps its share of CPU and disk.

After each window the export tells the throttle how many bytes of log it read; when it is
ahead of the budget (bytes read / budget > time since the start), the throttle sleeps the
difference. A window is at most WINDOW_BYTES, so one sleep is at most WINDOW_BYTES /
bytes_per_s. The clock and the sleep are injected: tests drive a fake clock, never sleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]
Sleep = Callable[[float], None]


class Throttle:
    def __init__(self, bytes_per_s: float, clock: Clock = time.monotonic,
                 sleep: Sleep = time.sleep) -> None:
        """`bytes_per_s` <= 0: no budget, spend() never waits."""
        self._bytes_per_s = bytes_per_s
        self._clock = clock
        self._sleep = sleep
        self._started_s = clock()
        self._spent_bytes = 0
        self.slept_s = 0.0

    def spend(self, size_bytes: int) -> None:
        """Account for `size_bytes` of log read; wait until the budget allows them."""
        if self._bytes_per_s <= 0:
            return
        self._spent_bytes += size_bytes
        ahead_s = self._spent_bytes / self._bytes_per_s - (self._clock() - self._started_s)
        if ahead_s > 0:
            self._sleep(ahead_s)
            self.slept_s += ahead_s

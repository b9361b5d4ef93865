"""A group's retry policy: how long a released message waits, and when it is dead-lettered.

`retry_times_max` counts retries, as RocketMQ's maxReconsumeTimes does: a message is delivered
at most `retry_times_max + 1` times, and the failure of the last attempt dead-letters it (so 0,
which the group rules allow, means "no retry": the first failure dead-letters).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

SECOND_MS = 1_000
MINUTE_MS = 60 * SECOND_MS
# RocketMQ's delay levels from "10s" on (levels 3..18), the backoff of its 4.x consumer retries.
DELAY_LEVELS_MS = (
    10 * SECOND_MS, 30 * SECOND_MS, 1 * MINUTE_MS, 2 * MINUTE_MS, 3 * MINUTE_MS, 4 * MINUTE_MS,
    5 * MINUTE_MS, 6 * MINUTE_MS, 7 * MINUTE_MS, 8 * MINUTE_MS, 9 * MINUTE_MS, 10 * MINUTE_MS,
    20 * MINUTE_MS, 30 * MINUTE_MS, 60 * MINUTE_MS, 120 * MINUTE_MS,
)
BACKOFF_CAP_MS = 120 * MINUTE_MS


class BackoffKind(enum.Enum):
    TABLE = "table"  # DELAY_LEVELS_MS, the last level repeated past its end
    EXPONENTIAL = "exponential"  # initial_ms * 2^(attempt - 1), capped


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    retry_times_max: int = 16
    backoff: BackoffKind = BackoffKind.TABLE
    initial_backoff_ms: int = 5 * SECOND_MS
    backoff_cap_ms: int = BACKOFF_CAP_MS

    def __post_init__(self) -> None:
        if self.retry_times_max < 0:
            raise ValueError(f"retry_times_max must be >= 0, got {self.retry_times_max}")
        if not 0 < self.initial_backoff_ms <= self.backoff_cap_ms:
            raise ValueError("initial_backoff_ms must be > 0 and <= backoff_cap_ms")

    @property
    def attempts_max(self) -> int:
        return self.retry_times_max + 1

    def exhausted(self, attempt: int) -> bool:
        """True when a failure of delivery `attempt` (1-based) dead-letters the message."""
        return attempt >= self.attempts_max

    def backoff_ms(self, attempt: int) -> int:
        """How long a message released after delivery `attempt` waits before the next one."""
        if attempt < 1:
            raise ValueError(f"attempt is 1-based, got {attempt}")
        if self.backoff is BackoffKind.TABLE:
            return DELAY_LEVELS_MS[min(attempt, len(DELAY_LEVELS_MS)) - 1]
        shift = min(attempt - 1, 40)  # 2^40 x 1 ms is past any cap: no huge integers
        return min(self.initial_backoff_ms << shift, self.backoff_cap_ms)

"""A group's retry policy: how long a released message waits, and when it is dead-lettered.

`retry_times_max` counts retries, as RocketMQ's maxReconsumeTimes does: a message is delivered
at most `retry_times_max + 1` times, and the failure of the last attempt dead-letters it (so 0,
which the group rules allow, means "no retry": the first failure dead-letters).

A group's backoff (`Backoff`) is a setting of its own, stored with the group as its text
(`Backoff.text`, "" when unset: the broker's `pop_backoff` then applies). It is read only by the
master's decisions: a release's record carries the time it is due, so replicas apply it as is.
"""

from __future__ import annotations

import enum
import math
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
MULTIPLIER_MIN = 1.0
MULTIPLIER_MAX = 10.0
BACKOFF_TEXT_LENGTH_MAX = 64


class BackoffKind(enum.Enum):
    TABLE = "table"  # DELAY_LEVELS_MS, the last level repeated past its end
    EXPONENTIAL = "exponential"  # initial_ms * multiplier^(attempt - 1), capped at max_ms


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long a message released after delivery `attempt` waits before the next one.
    `initial_ms`, `multiplier` and `max_ms` belong to the exponential kind (the table kind
    keeps their defaults)."""

    kind: BackoffKind = BackoffKind.TABLE
    initial_ms: int = 5 * SECOND_MS
    multiplier: float = 2.0
    max_ms: int = BACKOFF_CAP_MS

    def __post_init__(self) -> None:
        if self.kind is BackoffKind.TABLE:
            if (self.initial_ms, self.multiplier, self.max_ms) != (5 * SECOND_MS, 2.0,
                                                                   BACKOFF_CAP_MS):
                raise ValueError("the table backoff takes no initial_ms, multiplier or max_ms")
            return
        if not 1 <= self.initial_ms <= self.max_ms <= BACKOFF_CAP_MS:
            raise ValueError(f"the exponential backoff needs 1 <= initial_ms <= max_ms <= "
                             f"{BACKOFF_CAP_MS}, got initial_ms {self.initial_ms} and max_ms "
                             f"{self.max_ms}")
        if not (math.isfinite(self.multiplier)
                and MULTIPLIER_MIN <= self.multiplier <= MULTIPLIER_MAX):
            raise ValueError(f"the exponential backoff's multiplier must be between "
                             f"{MULTIPLIER_MIN:g} and {MULTIPLIER_MAX:g}, got {self.multiplier}")

    @classmethod
    def exponential(cls, initial_ms: int, multiplier: float = 2.0,
                    max_ms: int = BACKOFF_CAP_MS) -> Backoff:
        return cls(BackoffKind.EXPONENTIAL, initial_ms, float(multiplier), max_ms)

    def delay_ms(self, attempt: int) -> int:
        if attempt < 1:
            raise ValueError(f"attempt is 1-based, got {attempt}")
        if self.kind is BackoffKind.TABLE:
            return DELAY_LEVELS_MS[min(attempt, len(DELAY_LEVELS_MS)) - 1]
        delay = float(self.initial_ms)
        # At most one step per attempt, and none once the cap is reached: bounded by
        # log(max_ms / initial_ms) / log(multiplier), whatever the attempt.
        for _ in range(attempt - 1):
            if delay >= self.max_ms or self.multiplier == 1.0:
                break
            delay *= self.multiplier
        return min(int(delay), self.max_ms)

    @property
    def text(self) -> str:
        """The stored form: "table", or "exponential:<initial_ms>:<multiplier>:<max_ms>"."""
        if self.kind is BackoffKind.TABLE:
            return BackoffKind.TABLE.value
        return f"{BackoffKind.EXPONENTIAL.value}:{self.initial_ms}:{self.multiplier!r}:" \
               f"{self.max_ms}"

    @classmethod
    def parse(cls, text: str) -> Backoff:
        """The backoff `text` names; ValueError (saying what is wrong) for anything else."""
        if len(text) > BACKOFF_TEXT_LENGTH_MAX:
            raise ValueError(f"a backoff of {len(text)} characters, at most "
                             f"{BACKOFF_TEXT_LENGTH_MAX}")
        kind, *values = text.split(":")
        if kind == BackoffKind.TABLE.value and not values:
            return cls()
        if kind != BackoffKind.EXPONENTIAL.value or len(values) != 3:
            raise ValueError(f"a backoff is 'table' or 'exponential:<initial_ms>:<multiplier>:"
                             f"<max_ms>', got {text!r}")
        initial, multiplier, maximum = values
        if not (initial.isdigit() and maximum.isdigit() and initial.isascii()
                and maximum.isascii()):
            raise ValueError(f"a backoff's initial_ms and max_ms are whole numbers, got {text!r}")
        try:
            factor = float(multiplier)
        except ValueError:
            raise ValueError(f"a backoff's multiplier is a number, got {text!r}") from None
        backoff = cls.exponential(int(initial), factor, int(maximum))
        if backoff.text != text:
            raise ValueError(f"a backoff not in its stored form: {text!r} (it is "
                             f"{backoff.text!r})")
        return backoff


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    retry_times_max: int = 16
    backoff: Backoff = Backoff()

    def __post_init__(self) -> None:
        if self.retry_times_max < 0:
            raise ValueError(f"retry_times_max must be >= 0, got {self.retry_times_max}")

    @property
    def attempts_max(self) -> int:
        return self.retry_times_max + 1

    def exhausted(self, attempt: int) -> bool:
        """True when a failure of delivery `attempt` (1-based) dead-letters the message."""
        return attempt >= self.attempts_max

    def backoff_ms(self, attempt: int) -> int:
        """How long a message released after delivery `attempt` waits before the next one."""
        return self.backoff.delay_ms(attempt)


def group_policy(retry_times_max: int | None, backoff: str | None,
                 default_backoff: Backoff) -> RetryPolicy:
    """A group's policy from its stored settings (None: no such group; a backoff of "": the
    broker's `default_backoff`)."""
    return RetryPolicy(16 if retry_times_max is None else retry_times_max,
                       Backoff.parse(backoff) if backoff else default_backoff)

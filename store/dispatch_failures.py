"""Consume queues that dispatch could not write, kept apart so the others go on.

An I/O error writing one queue's entries (no descriptor left, a broken directory, a full
disk) must not stop dispatch for every other topic. The failed queue stops taking entries (a
later entry would be written past the missing ones and leave a gap), is logged once, counted
and listed for `/admin/store` and `/metrics`; and dispatch's checkpoint position is held at
the batch where it first failed, so that the next start redispatches from there and rebuilds
it. Retention keeps the commit-log files from that position on for the same reason.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

# A few immediate attempts (after closing idle files) cover a passing descriptor shortage;
# an error that outlives them is not transient and waits for the next start.
WRITE_ATTEMPTS_MAX = 3


@dataclass(frozen=True, slots=True)
class QueueFailure:
    topic: str
    queue_id: int
    error: str
    failed_at_ms: int


class DispatchFailures:
    def __init__(self) -> None:
        # At most one entry per queue, and queues are bounded (topics_max x queues per topic).
        self._failed: dict[tuple[str, int], QueueFailure] = {}
        self._lock = threading.Lock()
        # (dispatched offset, last record offset) where dispatch stood before the first
        # failure: the checkpoint never passes it while a queue is failed.
        self.held_position: tuple[int, int] | None = None
        self.error_count = 0

    def is_failed(self, topic: str, queue_id: int) -> bool:
        return bool(self._failed) and (topic, queue_id) in self._failed

    def record(self, topic: str, queue_id: int, error: OSError,
               position: tuple[int, int]) -> None:
        with self._lock:
            self.error_count += 1
            self._failed[(topic, queue_id)] = QueueFailure(
                topic, queue_id, f"{type(error).__name__}: {error}", time.time_ns() // 1_000_000)
            if self.held_position is None or position[0] < self.held_position[0]:
                self.held_position = position
        log.error("dispatch: consume queue %s/%d failed after %d attempts (%s); its entries "
                  "wait for the next start, which rebuilds it from offset %d; other queues "
                  "go on", topic, queue_id, WRITE_ATTEMPTS_MAX, error, position[0])

    @property
    def failed_queue_count(self) -> int:
        return len(self._failed)

    def failed_queues(self) -> list[QueueFailure]:
        with self._lock:
            return list(self._failed.values())

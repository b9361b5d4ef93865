"""Deadlines of waiting puts, enforced by a thread of their own.

A wait must end at its deadline even while the thread that would complete it is stuck (an
fsync that takes seconds, a slave that stopped answering), so expiry is not left to them.
Deadlines are registration time plus a fixed timeout, so the earliest is always the oldest
wait: the thread sleeps until it, and never longer than `_IDLE_WAIT_S`.
"""

from __future__ import annotations

from store.clock import monotonic_ms
from store.service import ServiceThread
from store.waits.offset_waits import OffsetWaits

_IDLE_WAIT_S = 0.1


class DeadlineService(ServiceThread):
    name = "deadlines"

    def __init__(self) -> None:
        super().__init__()
        self._waits: list[OffsetWaits] = []

    def watch(self, waits: OffsetWaits) -> None:
        self._waits = [*self._waits, waits]

    def unwatch(self, waits: OffsetWaits) -> None:
        self._waits = [w for w in self._waits if w is not waits]

    def run_once(self) -> float:
        now = monotonic_ms()
        next_deadline_ms: int | None = None
        for waits in self._waits:
            waits.expire(now)
            deadline = waits.next_deadline_ms()
            if deadline is not None and (next_deadline_ms is None or deadline < next_deadline_ms):
                next_deadline_ms = deadline
        if next_deadline_ms is None:
            return _IDLE_WAIT_S
        return min(_IDLE_WAIT_S, max(0.001, (next_deadline_ms - monotonic_ms()) / 1000))

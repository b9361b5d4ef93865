"""Puts waiting for an offset to be reached (flushed, or acknowledged by slaves).

One `advance(offset)` completes every wait whose end offset is at or below it, so there is no
head-of-line blocking; `expire(now_ms)` completes overdue waits with the timeout status, so no
wait outlives its deadline. The number of waits is bounded by the caller's reservation.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque

from store.status import PutMessageStatus
from store.waits.completion import Pending


class _Wait:
    __slots__ = ("end_offset", "deadline_ms", "future")

    def __init__(self, end_offset: int, deadline_ms: int) -> None:
        self.end_offset = end_offset
        self.deadline_ms = deadline_ms
        self.future = Pending()


class OffsetWaits:
    def __init__(self, timeout_status: PutMessageStatus) -> None:
        self._timeout_status = timeout_status
        self._lock = threading.Lock()
        self._by_offset: list[tuple[int, int, _Wait]] = []
        # Deadlines are registration time + one fixed timeout: this deque is in deadline order.
        self._by_deadline: deque[_Wait] = deque()
        self._sequence = itertools.count()
        self._pending = 0
        self.reached_offset = 0

    def __len__(self) -> int:
        return self._pending

    def add(self, end_offset: int, deadline_ms: int) -> Pending:
        wait = _Wait(end_offset, deadline_ms)
        with self._lock:
            if end_offset <= self.reached_offset:
                wait.future.set(PutMessageStatus.PUT_OK)
                return wait.future
            heapq.heappush(self._by_offset, (end_offset, next(self._sequence), wait))
            self._by_deadline.append(wait)
            self._pending += 1
        return wait.future

    def advance(self, offset: int) -> int:
        """Complete with PUT_OK every wait whose end offset is <= `offset`; return how many."""
        done: list[_Wait] = []
        with self._lock:
            if offset > self.reached_offset:
                self.reached_offset = offset
            while self._by_offset and self._by_offset[0][0] <= offset:
                done.append(heapq.heappop(self._by_offset)[2])
        return self._complete(done, PutMessageStatus.PUT_OK)

    def rewound(self, offset: int) -> None:
        """The offset went back to `offset` (a cut of the log): a wait added from now on for
        an end past it waits until the offset gets there again."""
        with self._lock:
            self.reached_offset = min(self.reached_offset, offset)

    def complete_through(self, offset: int, status: PutMessageStatus) -> int:
        """Complete with `status` every wait whose end offset is <= `offset` (waits that can
        no longer be reached); return how many."""
        done: list[_Wait] = []
        with self._lock:
            while self._by_offset and self._by_offset[0][0] <= offset:
                done.append(heapq.heappop(self._by_offset)[2])
        return self._complete(done, status)

    def expire(self, now_ms: int) -> int:
        """Complete with the timeout status every wait whose deadline has passed."""
        done: list[_Wait] = []
        with self._lock:
            while self._by_deadline and (
                self._by_deadline[0].deadline_ms <= now_ms or self._by_deadline[0].future.done()
            ):
                wait = self._by_deadline.popleft()
                if not wait.future.done():
                    done.append(wait)
            if len(self._by_offset) > 2 * len(self._by_deadline) + 64:
                # Expired waits linger in the offset heap; drop them so it stays bounded.
                self._by_offset = [item for item in self._by_offset if not item[2].future.done()]
                heapq.heapify(self._by_offset)
        return self._complete(done, self._timeout_status)

    def fail_all(self, status: PutMessageStatus) -> int:
        with self._lock:
            done = [wait for _, _, wait in self._by_offset]
            self._by_offset.clear()
            self._by_deadline.clear()
        return self._complete(done, status)

    def next_deadline_ms(self) -> int | None:
        with self._lock:
            for wait in self._by_deadline:
                if not wait.future.done():
                    return wait.deadline_ms
        return None

    def _complete(self, waits: list[_Wait], status: PutMessageStatus) -> int:
        completed = 0
        for wait in waits:
            # A wait may be both reached and overdue; the first decision stands.
            if wait.future.set(status):
                completed += 1
        with self._lock:
            self._pending -= completed
        return completed

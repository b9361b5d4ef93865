"""Long-poll waiters: who waits for a consume queue to grow, woken by dispatch.

A reader that found nothing new parks a `Waiter` on (topic, queue id) with the queue's max
offset it saw; dispatch calls `notify` after it wrote a queue's entries, and every waiter of
that queue whose offset is now passed is woken through its own callback (the gateway's
callback sets an asyncio event from dispatch's thread). No timer and no polling: a parked
waiter costs nothing until its queue grows or its caller gives up. The number of waiters is
bounded; past it `park` answers None and the caller answers at once. Once the gateway stops
(`release_all`), every waiter is woken and a new one is woken as it parks, so a stop answers
every waiting read at once instead of waiting out their `wait_ms`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

QueueKey = tuple[str, int]


@dataclass(eq=False, slots=True)
class Waiter:
    key: QueueKey
    seen_max_offset: int
    wake: Callable[[], None]
    woken: bool = field(default=False)


class Arrivals:
    def __init__(self, waiters_max: int) -> None:
        assert waiters_max >= 0
        self.waiters_max = waiters_max
        self._waiters: dict[QueueKey, set[Waiter]] = {}
        self._count = 0
        self._released = False
        self._lock = threading.Lock()
        # Each queue's pokes so far: a reader that parks after one it did not see wakes at
        # once. One count per queue ever poked (bounded by the queues that exist).
        self._pokes: dict[QueueKey, int] = {}
        # Told of every queue's new max offset (read workers publish it: store/shared_reads/).
        self.listener: Callable[[str, int, int], None] | None = None

    @property
    def waiter_count(self) -> int:
        return self._count

    def park(self, topic: str, queue_id: int, seen_max_offset: int,
             current_max_offset: Callable[[], int], wake: Callable[[], None]) -> Waiter | None:
        """Wait for the queue's max offset to pass `seen_max_offset`; None past the bound.

        The queue is read again once the waiter is listed: an entry dispatched between the
        caller's read and this call is seen here, one dispatched after it calls `notify`,
        which finds the waiter. Either way no arrival is missed."""
        key = (topic, queue_id)
        with self._lock:
            waiter = Waiter(key, seen_max_offset, wake)
            if self._released:  # the gateway stops: answer now, listed nowhere, no slot
                self._wake(waiter)
                return waiter
            if self._count >= self.waiters_max:
                return None
            self._waiters.setdefault(key, set()).add(waiter)
            self._count += 1
        if current_max_offset() > seen_max_offset:
            self._wake(waiter)
        return waiter

    def cancel(self, waiter: Waiter) -> None:
        """The caller stops waiting (woken, timed out or gone): unlist the waiter."""
        with self._lock:
            waiters = self._waiters.get(waiter.key)
            if waiters is None or waiter not in waiters:
                return
            waiters.discard(waiter)
            if not waiters:
                del self._waiters[waiter.key]
            self._count -= 1

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Dispatch wrote entries of this queue up to `max_offset` (exclusive)."""
        listener = self.listener
        if listener is not None:
            listener(topic, queue_id, max_offset)
        if not self._waiters:  # the usual case: nobody waits, no lock taken
            return
        with self._lock:
            waiters = self._waiters.get((topic, queue_id))
            ready = [w for w in waiters if w.seen_max_offset < max_offset] if waiters else []
        for waiter in ready:
            self._wake(waiter)

    def poke(self, topic: str, queue_id: int) -> None:
        """A message of this queue became readable again without a new entry (group
        consumption's retry in place): its waiters wake, whatever offset they saw."""
        key = (topic, queue_id)
        with self._lock:
            self._pokes[key] = self._pokes.get(key, 0) + 1
            waiters = list(self._waiters.get(key, ()))
        for waiter in waiters:
            self._wake(waiter)

    def pokes(self, queues: list[QueueKey]) -> int:
        """How many pokes these queues had so far (compared before and after a read)."""
        counts = self._pokes
        return sum(counts.get(queue, 0) for queue in queues)

    def wake_all(self) -> None:
        """The store stops: every waiter answers now with what there is."""
        with self._lock:
            everyone = [w for waiters in self._waiters.values() for w in waiters]
        for waiter in everyone:
            self._wake(waiter)

    def release_all(self) -> None:
        """The gateway stops taking requests: every waiter answers now, and so does every
        waiter that parks from here on (a request already read off a connection)."""
        with self._lock:
            self._released = True
        self.wake_all()

    @staticmethod
    def _wake(waiter: Waiter) -> None:
        # Dispatch and `park` may both wake one waiter at once: callbacks are idempotent,
        # the flag only spares the usual second call.
        if not waiter.woken:
            waiter.woken = True
            waiter.wake()

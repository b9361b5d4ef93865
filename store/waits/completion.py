"""What a put hands back besides its append result: an awaitable final status.

No thread waits per put. Flush and replication services complete `Pending` objects by offset;
blocking code calls `result()`, asyncio code awaits. A `Pending` is a `store.waits.once.Once` of a
status: a slot, a lock and callbacks, far cheaper than a `concurrent.futures.Future`.
For asyncio, completions made on another thread reach the event loop through one mailbox per
loop: one ack that completes a hundred puts wakes the loop once, not a hundred times. A put
whose guarantees already hold gets a shared, already-done completion.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

from store.status import PutMessageStatus
from store.waits.once import Once

Callback = Callable[[PutMessageStatus], None]
T = TypeVar("T")


class Pending(Once[PutMessageStatus]):
    """A put's status (flushed, replicated) decided later, once, by another thread."""

    __slots__ = ()


class PutCompletion:
    __slots__ = ("_status", "_pending")

    def __init__(
        self, status: PutMessageStatus | None = None, pending: Pending | None = None
    ) -> None:
        assert (status is None) != (pending is None)
        self._status = status
        self._pending = pending

    @classmethod
    def done(cls, status: PutMessageStatus) -> PutCompletion:
        return _DONE[status]

    @property
    def is_done(self) -> bool:
        return self._pending is None or self._pending.done()

    def result(self, timeout_s: float | None = None) -> PutMessageStatus:
        """Block until the guarantees are decided (tests and blocking callers only)."""
        if self._pending is None:
            assert self._status is not None
            return self._status
        return self._pending.wait(timeout_s)

    def add_callback(self, callback: Callback) -> None:
        if self._pending is None:
            assert self._status is not None
            callback(self._status)
        else:
            self._pending.add_callback(callback)

    def __await__(self) -> Generator[Any, None, PutMessageStatus]:
        pending = self._pending
        if pending is None:
            assert self._status is not None
            return self._status
        if pending.value is not None:
            return pending.value
        return (yield from await_decision(pending.add_callback))

    @staticmethod
    def combine(flush: PutCompletion, replication: PutCompletion) -> PutCompletion:
        """Both guarantees: a non-OK replication status wins over the flush status (RocketMQ)."""
        if flush.is_done and flush.result() is PutMessageStatus.PUT_OK:
            return replication  # the combination is the replication status alone
        if flush.is_done and replication.is_done:
            return PutCompletion.done(_combined(flush.result(), replication.result()))
        combined = Pending()
        decided: list[PutMessageStatus] = []
        decided_lock = threading.Lock()

        def on_part_done(status: PutMessageStatus) -> None:
            with decided_lock:
                decided.append(status)
                if len(decided) < 2:
                    return
            combined.set(_combined(flush.result(), replication.result()))

        flush.add_callback(on_part_done)
        replication.add_callback(on_part_done)
        return PutCompletion(pending=combined)


class LoopMailbox(Generic[T]):
    """Results for one event loop's futures, delivered in batches by one wake-up (the puts
    of both replication modes post here from the thread that decides them)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._items: list[tuple[asyncio.Future[T], T]] = []
        self._scheduled = False

    def post(self, waiter: asyncio.Future[T], status: T) -> None:
        with self._lock:
            self._items.append((waiter, status))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def _drain(self) -> None:
        with self._lock:
            items, self._items = self._items, []
            self._scheduled = False
        for waiter, status in items:
            if not waiter.done():
                waiter.set_result(status)


_mailboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopMailbox[Any]] = (
    weakref.WeakKeyDictionary())
_mailboxes_lock = threading.Lock()


def await_decision(subscribe: Callable[[Callable[[T], None]], None]) -> Generator[Any, None, T]:
    """Await, in the running loop, a value another thread decides: `subscribe(deliver)`
    registers `deliver`, which is called once with the value, on any thread; the value
    reaches the loop through its mailbox."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[T] = loop.create_future()
    mailbox: LoopMailbox[T] = loop_mailbox(loop)
    subscribe(lambda value: mailbox.post(waiter, value))
    return (yield from waiter.__await__())


def loop_mailbox(loop: asyncio.AbstractEventLoop) -> LoopMailbox[Any]:
    """The one mailbox of `loop`."""
    mailbox = _mailboxes.get(loop)
    if mailbox is None:
        with _mailboxes_lock:
            mailbox = _mailboxes.get(loop)
            if mailbox is None:
                mailbox = _mailboxes[loop] = LoopMailbox(loop)
    return mailbox


def _combined(flush: PutMessageStatus, replication: PutMessageStatus) -> PutMessageStatus:
    return replication if replication is not PutMessageStatus.PUT_OK else flush


_DONE = {status: PutCompletion(status=status) for status in PutMessageStatus}

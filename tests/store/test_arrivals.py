"""Long-poll waiters on a real store: woken by dispatch, bounded, never missing an arrival."""

from __future__ import annotations

import threading
from collections.abc import Callable

from store import Message, MessageStore
from store.arrivals import Arrivals
from tests.support.store import wait_dispatched, wait_until


def _event_waker() -> tuple[threading.Event, Callable[[], None]]:
    event = threading.Event()
    return event, event.set


def test_dispatch_wakes_the_waiter_of_its_queue_only(
        open_store: Callable[..., MessageStore]) -> None:
    """A waiter parked on a queue is woken once dispatch writes that queue's entry, and not by
    an entry of another queue."""
    store = open_store()
    waiting, wake = _event_waker()
    other, wake_other = _event_waker()
    waiter = store.park_reader("Poll", 0, 0, wake)
    other_waiter = store.park_reader("Poll", 1, 0, wake_other)
    assert waiter is not None and other_waiter is not None
    assert not waiting.is_set() and store.arrivals.waiter_count == 2
    store.put_message(Message("Poll", b"first", queue_id=0))
    assert waiting.wait(timeout=10)
    wait_dispatched(store)
    assert store.queues.get("Poll", 0) is not None
    assert not other.is_set()  # queue 1 got nothing
    store.unpark_reader(waiter)
    store.unpark_reader(other_waiter)
    assert store.arrivals.waiter_count == 0


def test_an_entry_dispatched_before_parking_wakes_at_once(
        open_store: Callable[..., MessageStore]) -> None:
    """An entry dispatched between the reader's read and its park (the reader saw max 0, the
    queue holds 1 now) wakes the waiter in park itself: no arrival falls between the two."""
    store = open_store()
    store.put_message(Message("Race", b"m", queue_id=0))
    wait_dispatched(store)
    woken, wake = _event_waker()
    waiter = store.park_reader("Race", 0, 0, wake)
    assert waiter is not None and woken.is_set()
    store.unpark_reader(waiter)


def test_a_waiter_that_saw_the_current_end_stays_parked(
        open_store: Callable[..., MessageStore]) -> None:
    """A waiter that saw the queue's current max offset is not woken by the entries it has
    seen, only by the next one."""
    store = open_store()
    store.put_message(Message("Seen", b"m", queue_id=0))
    wait_dispatched(store)
    woken, wake = _event_waker()
    waiter = store.park_reader("Seen", 0, 1, wake)
    assert waiter is not None and not woken.is_set()
    store.put_message(Message("Seen", b"n", queue_id=0))
    assert woken.wait(timeout=10)
    store.unpark_reader(waiter)


def test_waiters_are_bounded_and_a_cancel_frees_a_slot() -> None:
    """Past waiters_max, park answers None; cancelling a waiter makes room again."""
    arrivals = Arrivals(waiters_max=2)
    first = arrivals.park("T", 0, 0, lambda: 0, lambda: None)
    second = arrivals.park("T", 1, 0, lambda: 0, lambda: None)
    assert first is not None and second is not None
    assert arrivals.park("T", 2, 0, lambda: 0, lambda: None) is None
    arrivals.cancel(first)
    arrivals.cancel(first)  # twice: counted once
    assert arrivals.waiter_count == 1
    assert arrivals.park("T", 2, 0, lambda: 0, lambda: None) is not None


def test_shutdown_wakes_every_waiter(open_store: Callable[..., MessageStore]) -> None:
    """A stopping store wakes its waiters, so that none waits out its time on a dead store."""
    store = open_store()
    woken, wake = _event_waker()
    waiter = store.park_reader("Stop", 0, 0, wake)
    assert waiter is not None
    store.shutdown()
    wait_until(woken.is_set)
    store.unpark_reader(waiter)


def test_release_wakes_every_waiter_and_each_that_parks_after() -> None:
    """The gateway stops: the waiters parked are woken, a reader parking later is woken as it
    parks and takes no slot, and nothing counts as waiting."""
    arrivals = Arrivals(waiters_max=1)
    woken: list[str] = []
    parked = arrivals.park("T", 0, 0, lambda: 0, lambda: woken.append("parked"))
    assert parked is not None and woken == []
    arrivals.release_all()
    assert woken == ["parked"]
    late = arrivals.park("T", 0, 0, lambda: 0, lambda: woken.append("late"))
    assert late is not None and woken == ["parked", "late"]
    arrivals.cancel(parked)
    arrivals.cancel(late)
    assert arrivals.waiter_count == 0

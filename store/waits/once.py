"""Once: a value decided later, once, by any thread; read, awaited or called back.

The one shape under every answer that another thread decides: a put's flush or replication
status (store/waits/completion.py's `Pending`) and a DLedger append's result
(ha/dledger/host/append_future.py). A slot, a plain lock, a callback list built only when a
callback comes before the decision, and a `threading.Event` built only when a thread blocks
in `wait()`: far cheaper than a `concurrent.futures.Future`, which builds a Condition (an
RLock and a waiter list) per object and notifies it on every decision. At tens of thousands
of answers a second, on threads that also serve producers, that counts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Once(Generic[T]):
    """`value` is None until `set` decides it; the first decision stands. A decided value is
    never None."""

    __slots__ = ("value", "_callbacks", "_lock", "_event")

    def __init__(self) -> None:
        self.value: T | None = None
        self._callbacks: list[Callable[[T], None]] | None = None
        self._lock = threading.Lock()
        self._event: threading.Event | None = None

    def done(self) -> bool:
        return self.value is not None

    def set(self, value: T) -> bool:
        """Decide `value`; False when already decided (nothing changes, no callback runs).
        The callbacks run here, on the deciding thread, after the lock is released."""
        assert value is not None, "a decision is never None"
        with self._lock:
            if self.value is not None:
                return False
            self.value = value
            callbacks, self._callbacks = self._callbacks, None
            event = self._event
        if event is not None:
            event.set()
        if callbacks:
            for callback in callbacks:
                callback(value)
        return True

    def add_callback(self, callback: Callable[[T], None]) -> None:
        """Call `callback(value)` once decided: later on the deciding thread, or at once on
        this one when already decided."""
        with self._lock:
            value = self.value
            if value is None:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        callback(value)

    def wait(self, timeout_s: float | None = None) -> T:
        """The value, waiting up to `timeout_s` seconds for it (TimeoutError past them)."""
        value = self.value
        if value is not None:
            return value
        with self._lock:
            if self.value is not None:
                return self.value
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        if not event.wait(timeout_s):
            raise TimeoutError(f"no decision within {timeout_s} s")
        assert self.value is not None
        return self.value

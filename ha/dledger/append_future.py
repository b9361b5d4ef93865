"""AppendFuture: the answer to one client append, decided once on the host thread.

The subset of `concurrent.futures.Future` that appends use (done, result, exception,
add_done_callback, set_result, set_exception), at a fraction of its cost: a Future builds a
Condition (an RLock and a waiter list) per append and notifies it on every completion; this
holds a plain lock, and a threading.Event only once some thread blocks in `result()`. At tens
of thousands of appends a second, on the thread that also serves the producers, that counts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
_UNSET = object()


class AppendFuture(Generic[T]):
    __slots__ = ("_value", "_error", "_callbacks", "_lock", "_event")

    def __init__(self) -> None:
        self._value: object = _UNSET
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[AppendFuture[T]], None]] | None = None
        self._lock = threading.Lock()
        self._event: threading.Event | None = None

    def done(self) -> bool:
        return self._value is not _UNSET

    def set_result(self, value: T) -> bool:
        """Decide the value; False when already decided (the first decision stands)."""
        return self._decide(value, None)

    def set_exception(self, error: BaseException) -> bool:
        return self._decide(None, error)

    def _decide(self, value: object, error: BaseException | None) -> bool:
        with self._lock:
            if self._value is not _UNSET:
                return False
            self._error = error
            self._value = value
            callbacks, self._callbacks = self._callbacks, None
            event = self._event
        if event is not None:
            event.set()
        if callbacks:
            for callback in callbacks:
                callback(self)
        return True

    def add_done_callback(self, callback: Callable[[AppendFuture[T]], None]) -> None:
        """Call `callback(self)` once decided (at once, on this thread, when already)."""
        with self._lock:
            if self._value is _UNSET:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        callback(self)

    def _wait(self, timeout_s: float | None) -> None:
        if self._value is not _UNSET:
            return
        with self._lock:
            if self._value is not _UNSET:
                return
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        if not event.wait(timeout_s):
            raise TimeoutError(f"no decision within {timeout_s} s")

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._error

    def result(self, timeout: float | None = None) -> T:
        """The value, waiting up to `timeout` seconds (TimeoutError past it); raises the error
        it was decided with."""
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

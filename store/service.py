"""A background service: one thread, a bounded loop, a stop event, woken rather than polled.

`ServiceThread` is every round-based loop of the broker: `run_once()` does one round and
returns how long to wait before the next (woken earlier by `wake()`). `IntervalService` is its
interval mode: one action every `interval_ms`; `DueService` runs its action when the work the
action reports comes due, between a gap and that interval.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable

log = logging.getLogger(__name__)


class ServiceThread(ABC):
    name = "service"

    def __init__(self) -> None:
        self._stop_event = threading.Event()
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None
        # Rounds that raised, in all; `failing`: the last round raised (cleared by one that
        # did not), so that a loop stuck on an error (dispatch held at a record it cannot
        # apply) shows as such, not only in the log.
        self.error_count = 0
        self.failing = False

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} is already started")
        self._stop_event.clear()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop_event.set()
        self._wakeup.set()
        self.wake()  # a subclass that waits elsewhere (`_wait`) is woken there
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def is_running(self) -> bool:
        return self._thread is not None

    @property
    def has_exited(self) -> bool:
        """Whether the thread is gone (never started, stopped, or its loop ended after a stop
        request): `stop()` then returns at once."""
        return self._thread is None or not self._thread.is_alive()

    def wake(self) -> None:
        if not self._wakeup.is_set():
            self._wakeup.set()

    def _loop(self) -> None:
        while not self._stop_event.is_set():
            self._wakeup.clear()
            try:
                wait_s = self.run_once()
            except Exception as error:  # a bug: keep it visible, keep the loop bounded
                log.exception("%s failed", self.name)
                self.last_error = f"{type(error).__name__}: {error}"
                self.error_count += 1
                self.failing = True
                self._wakeup.wait(1.0)
                continue
            self.failing = False
            self._wait(wait_s)

    def _wait(self, wait_s: float) -> None:
        """Sleep until woken or `wait_s` passed; runs after every round, with 0 too."""
        if wait_s > 0:
            self._wakeup.wait(wait_s)

    @abstractmethod
    def run_once(self) -> float:
        """Do one round of work; return how long to sleep before the next (woken earlier)."""


class IntervalService(ServiceThread):
    """Runs `action` every `interval_ms`; stop() wakes it at once and waits for it to end.

    The first run comes one interval after start. Each wait ends at the interval or at stop(),
    never later. A failing action is logged and tried again next interval (the database may be
    busy for a moment); it never kills the thread.
    """

    def __init__(self, name: str, interval_ms: int, action: Callable[[], object]) -> None:
        assert interval_ms > 0, interval_ms
        super().__init__()
        self.name = name
        self._interval_s = interval_ms / 1000
        self._action = action
        self._first = True

    def start(self) -> None:
        if not self.is_running:
            self._first = True  # a restart waits one interval again
        super().start()

    def run_once(self) -> float:
        if self._first:  # the first round only waits
            self._first = False
            return self._first_wait_s()
        try:
            result = self._action()
        except Exception:
            log.exception("%s failed; retrying in %.3f s", self.name, self._interval_s)
            return self._interval_s
        return self._wait_after(result)

    def _first_wait_s(self) -> float:
        return self._interval_s

    def _wait_after(self, result: object) -> float:
        """The wait after a round whose action answered `result`."""
        return self._interval_s


class DueService(IntervalService):
    """Runs `action` when its next item comes due: the action answers in how many ms that is
    (None: nothing known), and the thread waits that long, but at least `gap_ms` (items due
    within a gap go in one round) and at most `interval_ms` (an item the action did not
    know of yet is found then). The first run comes one gap after start (the action tells
    the rest). A failing action is tried again one interval later."""

    def __init__(self, name: str, *, gap_ms: int, interval_ms: int,
                 action: Callable[[], int | None]) -> None:
        assert 0 < gap_ms <= interval_ms, (gap_ms, interval_ms)
        super().__init__(name, interval_ms, action)
        self._gap_s = gap_ms / 1000

    def _first_wait_s(self) -> float:
        return self._gap_s

    def _wait_after(self, result: object) -> float:
        assert result is None or isinstance(result, int), result
        return due_wait_s(result, self._gap_s, self._interval_s)


def due_wait_s(due_in_ms: int | None, gap_s: float, interval_s: float) -> float:
    """The wait before the next round of a DueService: until the next item is due, within
    [gap_s, interval_s]."""
    if due_in_ms is None:
        return interval_s
    return min(interval_s, max(gap_s, due_in_ms / 1000))

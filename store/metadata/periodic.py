"""A background thread that runs one action every interval until it is stopped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)


class PeriodicThread:
    """Runs `action` every `interval_ms`; stop() wakes it at once and waits for it to end.

    The loop is bounded by the stop event: each wait ends at the interval or at stop(), never
    later. A failing action is logged and tried again next interval (the database may be busy
    for a moment); it never kills the thread.
    """

    def __init__(self, *, name: str, interval_ms: int, action: Callable[[], object]) -> None:
        assert interval_ms > 0, interval_ms
        self._interval_s = interval_ms / 1000
        self._action = action
        self._stop_event = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop_event.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop_event.wait(self._interval_s):
            try:
                self._action()
            except Exception:
                logger.exception(
                    "%s failed; retrying in %.3f s", self._thread.name, self._interval_s
                )

"""Whether the store may take writes: a failed msync or fsync ends that until a restart.

Linux reports a write-back error once (to the first msync/fsync that sees it) and may then
mark the failed pages clean, so retrying "succeeds" without the bytes being on disk (the
fsyncgate lesson PostgreSQL learned in 2018). The store therefore never retries its way past
such an error: the first one is recorded here, logged in one line, every put waiting for a
flush is completed with a non-OK status, and later puts are refused. Reads go on.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WriteFault:
    """The first durability call that failed: what it was and what the kernel said."""

    operation: str
    errno_name: str
    message: str
    timestamp_ms: int

    def describe(self) -> str:
        return (f"{self.operation} failed ({self.errno_name}: {self.message}); the store takes "
                "no writes until it is restarted and has recovered")


class StoreHealth:
    def __init__(self) -> None:
        self.fault: WriteFault | None = None
        self._lock = threading.Lock()
        self._listeners: tuple[Callable[[], None], ...] = ()

    @property
    def is_writable(self) -> bool:
        return self.fault is None

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Called once, on the thread that records the fault."""
        self._listeners = (*self._listeners, listener)

    def record_fault(self, operation: str, error: OSError) -> bool:
        """Record the first fault (later ones change nothing); return whether this was it."""
        code = error.errno or 0
        fault = WriteFault(operation, errno.errorcode.get(code, str(code)),
                           error.strerror or str(error), time.time_ns() // 1_000_000)
        with self._lock:
            if self.fault is not None:
                return False
            self.fault = fault
        log.error("store is no longer writable: %s", fault.describe())
        for listener in self._listeners:
            listener()
        return True

"""Waiting on conditions and stopping child processes, for tests that run real brokers."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

STOP_TIMEOUT_S = 20.0


def wait_for(condition: Callable[[], bool], timeout_s: float = 15.0,
             what: str = "condition") -> None:
    """Poll `condition` until it holds; fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout_s} s")
        time.sleep(0.02)


def terminate(process: subprocess.Popen[bytes] | None, name: str,
              log: Callable[[], str]) -> int:
    """SIGTERM, then SIGKILL after a bounded wait (and fail, showing `log()`); returns the
    exit code."""
    if process is None:
        return 0
    if process.poll() is None:
        process.send_signal(signal.SIGCONT)  # in case a test paused it
        process.terminate()
    try:
        return process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"{name} did not stop on SIGTERM:\n{log()}") from None

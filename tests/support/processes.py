"""Waiting on conditions and stopping child processes, for tests that run real brokers."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

STOP_TIMEOUT_S = 20.0


def wait_for(condition: Callable[[], bool], timeout_s: float = 15.0,
             what: str = "condition") -> None:
    """Poll `condition` until it holds; fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout_s} s")
        time.sleep(0.02)


def pause(pid: int, timeout_s: float = 10.0) -> None:
    """SIGSTOP, then wait until every thread of `pid` has stopped. kill() returns before the
    stop takes effect: under load a thread ran on for milliseconds after it (measured up to
    2.7 ms), long enough for a paused follower to acknowledge a push sent after its "pause"."""
    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: threads_stopped(pid), timeout_s, f"every thread of {pid} stopped")


def resume(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


def threads_stopped(pid: int) -> bool:
    """Whether every thread of `pid` is in the stopped state (T, or t when traced)."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        except OSError:
            continue  # a thread that has just ended
    return bool(states) and all(state in ("T", "t") for state in states)


def signal_stop(process: subprocess.Popen[bytes] | None) -> None:
    """SIGCONT (in case a test paused it), then SIGTERM, unless it has exited."""
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGCONT)
        process.terminate()


def wait_stopped(process: subprocess.Popen[bytes] | None, name: str,
                 log: Callable[[], str]) -> int:
    """The exit code, after a bounded wait; past it SIGKILL, and fail showing `log()`."""
    if process is None:
        return 0
    try:
        return process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"{name} did not stop on SIGTERM:\n{log()}") from None


def terminate(process: subprocess.Popen[bytes] | None, name: str,
              log: Callable[[], str]) -> int:
    """SIGTERM, then SIGKILL after a bounded wait (and fail, showing `log()`); returns the
    exit code."""
    signal_stop(process)
    return wait_stopped(process, name, log)


def terminate_all(stopping: Sequence[tuple[subprocess.Popen[bytes] | None, str,
                                           Callable[[], str]]]) -> None:
    """SIGTERM to every process first, then wait for each: stopped one after another, a
    broker still running may wait on a request to one already gone (a slave's metadata sync,
    a member's peer), and the waits add up. Every process is waited for; the first failure is
    raised after."""
    for process, _, _ in stopping:
        signal_stop(process)
    errors = []
    for process, name, log in stopping:
        try:
            wait_stopped(process, name, log)
        except AssertionError as error:
            errors.append(error)
    if errors:
        raise errors[0]

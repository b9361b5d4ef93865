"""The loop framework: IntervalService, the interval mode of ServiceThread."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from store.service import DueService, IntervalService, due_wait_s

DEADLINE_S = 5.0


def test_interval_service_survives_failures_and_stops_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failing action is logged and retried next interval, and stop() does not wait out the
    interval."""
    calls: list[int] = []
    second_call = threading.Event()

    def action() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("database busy")
        second_call.set()

    fast = IntervalService(name="test-fast", interval_ms=5, action=action)
    with caplog.at_level(logging.ERROR, logger="store.service"):
        fast.start()
        assert second_call.wait(DEADLINE_S)
        fast.stop()
    assert "test-fast failed; retrying in 0.005 s" in caplog.text
    assert "database busy" in caplog.text
    slow = IntervalService(name="test-slow", interval_ms=60_000, action=action)
    slow.start()
    started_s = time.monotonic()
    slow.stop()
    assert time.monotonic() - started_s < 1.0


def test_interval_service_first_runs_one_interval_after_start() -> None:
    """The action does not run at start: its first run is one interval later, on the thread
    named as given."""
    ran_at_s: list[float] = []
    ran_on: list[str] = []
    ran = threading.Event()

    def action() -> None:
        ran_at_s.append(time.monotonic())
        ran_on.append(threading.current_thread().name)
        ran.set()

    service = IntervalService(name="test-interval", interval_ms=200, action=action)
    started_s = time.monotonic()
    service.start()
    try:
        assert ran.wait(DEADLINE_S)
    finally:
        service.stop()
    assert ran_at_s[0] - started_s >= 0.2
    assert ran_on[0] == "test-interval"
    assert not service.is_running


def test_due_wait_is_the_time_to_the_next_item_within_the_gap_and_the_interval() -> None:
    assert due_wait_s(None, 0.01, 0.05) == 0.05  # nothing known: the interval
    assert due_wait_s(0, 0.01, 0.05) == 0.01  # due now: one gap (rounds stay batched)
    assert due_wait_s(30, 0.01, 0.05) == 0.03
    assert due_wait_s(60_000, 0.01, 0.05) == 0.05  # later items: still every interval


def test_due_service_runs_when_its_action_says_not_at_its_interval() -> None:
    """The action says its next item is due in 20 ms: the next run comes then, not after the
    60 s interval; with nothing due, the interval holds."""
    calls: list[float] = []
    third = threading.Event()

    def action() -> int | None:
        calls.append(time.monotonic())
        if len(calls) >= 3:
            third.set()
            return None
        return 20

    service = DueService(name="test-due", gap_ms=1, interval_ms=60_000, action=action)
    service.start()  # the first run one gap after start
    try:
        assert third.wait(DEADLINE_S)
    finally:
        service.stop()
    assert len(calls) == 3 and calls[2] - calls[1] >= 0.02

"""AppendFuture: decided once, read from any thread, callbacks once each."""

from __future__ import annotations

import threading

import pytest

from ha.dledger.host.append_future import AppendFuture


def test_the_first_decision_stands() -> None:
    future: AppendFuture[str] = AppendFuture()
    assert not future.done()
    assert future.set_result("first") is True
    assert future.set_result("second") is False
    assert future.set_exception(RuntimeError("late")) is False
    assert future.done() and future.result() == "first" and future.exception() is None


def test_an_error_is_raised_by_result_and_returned_by_exception() -> None:
    future: AppendFuture[str] = AppendFuture()
    error = ValueError("encode failed")
    assert future.set_exception(error) is True
    assert future.done()
    assert future.exception() is error
    with pytest.raises(ValueError, match="encode failed"):
        future.result()
    assert future.set_result("after") is False


def test_callbacks_run_once_each_after_the_decision_or_at_once_when_decided() -> None:
    future: AppendFuture[int] = AppendFuture()
    seen: list[tuple[str, int]] = []
    future.add_done_callback(lambda done: seen.append(("early-1", done.result())))
    future.add_done_callback(lambda done: seen.append(("early-2", done.result())))
    assert seen == []
    future.set_result(7)
    future.set_result(8)
    assert seen == [("early-1", 7), ("early-2", 7)]
    future.add_done_callback(lambda done: seen.append(("late", done.result())))
    assert seen[-1] == ("late", 7) and len(seen) == 3


def test_result_waits_for_another_thread_and_times_out_without_one() -> None:
    waiting: AppendFuture[str] = AppendFuture()
    with pytest.raises(TimeoutError):
        waiting.result(timeout=0.01)
    with pytest.raises(TimeoutError):
        waiting.exception(timeout=0.01)
    assert not waiting.done()
    started = threading.Event()
    got: list[str] = []

    def reader() -> None:
        started.set()
        got.append(waiting.result(timeout=10))

    thread = threading.Thread(target=reader)
    thread.start()
    assert started.wait(10)
    waiting.set_result("decided")
    thread.join(10)
    assert not thread.is_alive() and got == ["decided"]


def test_many_threads_racing_to_decide_make_one_decision_and_one_callback_run() -> None:
    future: AppendFuture[int] = AppendFuture()
    calls: list[int] = []
    future.add_done_callback(lambda done: calls.append(done.result()))
    winners: list[int] = []
    barrier = threading.Barrier(8)

    def decide(value: int) -> None:
        barrier.wait()
        if future.set_result(value):
            winners.append(value)

    threads = [threading.Thread(target=decide, args=(value,)) for value in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(winners) == 1 and calls == winners and future.result() == winners[0]

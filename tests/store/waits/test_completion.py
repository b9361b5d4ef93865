from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from store.status import PutMessageStatus
from store.waits.completion import Pending, PutCompletion

OK = PutMessageStatus.PUT_OK
DISK = PutMessageStatus.FLUSH_DISK_TIMEOUT
SLAVE = PutMessageStatus.FLUSH_SLAVE_TIMEOUT
NO_SLAVE = PutMessageStatus.SLAVE_NOT_AVAILABLE


def test_first_decision_stands() -> None:
    """A Pending is decided once: a second set is refused and changes nothing."""
    pending = Pending()
    assert not pending.done() and pending.value is None
    assert pending.set(DISK) is True
    assert pending.set(OK) is False
    assert pending.done() and pending.value is DISK and pending.wait(0) is DISK


def test_callbacks_run_once_with_the_decision() -> None:
    """Callbacks added before the decision run once each when it is made; one added after runs
    at once; a second set runs none of them again."""
    pending = Pending()
    seen: list[tuple[str, PutMessageStatus]] = []
    pending.add_callback(lambda status: seen.append(("first", status)))
    pending.add_callback(lambda status: seen.append(("second", status)))
    assert seen == []
    pending.set(SLAVE)
    pending.set(OK)
    assert seen == [("first", SLAVE), ("second", SLAVE)]
    pending.add_callback(lambda status: seen.append(("late", status)))
    assert seen[-1] == ("late", SLAVE) and len(seen) == 3


def test_wait_times_out_then_sees_a_decision_made_by_another_thread() -> None:
    """wait() raises TimeoutError at its deadline while undecided, and returns the status a
    thread decides while it waits."""
    pending = Pending()
    with pytest.raises(TimeoutError):
        pending.wait(0.01)
    waiting = threading.Event()
    result: list[PutMessageStatus] = []

    def waiter() -> None:
        waiting.set()
        result.append(pending.wait(10))

    thread = threading.Thread(target=waiter)
    thread.start()
    assert waiting.wait(10)
    pending.set(NO_SLAVE)
    thread.join(10)
    assert result == [NO_SLAVE]


def test_done_completion_answers_without_waiting() -> None:
    """A done completion is shared per status, is done, and answers result, callbacks and
    await with its status."""
    done = PutCompletion.done(DISK)
    assert done is PutCompletion.done(DISK) and done is not PutCompletion.done(OK)
    assert done.is_done and done.result() is DISK and done.result(0) is DISK
    seen: list[PutMessageStatus] = []
    done.add_callback(seen.append)
    assert seen == [DISK]
    assert asyncio.run(_await(done)) is DISK


def test_completion_holds_a_status_or_a_pending_never_both() -> None:
    """A completion is built from exactly one of a status and a Pending."""
    with pytest.raises(AssertionError):
        PutCompletion()
    with pytest.raises(AssertionError):
        PutCompletion(status=OK, pending=Pending())


def test_pending_completion_follows_its_pending() -> None:
    """A completion over a Pending is not done until the Pending is decided, then answers its
    status through result and callbacks."""
    pending = Pending()
    completion = PutCompletion(pending=pending)
    seen: list[PutMessageStatus] = []
    completion.add_callback(seen.append)
    assert not completion.is_done and seen == []
    with pytest.raises(TimeoutError):
        completion.result(0.01)
    pending.set(SLAVE)
    assert completion.is_done and completion.result() is SLAVE and seen == [SLAVE]
    assert asyncio.run(_await(completion)) is SLAVE


async def _await(completion: PutCompletion) -> PutMessageStatus:
    return await completion


def test_await_is_woken_once_for_many_completions_from_another_thread() -> None:
    """Completions decided on another thread reach the awaiting loop; a hundred decided in one
    go wake the loop once, not a hundred times."""
    pendings = [Pending() for _ in range(100)]

    async def main() -> tuple[list[PutMessageStatus], int]:
        loop = asyncio.get_running_loop()
        wakes = _count_threadsafe_wakes(loop)
        tasks = [asyncio.ensure_future(_await(PutCompletion(pending=p))) for p in pendings]
        await asyncio.sleep(0)  # every task now waits on its future
        decider = threading.Thread(target=lambda: [p.set(DISK) for p in pendings])
        decider.start()
        decider.join(10)  # blocks the loop: all hundred are decided before it can drain
        statuses = await asyncio.wait_for(asyncio.gather(*tasks), 10)
        return list(statuses), wakes[0]

    statuses, wake_count = asyncio.run(main())
    assert statuses == [DISK] * 100
    assert wake_count == 1


def test_loop_is_woken_again_for_completions_after_a_drain() -> None:
    """After the loop took one batch of results, a completion decided later on another thread
    wakes it again: every awaiting put gets its answer."""
    first, second = Pending(), Pending()

    async def main() -> list[PutMessageStatus]:
        answers = []
        for pending, status in ((first, OK), (second, SLAVE)):
            task = asyncio.ensure_future(_await(PutCompletion(pending=pending)))
            await asyncio.sleep(0)
            decider = threading.Thread(target=pending.set, args=(status,))
            decider.start()
            answers.append(await asyncio.wait_for(task, 10))
            decider.join(10)
        return answers

    assert asyncio.run(main()) == [OK, SLAVE]


def _count_threadsafe_wakes(loop: asyncio.AbstractEventLoop) -> list[int]:
    """Count the loop's call_soon_threadsafe calls (the cross-thread wake-ups)."""
    count = [0]
    real = loop.call_soon_threadsafe

    def counting(callback: Any, *args: Any, **kwargs: Any) -> asyncio.Handle:
        count[0] += 1
        return real(callback, *args, **kwargs)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    return count


def test_a_cancelled_waiter_is_skipped_and_later_ones_still_complete() -> None:
    """A waiter cancelled before its completion is decided gets no result (no error in the
    loop); other waiters of the same batch still get theirs."""
    errors: list[dict[str, Any]] = []
    first, second = Pending(), Pending()

    async def main() -> PutMessageStatus:
        asyncio.get_running_loop().set_exception_handler(lambda _, context: errors.append(context))
        cancelled = asyncio.ensure_future(_await(PutCompletion(pending=first)))
        kept = asyncio.ensure_future(_await(PutCompletion(pending=second)))
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.sleep(0)
        decider = threading.Thread(target=lambda: (first.set(OK), second.set(SLAVE)))
        decider.start()
        status = await asyncio.wait_for(kept, 10)
        decider.join(10)
        await asyncio.sleep(0)
        return status

    assert asyncio.run(main()) is SLAVE
    assert errors == []


def test_decision_after_the_loop_closed_is_dropped() -> None:
    """Deciding a completion whose awaiting loop has closed raises nothing in the decider."""
    pending = Pending()

    async def start_waiting() -> None:
        task = asyncio.ensure_future(_await(PutCompletion(pending=pending)))
        await asyncio.sleep(0)
        task.cancel()

    asyncio.run(start_waiting())
    assert pending.set(OK) is True


@pytest.mark.parametrize(
    ("flush", "replication", "combined"),
    [
        (OK, OK, OK),
        (OK, SLAVE, SLAVE),
        (DISK, OK, DISK),
        (DISK, SLAVE, SLAVE),
        (DISK, NO_SLAVE, NO_SLAVE),
    ],
)
def test_combine_of_done_parts(
    flush: PutMessageStatus, replication: PutMessageStatus, combined: PutMessageStatus
) -> None:
    """Combining two decided parts: a non-OK replication status wins, else the flush's."""
    result = PutCompletion.combine(PutCompletion.done(flush), PutCompletion.done(replication))
    assert result.is_done and result.result() is combined


@pytest.mark.parametrize("flush_first", [True, False])
@pytest.mark.parametrize(
    ("flush", "replication", "combined"),
    [(OK, SLAVE, SLAVE), (DISK, OK, DISK), (DISK, NO_SLAVE, NO_SLAVE), (OK, OK, OK)],
)
def test_combine_waits_for_both_parts(
    flush: PutMessageStatus,
    replication: PutMessageStatus,
    combined: PutMessageStatus,
    flush_first: bool,
) -> None:
    """A combination of undecided parts is decided only when both are, in either order, by the
    same rule."""
    flush_pending, replication_pending = Pending(), Pending()
    result = PutCompletion.combine(PutCompletion(pending=flush_pending),
                                   PutCompletion(pending=replication_pending))
    first, second = ((flush_pending, flush), (replication_pending, replication))[
        :: 1 if flush_first else -1]
    first[0].set(first[1])
    assert not result.is_done
    second[0].set(second[1])
    assert result.is_done and result.result() is combined


def test_combine_with_flush_already_ok_is_the_replication_itself() -> None:
    """When the flush is already PUT_OK, the combination is the replication's own completion."""
    replication = PutCompletion(pending=Pending())
    assert PutCompletion.combine(PutCompletion.done(OK), replication) is replication


def test_combine_with_flush_pending_and_replication_done_waits_for_the_flush() -> None:
    """A decided replication does not decide the combination while the flush is pending."""
    flush_pending = Pending()
    result = PutCompletion.combine(PutCompletion(pending=flush_pending), PutCompletion.done(OK))
    assert not result.is_done
    flush_pending.set(DISK)
    assert result.result(0) is DISK

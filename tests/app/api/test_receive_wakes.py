"""A long-polling receive is woken when a message becomes receivable in one of its queues
without a new entry (so dispatch wakes nobody): retried in place after an expiry, also when
the retry lands between its empty receive and its parking, let go by the ack of the one
before it in a FIFO queue, or retried in place after a backoff that ends (the expiry tick
tells). The wait's slice (after which a waiting receive looks again
anyway) is made longer than each test waits, so only the wake can answer in time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.api.routes import receive as receive_route
from tests.app.api.test_receive import _ack, _change, _expire, _receive, _settings, _setup
from tests.app.api.test_receive import clock as clock  # noqa: F401 (a fixture)
from tests.support.app import Served, serving
from tests.support.timers import FakeClock

pytestmark = pytest.mark.anyio

ANSWER_WAIT_S = 20.0  # far below the wait asked (and the slice): an answer by then is a wake


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    async with serving(_settings(tmp_path_factory.mktemp("wakes"),
                                 long_poll_wait_ms_max=120_000)) as running:
        yield running


async def _until_waiting(served: Served, waiting: asyncio.Future[Any]) -> None:
    """Until the receive `waiting` is parked on its queues (bounded)."""
    arrivals = served.broker.store.arrivals
    for _ in range(2_000):
        if arrivals.waiter_count:
            break
        await asyncio.sleep(0.005)
    assert arrivals.waiter_count and not waiting.done()


@pytest.fixture(autouse=True)
def long_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receive_route, "_WAIT_SLICE_MS", 600_000)


async def test_a_waiting_receive_wakes_when_an_expired_message_is_retried_in_place(
        served: Served, clock: FakeClock) -> None:
    group, topic = await _setup(served, queues=1, messages=[{"body": "late"}])
    [first] = await _receive(served, group, topic, invisible_ms=5_000)
    waiting = asyncio.ensure_future(_receive(served, group, topic, wait_ms=100_000))
    await _until_waiting(served, waiting)  # it waits (the next test covers the other order)
    assert _expire(served, clock, 5_000) == 1
    [again] = await asyncio.wait_for(waiting, ANSWER_WAIT_S)
    assert (again["msg_id"], again["delivery_attempt"]) == (first["msg_id"], 2)
    assert (await _ack(served, group, topic, [again["receipt_handle"]])).status_code == 200


async def test_a_retry_between_the_empty_receive_and_the_wait_is_not_missed(
        served: Served, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    group, topic = await _setup(served, queues=1, messages=[{"body": "late"}])
    [first] = await _receive(served, group, topic, invisible_ms=5_000)
    batches = served.broker.pop_batches
    real_receive = batches.receive
    expired: list[int] = []

    async def receive_then_expire(ask: Any) -> Any:
        answer = await real_receive(ask)
        if not expired:  # after the empty receive, before the wait parks: the poke is missed
            expired.append(_expire(served, clock, 5_000))
        return answer

    monkeypatch.setattr(batches, "receive", receive_then_expire)
    [again] = await asyncio.wait_for(_receive(served, group, topic, wait_ms=100_000),
                                     ANSWER_WAIT_S)
    assert expired == [1]
    assert (again["msg_id"], again["delivery_attempt"]) == (first["msg_id"], 2)


def test_a_poke_wakes_the_waiters_of_its_queue_only(tmp_path: Path) -> None:
    from store.arrivals import Arrivals

    arrivals = Arrivals(waiters_max=4)
    woken: list[str] = []
    arrivals.park("T", 0, 5, lambda: 5, lambda: woken.append("q0"))
    arrivals.park("T", 1, 5, lambda: 5, lambda: woken.append("q1"))
    arrivals.poke("T", 0)
    assert woken == ["q0"]
    assert (arrivals.pokes([("T", 0)]), arrivals.pokes([("T", 1)])) == (1, 0)


async def test_a_waiting_receive_wakes_when_an_ack_lets_the_next_of_a_fifo_queue_go(
        served: Served, clock: FakeClock) -> None:
    group, topic = await _setup(served, queues=1, fifo=True,
                                messages=[{"body": "m0"}, {"body": "m1"}])
    [first] = await _receive(served, group, topic)
    waiting = asyncio.ensure_future(_receive(served, group, topic, wait_ms=100_000))
    await _until_waiting(served, waiting)  # it waits behind m0
    assert (await _ack(served, group, topic, [first["receipt_handle"]])).status_code == 200
    [second] = await asyncio.wait_for(waiting, ANSWER_WAIT_S)
    assert second["body"] == "m1"
    assert (await _ack(served, group, topic, [second["receipt_handle"]])).status_code == 200


async def test_a_waiting_receive_wakes_when_a_backoff_in_place_comes_due(
        served: Served, clock: FakeClock) -> None:
    group, topic = await _setup(served, queues=1, fifo=True, messages=[{"body": "m0"}])
    [first] = await _receive(served, group, topic)
    released = await _change(served, group, topic, first["receipt_handle"], 0)
    assert released.status_code == 200, released.text  # in place (FIFO), ready in 10 s
    waiting = asyncio.ensure_future(_receive(served, group, topic, wait_ms=100_000))
    await _until_waiting(served, waiting)  # it waits for m0's backoff
    _expire(served, clock, 9_999)  # (ends what earlier tests left in flight)
    await asyncio.sleep(0)
    assert not waiting.done()
    _expire(served, clock, 1)  # the tick that sees the backoff end
    [again] = await asyncio.wait_for(waiting, ANSWER_WAIT_S)
    assert (again["body"], again["delivery_attempt"]) == ("m0", 2)
    assert (await _ack(served, group, topic, [again["receipt_handle"]])).status_code == 200

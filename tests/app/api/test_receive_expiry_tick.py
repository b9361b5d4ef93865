"""The master's expiry tick is due when the earliest invisible time or backoff end it knows of
passes (store/service.py DueService waits that long, within its gap and interval): each tick
answers how long until its next one has work, on the consumption clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.broker import pop_expiry
from app.broker.pop_expiry import ExpiryRound
from tests.app.api.test_receive import NOW_MS, _change, _receive, _settings, _setup
from tests.support.app import Served, serving
from tests.support.store import wait_dispatched
from tests.support.timers import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async with serving(_settings(tmp_path)) as running:  # its own tick sleeps 60 s
        yield running


def _tick(served: Served) -> ExpiryRound:
    broker = served.broker
    ticked = pop_expiry.expire_rounds(broker.consumption, broker.takes_pop_decisions)
    wait_dispatched(broker.store)
    return ticked


async def test_the_next_tick_is_due_at_the_earliest_invisible_time(served: Served) -> None:
    clock = FakeClock(NOW_MS)
    served.broker.consumption.clock_ms = clock
    group, topic = await _setup(served, queues=1, messages=[{"body": "a"}, {"body": "b"}])
    assert _tick(served) == ExpiryRound(0, None)  # nothing in flight: the interval holds
    [a] = await _receive(served, group, topic, max_messages=1, invisible_ms=10_000)
    clock.now_ms += 3_000
    [b] = await _receive(served, group, topic, max_messages=1, invisible_ms=20_000)
    assert _tick(served) == ExpiryRound(0, 7_000)  # a's, then b's
    clock.now_ms += 7_000
    assert _tick(served) == ExpiryRound(1, 0)  # a retried; more may be due at once
    assert _tick(served) == ExpiryRound(0, 13_000)
    [again] = await _receive(served, group, topic, invisible_ms=60_000)
    assert (again["body"], again["delivery_attempt"]) == ("a", 2)


async def test_the_next_tick_is_due_when_a_backoff_in_place_ends(served: Served) -> None:
    """A released FIFO message waits its backoff in its queue: the tick that sees the
    backoff end wakes the receives waiting on it, so it is due then."""
    clock = FakeClock(NOW_MS)
    served.broker.consumption.clock_ms = clock
    group, topic = await _setup(served, queues=1, fifo=True, messages=[{"body": "m0"}])
    [first] = await _receive(served, group, topic, invisible_ms=60_000)
    released = await _change(served, group, topic, first["receipt_handle"], 0)
    assert released.status_code == 200, released.text  # in place, ready in 10 s (the table)
    assert _tick(served) == ExpiryRound(0, 10_000)
    clock.now_ms += 4_000
    assert _tick(served) == ExpiryRound(0, 6_000)
    clock.now_ms += 6_000
    assert _tick(served) == ExpiryRound(0, None)  # told once: nothing more known

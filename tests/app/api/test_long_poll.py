"""Long poll on consume reads through the app: woken by dispatch, bounded in time and count."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from app.api.schemas.messages import ConsumeResult
from tests.support.app import Served, app_settings, problem, serving

pytestmark = pytest.mark.anyio

_DEADLINE_S = 20.0


async def _until_waiting(served: Served, count: int) -> None:
    """Poll the store's waiter count (the seam that orders produce after park)."""
    deadline = time.monotonic() + _DEADLINE_S
    while served.broker.store.arrivals.waiter_count < count:
        assert time.monotonic() < deadline, "the read never parked"
        await asyncio.sleep(0.001)


async def _until_queue_end(served: Served, topic: str, end_offset: int) -> None:
    """Poll queue 0's end offset until dispatch has written up to `end_offset`."""
    deadline = time.monotonic() + _DEADLINE_S
    while (served.broker.store.queue_offset_range(topic, 0) or (0, 0))[1] < end_offset:
        assert time.monotonic() < deadline, f"dispatch never reached {end_offset}"
        await asyncio.sleep(0.001)


def _read(served: Served, topic: str, **params: int) -> asyncio.Task[httpx.Response]:
    return asyncio.create_task(served.client.get(
        f"/v1/topics/{topic}/queues/0/messages", params=params))


async def test_a_waiting_read_gets_the_message_produced_after_it(tmp_path: Path) -> None:
    """A read with wait_ms on an empty queue parks, and answers with the message produced
    while it waits."""
    async with serving(app_settings(tmp_path)) as served:
        created = await served.client.post("/v1/topics", json={"name": "Poll"})
        assert created.status_code == 201, created.text
        reading = _read(served, "Poll", offset=0, wait_ms=20_000)
        await _until_waiting(served, 1)
        assert not reading.done()
        put = await served.client.post("/v1/topics/Poll/messages",
                                       json={"body": "late", "queue_id": 0})
        assert put.status_code == 201, put.text
        response = await asyncio.wait_for(reading, _DEADLINE_S)
        result = ConsumeResult.model_validate_json(response.content)
        assert result.status.value == "FOUND" and result.next_offset == 1
        assert [m.msg_id for m in result.messages] == [put.json()["msg_id"]]
        assert served.broker.store.arrivals.waiter_count == 0


async def test_a_read_past_the_end_waits_for_the_next_message(tmp_path: Path) -> None:
    """A read at the queue's max offset waits for the next message, not the ones before."""
    async with serving(app_settings(tmp_path)) as served:
        for body in ("a", "b"):
            put = await served.client.post("/v1/topics/Next/messages",
                                           json={"body": body, "queue_id": 0})
            assert put.status_code == 201
        # Dispatch is asynchronous: until it has written "b", offset 2 is past the queue's
        # end by two (OFFSET_OVERFLOW_BADLY, answered at once as RocketMQ does), not the
        # next offset. Under load the read once came first (a flake: it never parked).
        await _until_queue_end(served, "Next", 2)
        reading = _read(served, "Next", offset=2, wait_ms=20_000)
        await _until_waiting(served, 1)
        await served.client.post("/v1/topics/Next/messages", json={"body": "c", "queue_id": 0})
        response = await asyncio.wait_for(reading, _DEADLINE_S)
        result = ConsumeResult.model_validate_json(response.content)
        assert [m.queue_offset for m in result.messages] == [2]


async def test_wait_ms_is_cut_to_the_broker_bound(tmp_path: Path) -> None:
    """A read asking to wait 300 s on a broker whose long_poll_wait_ms_max is 200 answers the
    empty result after about 200 ms."""
    async with serving(app_settings(tmp_path, long_poll_wait_ms_max=200)) as served:
        await served.client.post("/v1/topics", json={"name": "Cut"})
        started = time.monotonic()
        response = await served.client.get("/v1/topics/Cut/queues/0/messages",
                                           params={"wait_ms": 300_000})
        elapsed_s = time.monotonic() - started
        assert response.status_code == 200, response.text
        assert response.json()["messages"] == []
        assert 0.2 <= elapsed_s < 10.0
        assert served.broker.store.arrivals.waiter_count == 0


async def test_past_the_waiter_bound_a_read_is_refused_with_429(tmp_path: Path) -> None:
    """With long_poll_waiters_max reads waiting, one more read that would wait answers 429
    LONG_POLL_BUSY at once; a read with no wait_ms is still served."""
    async with serving(app_settings(tmp_path, long_poll_waiters_max=1)) as served:
        await served.client.post("/v1/topics", json={"name": "Busy"})
        parked = _read(served, "Busy", wait_ms=20_000)
        await _until_waiting(served, 1)
        refused = await served.client.get("/v1/topics/Busy/queues/0/messages",
                                          params={"wait_ms": 1000})
        assert refused.status_code == 429
        assert problem(refused)["error_code"] == "LONG_POLL_BUSY"
        assert refused.headers["retry-after"] == "1"
        plain = await served.client.get("/v1/topics/Busy/queues/0/messages")
        assert plain.status_code == 200
        await served.client.post("/v1/topics/Busy/messages", json={"body": "x", "queue_id": 0})
        response = await asyncio.wait_for(parked, _DEADLINE_S)
        assert len(response.json()["messages"]) == 1


async def test_a_read_of_an_unknown_topic_does_not_wait(tmp_path: Path) -> None:
    """A read of a topic that does not exist answers 404 at once, whatever its wait_ms."""
    async with serving(app_settings(tmp_path)) as served:
        response = await served.client.get("/v1/topics/Nope/queues/0/messages",
                                           params={"wait_ms": 30_000})
        assert response.status_code == 404
        assert served.broker.store.arrivals.waiter_count == 0

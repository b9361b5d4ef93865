"""Delayed messages through the app: produce with a delay (JSON, raw headers, batch), the
answer's due time, delivery on a fake clock, cancel, refusals, /admin/timers and /metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.api.schemas.messages import ConsumeResult
from app.api.schemas.produce import BatchResult, PutResult
from app.api.schemas.timers import CancelView, TimersView
from tests.support.app import Served, app_settings, problem, serving
from tests.support.store import wait_dispatched, wait_until
from tests.support.timers import FakeClock

pytestmark = pytest.mark.anyio

NOW_MS = 1_800_000_000_000


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    settings = app_settings(tmp_path_factory.mktemp("timers"), delay_levels="1s 2s",
                            timer_precision_ms=100, timer_max_delay_ms=60_000,
                            timer_cancels_pending_max=5)
    async with serving(settings) as running:
        yield running


@pytest.fixture(scope="module")
def module_clock(served: Served) -> FakeClock:
    """One clock for the module: the scheduler's "now" never goes back."""
    fake = FakeClock(NOW_MS)
    served.broker.timer_clock_ms = fake
    return fake


@pytest.fixture
def clock(module_clock: FakeClock) -> FakeClock:
    """The module's clock, a minute after the previous test's."""
    module_clock.now_ms += 60_000
    return module_clock


def _advance(served: Served, clock: FakeClock, ms: int) -> None:
    clock.now_ms += ms
    assert served.broker.timers is not None
    served.broker.timers.wake()


async def _messages(served: Served, topic: str, queue_id: int) -> list[Any]:
    wait_dispatched(served.broker.store)
    response = await served.client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages",
                                       params={"offset": 0, "body_encoding": "utf8"})
    assert response.status_code in (200, 404), response.text
    if response.status_code == 404:
        return []
    return ConsumeResult.model_validate_json(response.content).messages


async def _wait_delivered(served: Served, topic: str, queue_id: int, count: int) -> list[Any]:
    found: list[Any] = []

    def delivered() -> bool:
        found[:] = [m for m in _read_queue(served, topic, queue_id)]
        return len(found) >= count

    wait_until(delivered)
    return found


def _read_queue(served: Served, topic: str, queue_id: int) -> list[Any]:
    result = served.broker.store.get_messages(topic, queue_id, 0, 64)
    return result.messages


async def test_a_delayed_json_message_is_due_at_its_level_and_delivered_then(
        served: Served, clock: FakeClock) -> None:
    start = clock.now_ms
    response = await served.client.post("/v1/topics/Later/messages", json={
        "body": "hello", "keys": ["k1"], "tags": "TagA", "properties": {"trace": "t1"},
        "queue_id": 1, "delay_level": 2})
    assert response.status_code == 201, response.text
    put = PutResult.model_validate_json(response.content)
    assert put.deliver_at_ms == start + 2000 and put.topic == "Later"
    _advance(served, clock, 1999)
    wait_dispatched(served.broker.store)
    assert await _messages(served, "Later", 1) == []
    _advance(served, clock, 1)
    (delivered,) = await _wait_delivered(served, "Later", 1, 1)
    assert delivered.body == b"hello" and delivered.keys == "k1" and delivered.tags == "TagA"
    assert delivered.properties["trace"] == "t1"
    assert delivered.properties["TWINLOG_SCHEDULED_MSG_ID"] == put.msg_id
    (consumed,) = await _messages(served, "Later", 1)
    assert consumed.properties["TWINLOG_SCHEDULED_MSG_ID"] == put.msg_id


async def test_raw_with_delay_headers_and_a_batch_with_mixed_delays(
        served: Served, clock: FakeClock) -> None:
    start = clock.now_ms
    response = await served.client.post(
        "/v1/topics/RawLater/messages", params={"queue_id": 0}, content=b"\x00raw",
        headers={"content-type": "application/octet-stream",
                 "x-twinlog-deliver-at-ms": str(start + 750)})
    assert response.status_code == 201, response.text
    assert response.json()["deliver_at_ms"] == start + 750
    batch = await served.client.post("/v1/topics/RawLater/messages:batch", json={"messages": [
        {"body": "now", "queue_id": 0},
        {"body": "soon", "queue_id": 0, "delay_ms": 300},
        {"body": "past", "queue_id": 0, "deliver_at_ms": start - 5}]})
    assert batch.status_code == 201, batch.text
    results = BatchResult.model_validate_json(batch.content).results
    assert [r.deliver_at_ms for r in results] == [None, start + 300, None]
    wait_dispatched(served.broker.store)
    assert sorted(m.body for m in _read_queue(served, "RawLater", 0)) == [b"now", b"past"]
    _advance(served, clock, 1000)
    found = await _wait_delivered(served, "RawLater", 0, 4)
    assert sorted(m.body for m in found) == [b"\x00raw", b"now", b"past", b"soon"]


@pytest.mark.parametrize(("body", "http_status", "code", "setting"), [
    ({"delay_level": 3}, 409, "DELAY_LEVEL_NOT_CONFIGURED", "delay_levels"),
    ({"delay_level": 0}, 400, "VALIDATION_FAILED", None),
    ({"delay_level": 19}, 400, "VALIDATION_FAILED", None),
    ({"delay_ms": 60_001}, 409, "DELAY_TOO_LONG", "timer_max_delay_ms"),
    ({"deliver_at_ms": NOW_MS + 10**9}, 409, "DELAY_TOO_LONG", "timer_max_delay_ms"),
    ({"delay_level": 1, "delay_ms": 5}, 409, "DELAY_CONFLICT", None),
    ({"delay_ms": -1}, 400, "VALIDATION_FAILED", None),
    ({"delay_ms": 1.5}, 400, "VALIDATION_FAILED", None),
    ({"properties": {"TWINLOG_TIMER_FROM": "S:0:0"}}, 400, "VALIDATION_FAILED", None),
])
async def test_bad_delays_are_refused_naming_the_setting(
        served: Served, clock: FakeClock, body: dict[str, Any], http_status: int, code: str,
        setting: str | None) -> None:
    """Out of the spec's bounds: 400; within them but refused by a setting or another field
    (valid alone): 409, as INVALID_QUEUE_ID."""
    response = await served.client.post("/v1/topics/Bad/messages", json={"body": "x", **body})
    assert response.status_code == http_status, response.text
    document = problem(response)
    assert document["error_code"] == code and document.get("setting") == setting
    assert served.broker.store.queue_offset_range("Bad", 0) is None


async def test_a_bad_delay_header_is_a_400(served: Served, clock: FakeClock) -> None:
    response = await served.client.post(
        "/v1/topics/Bad/messages", content=b"x",
        headers={"content-type": "application/octet-stream", "x-twinlog-delay-ms": "soon"})
    assert response.status_code == 400
    assert "X-Twinlog-Delay-Ms" in problem(response)["detail"]


async def test_cancel_before_due_and_409_after(served: Served, clock: FakeClock) -> None:
    start = clock.now_ms
    kept = (await served.client.post("/v1/topics/Cancel/messages", json={
        "body": "kept", "queue_id": 0, "delay_ms": 500})).json()
    gone = (await served.client.post("/v1/topics/Cancel/messages", json={
        "body": "gone", "queue_id": 0, "delay_ms": 500})).json()
    response = await served.client.delete(f"/v1/messages/{gone['msg_id']}")
    assert response.status_code == 200, response.text
    view = CancelView.model_validate_json(response.content)
    assert (view.topic, view.deliver_at_ms, view.already_cancelled) == ("Cancel",
                                                                        start + 500, False)
    again = await served.client.delete(f"/v1/messages/{gone['msg_id']}")
    assert again.status_code == 200 and again.json()["already_cancelled"] is True
    _advance(served, clock, 600)
    found = await _wait_delivered(served, "Cancel", 0, 1)
    wait_until(lambda: served.broker.store.timer_state.counts().dropped_totals.get(
        "cancelled", 0) == 1)
    assert [m.body for m in _read_queue(served, "Cancel", 0)] == [b"kept"] == [
        m.body for m in found]
    late = await served.client.delete(f"/v1/messages/{kept['msg_id']}")
    assert late.status_code == 409 and problem(late)["error_code"] == "MESSAGE_ALREADY_DUE"


async def test_cancel_of_what_is_not_a_delayed_message(served: Served, clock: FakeClock) -> None:
    plain = (await served.client.post("/v1/topics/Plain/messages", json={"body": "x"})).json()
    response = await served.client.delete(f"/v1/messages/{plain['msg_id']}")
    assert response.status_code == 404
    assert problem(response)["error_code"] == "NOT_A_SCHEDULED_MESSAGE"
    malformed = await served.client.delete("/v1/messages/xyz")
    assert malformed.status_code == 400


async def test_admin_timers_and_metrics(served: Served, clock: FakeClock) -> None:
    for level in (1, 2, 2):
        response = await served.client.post("/v1/topics/Count/messages", json={
            "body": "x", "delay_level": level})
        assert response.status_code == 201
    await served.client.post("/v1/topics/Count/messages", json={"body": "x", "delay_ms": 5000})
    wait_dispatched(served.broker.store)
    start = clock.now_ms
    view = TimersView.model_validate_json((await served.client.get("/admin/timers")).content)
    assert view.scheduler_active
    assert (view.pending_levels, view.pending_timers) == (3, 1)
    assert view.oldest_due_ms == start + 1000
    level_two = next(lane for lane in view.lanes if lane.lane == "S:1")
    assert level_two.delay_level == 2 and level_two.pending == 2 and level_two.wait_ms == 2000
    metrics = (await served.client.get("/metrics")).text
    assert 'twinlog_timer_pending_messages{kind="level"} 3.0' in metrics
    assert 'twinlog_timer_pending_messages{kind="timer"} 1.0' in metrics
    _advance(served, clock, 6000)
    wait_until(lambda: served.broker.store.queue_offset_range("Count", 0) is not None
               and len(_all(served, "Count")) == 4)
    wait_dispatched(served.broker.store)
    view = TimersView.model_validate_json((await served.client.get("/admin/timers")).content)
    assert view.pending_total == 0 and view.lateness.count >= 4
    metrics = (await served.client.get("/metrics")).text
    assert "twinlog_timer_lateness_seconds_count" in metrics
    assert served.broker.save_delay_offsets() >= 0
    offsets = (await served.client.get("/admin/sync/delay-offsets")).json()
    assert {row["delay_level"]: row["queue_offset"] for row in offsets["rows"]}[2] >= 2


def _all(served: Served, topic: str) -> list[Any]:
    return [m for queue_id in range(4) for m in _read_queue(served, topic, queue_id)]

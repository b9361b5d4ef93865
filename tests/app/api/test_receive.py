"""Group consumption through the app: receive, ack, change of invisibility, redelivery after
the invisible time, release with backoff (each group's own), dead letters, stale and foreign
handles, tags, order keys, the in-flight bound, and the state kept across a restart. A fake
clock drives time; the expiry tick is called by the test (its thread's interval is a minute)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.api.schemas.messages import ConsumeResult
from app.broker import consumption as consumption_module
from store import Message, PutMessageStatus
from store.consumption.records import PopRecord, decode
from store.property_names import PROPERTY_TAGS
from tests.support.app import Served, app_settings, problem, serving
from tests.support.store import wait_dispatched
from tests.support.timers import FakeClock

pytestmark = pytest.mark.anyio

NOW_MS = 1_800_000_000_000
RECEIVABLE_WAIT_S = 10.0
NOTHING_WAIT_S = 0.2
_names = itertools.count()
_POP = {"pop_invisible_ms_min": 1_000, "pop_expiry_interval_ms": 60_000,
        "pop_expiry_gap_ms": 60_000,
        "delay_levels": "1s 2s", "timer_precision_ms": 100}


def _settings(data_dir: Path, **overrides: Any) -> Any:
    return app_settings(data_dir, **{**_POP, **overrides})


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    async with serving(_settings(tmp_path_factory.mktemp("pop"))) as running:
        yield running


@pytest.fixture
def clock(served: Served) -> FakeClock:
    fake = FakeClock(NOW_MS + next(_names) * 86_400_000)
    served.broker.consumption.clock_ms = fake
    served.broker.timer_clock_ms = fake
    return fake


async def _setup(served: Served, *, queues: int = 2, retry_times_max: int = 16,
                 messages: list[dict[str, Any]] | None = None,
                 **group_fields: Any) -> tuple[str, str]:
    topic = f"t{next(_names)}"
    response = await served.client.post("/v1/topics", json={
        "name": topic, "read_queue_count": queues, "write_queue_count": queues})
    assert response.status_code == 201, response.text
    group = (await _group(served, retry_times_max=retry_times_max, **group_fields))["name"]
    for message in messages or []:
        response = await served.client.post(f"/v1/topics/{topic}/messages",
                                            json={"body_encoding": "utf8", **message})
        assert response.status_code == 201, response.text
    wait_dispatched(served.broker.store)
    return group, topic


async def _group(served: Served, **fields: Any) -> dict[str, Any]:
    response = await served.client.post("/v1/groups",
                                        json={"name": f"g{next(_names)}", **fields})
    assert response.status_code == 201, response.text
    document: dict[str, Any] = response.json()
    return document


async def _receive(served: Served, group: str, topic: str, expected_status: int = 200,
                   **fields: Any) -> list[dict[str, Any]]:
    response = await served.client.post(
        f"/v1/groups/{group}/topics/{topic}/messages:receive",
        json={"invisible_ms": 10_000, "body_encoding": "utf8", **fields})
    assert response.status_code == expected_status, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


async def _ack(served: Served, group: str, topic: str, handles: list[str]) -> Any:
    return await served.client.post(f"/v1/groups/{group}/topics/{topic}/messages:ack",
                                    json={"receipt_handles": handles})


async def _change(served: Served, group: str, topic: str, handle: str,
                  invisible_ms: int) -> Any:
    return await served.client.post(
        f"/v1/groups/{group}/topics/{topic}/messages:change-invisibility",
        json={"receipt_handle": handle, "invisible_ms": invisible_ms})


async def _consumption(served: Served, group: str) -> Any:
    response = await served.client.get(f"/v1/groups/{group}/lag")
    assert response.status_code == 200, response.text
    return response.json()["consumption"]


def _expire(served: Served, clock: FakeClock, ms: int) -> int:
    clock.now_ms += ms
    ended = served.broker.expire_deliveries()
    wait_dispatched(served.broker.store)
    return ended


async def test_receive_then_ack_commits_the_group_offset_and_nothing_comes_back(
        served: Served, clock: FakeClock) -> None:
    group, topic = await _setup(served, messages=[{"body": f"m{n}"} for n in range(6)])
    first = await _receive(served, group, topic, max_messages=4)
    second = await _receive(served, group, topic, max_messages=10)
    bodies = [message["body"] for message in first + second]
    assert sorted(bodies) == [f"m{n}" for n in range(6)]  # disjoint, all of them
    assert {message["delivery_attempt"] for message in first + second} == {1}
    assert await _receive(served, group, topic) == []  # all in flight
    assert (await _consumption(served, group)) == [
        {"topic": topic, "ready": 0, "in_flight": 6, "retrying": 0, "dead_lettered": 0,
         "acked": 0}]
    response = await _ack(served, group, topic,
                          [message["receipt_handle"] for message in first + second])
    assert response.status_code == 200, response.text
    assert [item["status"] for item in response.json()["results"]] == [200] * 6
    wait_dispatched(served.broker.store)
    assert _expire(served, clock, 60_000) == 0
    assert await _receive(served, group, topic) == []
    lag = (await served.client.get(f"/v1/groups/{group}/lag")).json()
    assert lag["total_lag"] == 0
    assert {queue["consumer_offset"] for queue in lag["queues"]} == {3}
    assert lag["consumption"] == [{"topic": topic, "ready": 0, "in_flight": 0, "retrying": 0,
                                   "dead_lettered": 0, "acked": 6}]


async def test_an_expired_message_comes_back_with_the_next_attempt_and_its_old_handle_is_stale(
        served: Served, clock: FakeClock) -> None:
    group, topic = await _setup(served, queues=1, messages=[{"body": "slow"}])
    [first] = await _receive(served, group, topic, invisible_ms=5_000)
    assert _expire(served, clock, 4_999) == 0
    assert await _receive(served, group, topic) == []  # still invisible
    assert _expire(served, clock, 1) == 1
    [second] = await _receive(served, group, topic)
    assert (second["body"], second["delivery_attempt"]) == ("slow", 2)
    assert (second["topic"], second["queue_id"], second["queue_offset"], second["msg_id"]) == \
        (first["topic"], first["queue_id"], first["queue_offset"], first["msg_id"])
    stale = await _ack(served, group, topic, [first["receipt_handle"]])
    assert stale.status_code == 409
    assert problem(stale)["error_code"] == "STALE_RECEIPT_HANDLE"
    fresh = await _ack(served, group, topic, [second["receipt_handle"]])
    assert fresh.status_code == 200, fresh.text
    assert _expire(served, clock, 60_000) == 0
    assert await _receive(served, group, topic) == []


async def test_a_changed_handle_acks_and_the_old_one_is_stale(served: Served,
                                                              clock: FakeClock) -> None:
    """RocketMQ #9583: an ack after changeInvisibleDuration must take effect."""
    group, topic = await _setup(served, queues=1, messages=[{"body": "long job"}])
    [message] = await _receive(served, group, topic, invisible_ms=5_000)
    changed = await _change(served, group, topic, message["receipt_handle"], 60_000)
    assert changed.status_code == 200, changed.text
    document = changed.json()
    assert document["released"] is False
    assert document["invisible_until_ms"] == clock.now_ms + 60_000
    assert _expire(served, clock, 30_000) == 0  # extended past the first invisible time
    old = await _ack(served, group, topic, [message["receipt_handle"]])
    assert old.status_code == 409
    assert (await _ack(served, group, topic, [document["receipt_handle"]])).status_code == 200
    again = await _change(served, group, topic, document["receipt_handle"], 10_000)
    assert again.status_code == 409  # acked: nothing to change


async def test_a_release_comes_back_after_the_backoff(served: Served, clock: FakeClock) -> None:
    group, topic = await _setup(served, queues=1, messages=[{"body": "try later"}])
    [message] = await _receive(served, group, topic)
    released = await _change(served, group, topic, message["receipt_handle"], 0)
    assert released.status_code == 200, released.text
    assert released.json()["receipt_handle"] is None
    assert released.json()["released"] is True
    wait_dispatched(served.broker.store)
    assert await _receive(served, group, topic) == []  # backoff: 10 s for the first attempt
    again = await _receivable_at(served, clock, clock.now_ms + 10_000, group, topic)
    assert [(item["body"], item["delivery_attempt"]) for item in again] == [("try later", 2)]


async def test_a_retry_copy_is_answered_as_its_origin_with_the_users_properties_only(
        served: Served, clock: FakeClock) -> None:
    """A redelivery read from the retry topic names the message where it was first stored
    (msg_id, topic, queue id and offset), and its properties are the producer's: none of
    the TWINLOG_POP_* properties naming its origin; the fields in the schema's order."""
    group, topic = await _setup(served, queues=1, messages=[
        {"body": "again", "tags": "TagA", "keys": ["k1", "k2"],
         "properties": {"color": "red", "size": "L"}}])
    [first] = await _receive(served, group, topic, invisible_ms=5_000)
    released = await _change(served, group, topic, first["receipt_handle"], 0)
    assert released.status_code == 200, released.text  # a copy due after the backoff (10 s)
    [again] = await _receivable_at(served, clock, clock.now_ms + 10_000, group, topic)
    assert list(again) == list(first) == [
        "msg_id", "topic", "queue_id", "queue_offset", "commit_log_offset", "size_bytes",
        "body", "body_encoding", "keys", "tags", "properties", "idempotency_key",
        "born_timestamp_ms", "store_timestamp_ms", "reconsume_times", "receipt_handle",
        "delivery_attempt", "invisible_until_ms"]
    named = ("msg_id", "topic", "queue_id", "queue_offset", "body", "body_encoding", "keys",
             "tags", "idempotency_key", "born_timestamp_ms")
    assert {name: again[name] for name in named} == {name: first[name] for name in named}
    assert first["properties"] == {"color": "red", "size": "L"}
    assert again["properties"] == first["properties"]
    assert (first["topic"], first["queue_id"], first["keys"], first["tags"]) == \
        (topic, 0, ["k1", "k2"], "TagA")
    assert again["commit_log_offset"] != first["commit_log_offset"]  # the copy's own
    assert (again["delivery_attempt"], again["receipt_handle"] != first["receipt_handle"]) == \
        (2, True)


async def test_a_poison_message_is_dead_lettered_after_exactly_retry_times_max_retries(
        served: Served, clock: FakeClock) -> None:
    group, topic = await _setup(served, queues=1, retry_times_max=2,
                                messages=[{"body": "poison", "tags": "P"}])
    attempts = []
    for _ in range(5):
        received = await _receive(served, group, topic, invisible_ms=1_000)
        attempts += [message["delivery_attempt"] for message in received]
        _expire(served, clock, 1_000)
    assert attempts == [1, 2, 3]  # retry_times_max 2: three deliveries
    response = await served.client.get(f"/v1/topics/%25DLQ%25{group}/queues/0/messages",
                                       params={"body_encoding": "utf8"})
    dead = ConsumeResult.model_validate_json(response.content).messages
    assert [(message.body, message.tags) for message in dead] == [("poison", "P")]
    assert dead[0].properties["TWINLOG_POP_ATTEMPTS"] == "3"
    assert dead[0].properties["TWINLOG_POP_TOPIC"] == topic
    [counts] = await _consumption(served, group)
    assert (counts["dead_lettered"], counts["in_flight"], counts["retrying"]) == (1, 0, 0)
    metrics = (await served.client.get("/metrics")).text
    assert (f'twinlog_pop_messages_ended_total{{group="{group}",outcome="dead_lettered",'
            f'topic="{topic}"}} 1.0') in metrics
    assert (f'twinlog_pop_messages_ended_total{{group="{group}",outcome="retried",'
            f'topic="{topic}"}} 2.0') in metrics


async def test_garbage_foreign_and_mixed_handles(served: Served, clock: FakeClock) -> None:
    group, topic = await _setup(served, queues=1, messages=[{"body": "a"}, {"body": "b"}])
    other_group, _ = await _setup(served, queues=1)
    received = await _receive(served, group, topic)
    handle = received[0]["receipt_handle"]
    garbage = await _ack(served, group, topic, ["not-a-handle"])
    assert garbage.status_code == 400
    assert problem(garbage)["error_code"] == "INVALID_RECEIPT_HANDLE"
    tampered = handle[:-2] + ("AA" if handle[-2:] != "AA" else "BB")
    assert (await _ack(served, group, topic, [tampered])).status_code == 400
    foreign = await _ack(served, other_group, topic, [handle])
    assert foreign.status_code in (400, 404)  # another group's handle is never acked
    mixed = await _ack(served, group, topic, [handle, "garbage", handle])
    assert mixed.status_code == 207, mixed.text
    assert [item["status"] for item in mixed.json()["results"]] == [200, 400, 200]
    change = await _change(served, group, topic, "garbage", 10_000)
    assert change.status_code == 400
    assert problem(change)["error_code"] == "INVALID_RECEIPT_HANDLE"


async def test_tag_filters_deliver_matching_messages_and_consume_the_rest(
        served: Served, clock: FakeClock) -> None:
    group, topic = await _setup(served, queues=1, messages=[
        {"body": "a1", "tags": "A"}, {"body": "b1", "tags": "B"}, {"body": "c1", "tags": "C"},
        {"body": "n1"}, {"body": "a2", "tags": "A"}])
    received = await _receive(served, group, topic, tags="A || C")
    assert [message["body"] for message in received] == ["a1", "c1", "a2"]
    ack = await _ack(served, group, topic, [message["receipt_handle"] for message in received])
    assert ack.status_code == 200
    wait_dispatched(served.broker.store)
    lag = (await served.client.get(f"/v1/groups/{group}/lag")).json()
    assert lag["total_lag"] == 0  # the filtered-out ones count as consumed
    per_queue = await served.client.get(f"/v1/topics/{topic}/queues/0/messages",
                                        params={"tags": "B", "body_encoding": "utf8"})
    document = per_queue.json()
    assert [message["body"] for message in document["messages"]] == ["b1"]
    assert document["next_offset"] == 5
    none = await served.client.get(f"/v1/topics/{topic}/queues/0/messages",
                                   params={"tags": "Z || Y", "body_encoding": "utf8"})
    assert none.status_code == 200, none.text  # no message of those tags: an empty answer
    assert none.json()["messages"] == [] and none.json()["next_offset"] == 5


async def test_a_receive_behind_many_filtered_messages_answers_empty_and_passes_them(
        served: Served, clock: FakeClock) -> None:
    """3,000 messages of another tag, more than a queue's window holds (pop_window_max,
    1,024): a receive for tag A answers empty, a long poll too (after its wait), each passing
    hundreds of them (a bounded scan: about 576 here); a few receives pass them all, which
    then count as consumed (lag 0, the group offset at their end), and an A produced after
    them is received."""
    filtered = 3_000
    group, topic = await _setup(served, queues=1)
    store = served.broker.store  # (in the store's batches: the gateway's are 10 at most)
    for start in range(0, filtered, 500):
        results = store.put_messages([Message(topic, b"b", {PROPERTY_TAGS: "B"}, queue_id=0)
                                      for _ in range(start, start + 500)])
        assert all(result.status is PutMessageStatus.PUT_OK for result, _ in results)
    wait_dispatched(store)
    assert await _receive(served, group, topic, tags="A") == []
    assert await _receive(served, group, topic, tags="A", wait_ms=200) == []
    receives = 2
    while await _group_offsets(served, group) != [filtered]:
        assert receives < filtered // 500 + 2, "a receive passed fewer than 500 of them"
        assert await _receive(served, group, topic, tags="A") == []
        receives += 1
        wait_dispatched(served.broker.store)
    assert (await served.client.get(f"/v1/groups/{group}/lag")).json()["total_lag"] == 0
    [counts] = await _consumption(served, group)
    assert (counts["ready"], counts["in_flight"]) == (0, 0)
    response = await served.client.post(f"/v1/topics/{topic}/messages", json={
        "body": "wanted", "tags": "A", "body_encoding": "utf8"})
    assert response.status_code == 201, response.text
    wait_dispatched(served.broker.store)
    [message] = await _receive(served, group, topic, tags="A")
    assert (message["body"], message["queue_offset"]) == ("wanted", filtered)


async def _group_offsets(served: Served, group: str) -> list[int]:
    response = await served.client.get(f"/v1/groups/{group}/offsets")
    return [offset["offset"] for offset in response.json()["offsets"]]


async def test_an_order_key_holds_the_next_message_until_the_previous_is_acked(
        served: Served, clock: FakeClock) -> None:
    group, topic = await _setup(served, queues=1, messages=[
        {"body": "k1", "properties": {"MESSAGE_GROUP": "k"}},
        {"body": "k2", "properties": {"MESSAGE_GROUP": "k"}},
        {"body": "free"}])
    first = await _receive(served, group, topic)
    assert [message["body"] for message in first] == ["k1", "free"]
    assert await _receive(served, group, topic) == []
    _expire(served, clock, 10_000)  # k1 expires: retried in place, still ahead of k2
    again = await _receive(served, group, topic)
    assert [(message["body"], message["delivery_attempt"]) for message in again] == \
        [("k1", 2), ("free", 2)]
    assert (await _ack(served, group, topic, [again[0]["receipt_handle"]])).status_code == 200
    wait_dispatched(served.broker.store)
    assert [message["body"] for message in await _receive(served, group, topic)] == ["k2"]


async def test_bad_requests_are_4xx_problems(served: Served, clock: FakeClock) -> None:
    group, topic = await _setup(served, queues=1, messages=[{"body": "x"}])
    path = f"/v1/groups/{group}/topics/{topic}/messages:receive"
    for fields, code in (({"invisible_ms": 999}, "INVALID_INVISIBLE_TIME"),
                         ({"invisible_ms": 13 * 3_600_000}, "INVALID_INVISIBLE_TIME"),
                         ({"tags": "A || "}, "INVALID_TAG_EXPRESSION"),
                         ({"max_messages": 1025}, "VALIDATION_FAILED")):
        response = await served.client.post(path, json={"invisible_ms": 10_000, **fields})
        assert response.status_code == 400, response.text
        assert problem(response)["error_code"] == code
    missing = await served.client.post(f"/v1/groups/nobody/topics/{topic}/messages:receive",
                                       json={})
    assert problem(missing)["error_code"] == "GROUP_NOT_FOUND"
    too_many = await _ack(served, group, topic, ["x"] * 1025)
    assert too_many.status_code == 400
    assert (await _ack(served, group, topic, [])).status_code == 400


async def test_past_the_in_flight_bound_a_receive_answers_fewer_then_429(
        tmp_path: Path) -> None:
    async with serving(_settings(tmp_path / "b", pop_in_flight_per_group_max=3)) as served:
        served.broker.consumption.clock_ms = FakeClock(NOW_MS)
        group, topic = await _setup(served, queues=1,
                                    messages=[{"body": f"m{n}"} for n in range(5)])
        assert len(await _receive(served, group, topic, max_messages=2)) == 2
        assert len(await _receive(served, group, topic, max_messages=2)) == 1
        response = await served.client.post(
            f"/v1/groups/{group}/topics/{topic}/messages:receive", json={})
        assert response.status_code == 429
        assert response.headers["retry-after"] == "1"
        assert problem(response)["error_code"] == "POP_IN_FLIGHT_MAX_REACHED"


async def test_in_flight_and_acked_messages_survive_a_restart(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "b")
    clock = FakeClock(NOW_MS)
    async with serving(settings) as served:
        served.broker.consumption.clock_ms = clock
        group, topic = await _setup(served, queues=1,
                                    messages=[{"body": f"m{n}"} for n in range(4)])
        received = await _receive(served, group, topic, max_messages=3, invisible_ms=20_000)
        assert (await _ack(served, group, topic, [received[1]["receipt_handle"]])).status_code \
            == 200
    async with serving(settings) as served:
        served.broker.consumption.clock_ms = clock
        after = await _receive(served, group, topic, invisible_ms=60_000)
        assert [message["body"] for message in after] == ["m3"]  # m0, m2 still invisible
        clock.now_ms += 20_000
        served.broker.expire_deliveries()
        wait_dispatched(served.broker.store)
        back = await _receive(served, group, topic)
        assert sorted((message["body"], message["delivery_attempt"]) for message in back) == \
            [("m0", 2), ("m2", 2)]  # m1 was acked: never again
        stale = await _ack(served, group, topic, [received[1]["receipt_handle"]])
        assert stale.status_code == 409
        fresh = await _ack(served, group, topic, [received[0]["receipt_handle"]])
        assert fresh.status_code == 409  # redelivered since


async def test_a_big_receive_and_ack_fit_records_of_bounded_size(served: Served,
                                                                 clock: FakeClock) -> None:
    """A receive of 1,024 messages and their ack in one request are split into records that
    each fit message_size_max_bytes (16 KiB here); one record for them all did not."""
    group, topic = await _setup(served, queues=1)
    for start in range(0, 1100, 10):
        response = await served.client.post(f"/v1/topics/{topic}/messages:batch", json={
            "messages": [{"body": f"b{number}"} for number in range(start, start + 10)]})
        assert response.status_code == 201, response.text
    wait_dispatched(served.broker.store)
    received = await _receive(served, group, topic, max_messages=1024)
    assert len(received) == 1024
    response = await _ack(served, group, topic, [item["receipt_handle"] for item in received])
    assert response.status_code == 200, response.text
    rest = await _receive(served, group, topic, max_messages=1024)
    assert len(rest) == 1100 - 1024


async def test_dispatch_applies_the_masters_own_records_without_decoding_them(
        served: Served, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """The master keeps each record it applied ahead until dispatch reaches it: dispatch
    applies the record kept instead of decoding its bytes, and still writes the group offset
    it moved."""
    group, topic = await _setup(served, queues=1, messages=[{"body": f"m{n}"} for n in range(5)])
    while _expire(served, clock, 0):  # the earlier tests' deliveries, due on this clock
        pass
    consumption = served.broker.consumption
    decoded: list[bytes] = []

    def counted(body: bytes) -> PopRecord:
        decoded.append(body)
        return decode(body)

    monkeypatch.setattr(consumption_module, "decode", counted)
    taken = consumption.ahead.taken
    received = await _receive(served, group, topic, max_messages=5, invisible_ms=5_000)
    acked = await _ack(served, group, topic, [item["receipt_handle"] for item in received[:3]])
    assert acked.status_code == 200, acked.text
    assert _expire(served, clock, 5_000) == 2
    wait_dispatched(served.broker.store)
    assert decoded == []
    assert consumption.ahead.taken - taken == 3  # the receive's, the ack's, the expiry's
    assert len(consumption.ahead) == 0
    lag = (await served.client.get(f"/v1/groups/{group}/lag")).json()
    assert [queue["consumer_offset"] for queue in lag["queues"]] == [3]  # m3, m4 in place
    assert [(item["body"], item["delivery_attempt"])
            for item in await _receive(served, group, topic)] == [("m3", 2), ("m4", 2)]


async def test_a_masters_delivery_ids_start_at_its_epoch(served: Served, clock: FakeClock) -> None:
    """A classic master hands out delivery ids from its HA epoch << 32 on: a slave promoted
    (a new epoch) after its master answered a receive whose record it never got hands out
    none of that receive's ids, so the lost receive's handles stay stale and never ack a
    delivery of the new master (as a DLedger leader does from its term)."""
    group, topic = await _setup(served, queues=1, messages=[{"body": "x"}, {"body": "y"}])
    broker = served.broker
    assert broker.replication is not None and broker.replication.service is not None
    epoch = broker.replication.service.epochs[-1].number
    assert epoch >= 1
    received = await _receive(served, group, topic, max_messages=2)
    codec = broker.consumption.codec
    handles = [codec.decode_for(item["receipt_handle"], group=group, topic=topic)
               for item in received]
    assert [handle.delivery_id >> 32 for handle in handles] == [epoch, epoch]
    earlier = codec.encode(handles[0]._replace(delivery_id=1))  # an earlier epoch's
    stale = await _ack(served, group, topic, [earlier])
    assert stale.status_code == 409, stale.text
    acked = await _ack(served, group, topic, [item["receipt_handle"] for item in received])
    assert acked.status_code == 200, acked.text


# -- a group's own backoff: set on create and update, shown, validated, used ---------------

EXPONENTIAL = {"policy": "exponential", "initial_ms": 2_000, "multiplier": 3.0,
               "max_ms": 60_000}


async def _release(served: Served, group: str, topic: str, handle: str) -> None:
    response = await _change(served, group, topic, handle, 0)
    assert response.status_code == 200, response.text
    assert response.json()["released"] is True
    wait_dispatched(served.broker.store)


async def _receivable_at(served: Served, clock: FakeClock, at_ms: int, group: str,
                         topic: str, wait_s: float = RECEIVABLE_WAIT_S) -> list[dict[str, Any]]:
    """What a receive gets once the clock reads `at_ms` and the scheduler had its turn (up
    to `wait_s`: it puts due copies on its own thread; a check that nothing comes gives
    NOTHING_WAIT_S)."""
    clock.now_ms = at_ms
    timers = served.broker.timers
    assert timers is not None
    timers.wake()
    deadline_s = time.monotonic() + wait_s
    while True:
        wait_dispatched(served.broker.store)
        received = await _receive(served, group, topic)
        if received or time.monotonic() > deadline_s:
            return received
        await asyncio.sleep(0.01)


async def test_two_groups_release_after_their_own_backoffs(served: Served,
                                                           clock: FakeClock) -> None:
    fast, topic = await _setup(served, queues=1, messages=[{"body": "work"}],
                               backoff=EXPONENTIAL)
    table = (await _group(served, backoff={"policy": "table"}))["name"]
    default = (await _group(served))["name"]  # the broker's pop_backoff: the table
    released_at = clock.now_ms
    for group in (fast, table, default):
        [message] = await _receive(served, group, topic)
        await _release(served, group, topic, message["receipt_handle"])
    # fast: 2 s, then 6 s (x3); table and default: 10 s.
    assert await _receivable_at(served, clock, released_at + 1_500, fast, topic,
                                NOTHING_WAIT_S) == []
    [again] = await _receivable_at(served, clock, released_at + 2_000, fast, topic)
    assert again["delivery_attempt"] == 2
    assert await _receive(served, table, topic) == []
    assert await _receive(served, default, topic) == []
    await _release(served, fast, topic, again["receipt_handle"])  # at +2 s: 6 s more
    assert await _receivable_at(served, clock, released_at + 7_500, fast, topic,
                                NOTHING_WAIT_S) == []
    [third] = await _receivable_at(served, clock, released_at + 8_000, fast, topic)
    assert third["delivery_attempt"] == 3
    assert await _receivable_at(served, clock, released_at + 9_500, table, topic,
                                NOTHING_WAIT_S) == []
    assert await _receive(served, default, topic) == []
    for group in (table, default):
        [late] = await _receivable_at(served, clock, released_at + 10_000, group, topic)
        assert (late["body"], late["delivery_attempt"]) == ("work", 2)


async def test_an_update_changes_the_backoff_of_later_releases(served: Served,
                                                               clock: FakeClock) -> None:
    group, topic = await _setup(served, queues=1, messages=[{"body": "later"}])
    response = await served.client.patch(f"/v1/groups/{group}", json={"backoff": EXPONENTIAL})
    assert response.status_code == 200, response.text
    assert response.json()["backoff"] == EXPONENTIAL
    assert response.json()["updated_at_ms"] >= response.json()["created_at_ms"]
    [message] = await _receive(served, group, topic)
    released_at = clock.now_ms
    await _release(served, group, topic, message["receipt_handle"])
    [again] = await _receivable_at(served, clock, released_at + 2_000, group, topic)
    assert again["delivery_attempt"] == 2
    response = await served.client.patch(f"/v1/groups/{group}", json={"backoff": None})
    assert response.status_code == 200, response.text
    assert response.json()["backoff"] is None  # the broker's default again
    await _release(served, group, topic, again["receipt_handle"])
    # The table's second level: 30 s.
    assert await _receivable_at(served, clock, released_at + 2_000 + 29_000, group,
                                topic, NOTHING_WAIT_S) == []
    [third] = await _receivable_at(served, clock, released_at + 2_000 + 30_000, group, topic)
    assert third["delivery_attempt"] == 3


async def test_the_backoff_shows_on_describe_and_list_and_patch_keeps_what_it_leaves_out(
        served: Served, clock: FakeClock) -> None:
    created = await _group(served, retry_times_max=3, backoff={"policy": "exponential",
                                                                "initial_ms": 500})
    name = created["name"]
    shown = {"policy": "exponential", "initial_ms": 500, "multiplier": 2.0,
             "max_ms": 7_200_000}
    assert created["backoff"] == shown
    described = (await served.client.get(f"/v1/groups/{name}")).json()
    assert described == created
    listed = (await served.client.get("/v1/groups")).json()["groups"]
    assert [group["backoff"] for group in listed if group["name"] == name] == [shown]
    patched = await served.client.patch(f"/v1/groups/{name}", json={"retry_times_max": 5})
    assert patched.status_code == 200, patched.text
    assert (patched.json()["retry_times_max"], patched.json()["backoff"]) == (5, shown)
    unknown = await served.client.patch("/v1/groups/nobody-here", json={"retry_times_max": 5})
    assert problem(unknown)["error_code"] == "GROUP_NOT_FOUND"


@pytest.mark.parametrize("backoff", [
    {"policy": "levels"},
    {"policy": "exponential", "initial_ms": 0},
    {"policy": "exponential", "initial_ms": 5_000, "max_ms": 7_200_001},
    {"policy": "exponential", "initial_ms": 5_000, "multiplier": 0.5},
    {"policy": "exponential", "initial_ms": 5_000, "multiplier": 10.5},
    {"policy": "exponential", "initial_ms": "5000"},
    {"policy": "exponential", "initial_ms": 5_000, "extra": 1},
    "table",
])
async def test_a_bad_backoff_is_a_400_on_create_and_update(served: Served, clock: FakeClock,
                                                           backoff: Any) -> None:
    response = await served.client.post("/v1/groups", json={"name": f"g{next(_names)}",
                                                            "backoff": backoff})
    assert response.status_code == 400, response.text
    assert problem(response)["error_code"] == "VALIDATION_FAILED"
    name = (await _group(served))["name"]
    response = await served.client.patch(f"/v1/groups/{name}", json={"backoff": backoff})
    assert response.status_code == 400, response.text
    described = (await served.client.get(f"/v1/groups/{name}")).json()
    assert described["backoff"] is None


@pytest.mark.parametrize(("backoff", "shown"), [
    ({"policy": "table", "initial_ms": 1_000},
     {"policy": "table", "initial_ms": None, "multiplier": None, "max_ms": None}),
    ({"policy": "exponential"},
     {"policy": "exponential", "initial_ms": 5_000, "multiplier": 2.0, "max_ms": 7_200_000}),
    ({"policy": "exponential", "initial_ms": 5_000, "max_ms": 4_000},
     {"policy": "exponential", "initial_ms": 4_000, "multiplier": 2.0, "max_ms": 4_000}),
])
async def test_every_backoff_the_schema_allows_is_taken_with_its_meaning(
        served: Served, clock: FakeClock, backoff: dict[str, Any],
        shown: dict[str, Any]) -> None:
    """No rule joins two backoff fields (a schema-valid body is never refused: the contract
    fuzzer's finding): the table policy ignores the exponential fields, initial_ms defaults to
    5 s, and max_ms caps the first delay as every other."""
    response = await served.client.post("/v1/groups", json={"name": f"g{next(_names)}",
                                                            "backoff": backoff})
    assert response.status_code == 201, response.text
    assert response.json()["backoff"] == shown
    name = (await _group(served))["name"]
    response = await served.client.patch(f"/v1/groups/{name}", json={"backoff": backoff})
    assert response.status_code == 200, response.text
    assert response.json()["backoff"] == shown

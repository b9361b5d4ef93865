"""Group consumption in DLedger mode, in process (a one-member group: it elects itself):
receive, ack, change and the expiry's retries and dead letters are records the leader puts
through its member, answered 200 once committed, and applied by dispatch on commit; retries
wait as DLedger delayed messages; a record cut from the member's log (a next leader's log
lacks it) leaves the states as the committed log gives them."""

# ruff: noqa: F811 (the `clock` fixture of test_receive, imported, is a test argument)
from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.api.schemas.messages import ConsumeResult
from app.broker.dledger_consumption import DLedgerPopAppender, rebuild
from store.consumption.events import Candidate
from store.consumption.policy import RetryPolicy
from store.consumption.records import PopRecord, QueueKey, decode, is_pop_op
from store.consumption.tags import TagFilter
from store.system_topics import METADATA_TOPIC, PROPERTY_OP
from tests.app.api.test_dledger_metadata import _leading
from tests.app.api.test_receive import (  # noqa: F401 (clock: a fixture used by name)
    _ack,
    _change,
    _consumption,
    _expire,
    _receive,
    _setup,
    clock,
)
from tests.support.app import Served
from tests.support.store import wait_dispatched, wait_until
from tests.support.timers import FakeClock

pytestmark = pytest.mark.anyio

_POP = {"pop_invisible_ms_min": 1_000, "pop_expiry_interval_ms": 60_000,
        "pop_expiry_gap_ms": 60_000,
        "delay_levels": "1s 2s", "timer_precision_ms": 100}


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    async with _leading(tmp_path_factory.mktemp("popdl"), **_POP) as running:
        yield running


def _pop_records(served: Served) -> list[Any]:
    """The pop records of the member's committed log, decoded, in log order."""
    store = served.broker.store
    records = store.get_messages(METADATA_TOPIC, 0, 0, 10_000).messages
    return [decode(record.body) for record in records
            if is_pop_op(record.properties.get(PROPERTY_OP, ""))]


async def test_receive_change_and_ack_are_committed_records(served: Served,
                                                            clock: FakeClock) -> None:
    group, topic = await _setup(served, messages=[{"body": f"m{n}"} for n in range(4)])
    before = len(_pop_records(served))
    received = await _receive(served, group, topic, max_messages=10)
    assert sorted(message["body"] for message in received) == ["m0", "m1", "m2", "m3"]
    assert await _receive(served, group, topic) == []  # all in flight
    first, *rest = received
    changed = await _change(served, group, topic, first["receipt_handle"], 60_000)
    assert changed.status_code == 200, changed.text
    assert changed.json()["status"] == "PUT_OK"
    handles = [changed.json()["receipt_handle"]] + [item["receipt_handle"] for item in rest]
    acked = await _ack(served, group, topic, handles)
    assert acked.status_code == 200, acked.text
    assert acked.json()["status"] == "PUT_OK"
    stale = await _ack(served, group, topic, [first["receipt_handle"]])
    assert stale.status_code == 409
    ops = [record.op for record in _pop_records(served)[before:]]
    assert ops.count("pop.received") >= 1 and "pop.changed" in ops and "pop.acked" in ops
    assert _expire(served, clock, 120_000) == 0
    assert await _receive(served, group, topic) == []
    lag = (await served.client.get(f"/v1/groups/{group}/lag")).json()
    assert lag["total_lag"] == 0
    assert lag["consumption"][0]["acked"] == 4


async def test_a_release_waits_as_a_delayed_message_then_expiry_dead_letters_it(
        served: Served, clock: FakeClock) -> None:
    """retry_times_max 1: a release puts the message, delayed by the backoff (10 s), into
    the retry topic through the member, and the leader's timer scheduler delivers it; its
    second delivery expires and the message is dead-lettered."""
    group, topic = await _setup(served, queues=1, retry_times_max=1,
                                messages=[{"body": "poison", "tags": "P"}])
    [first] = await _receive(served, group, topic, invisible_ms=1_000)
    released = await _change(served, group, topic, first["receipt_handle"], 0)
    assert released.status_code == 200, released.text
    assert released.json()["status"] == "PUT_OK"
    assert await _receive(served, group, topic) == []  # the backoff: 10 s
    clock.now_ms += 10_000
    timers = served.broker.timers
    assert timers is not None
    again: list[dict[str, Any]] = []
    for _ in range(200):  # the scheduler delivers the copy on its thread, through the member
        timers.wake()
        wait_dispatched(served.broker.store)
        again = await _receive(served, group, topic, invisible_ms=1_000)
        if again:
            break
    assert [(item["body"], item["delivery_attempt"]) for item in again] == [("poison", 2)]
    assert _expire(served, clock, 1_000) == 1
    wait_until(lambda: len(served.broker.store.get_messages(
        f"%DLQ%{group}", 0, 0, 10).messages) == 1)
    response = await served.client.get(f"/v1/topics/%25DLQ%25{group}/queues/0/messages",
                                       params={"body_encoding": "utf8"})
    [letter] = ConsumeResult.model_validate_json(response.content).messages
    assert (letter.body, letter.properties["TWINLOG_POP_ATTEMPTS"]) == ("poison", "2")
    [counts] = await _consumption(served, group)
    assert (counts["dead_lettered"], counts["in_flight"]) == (1, 0)


async def test_states_cut_from_the_log_are_rebuilt_from_the_committed_log(
        served: Served, clock: FakeClock) -> None:
    """A receive applied ahead of the commit whose record a next leader's log cut (here: a
    record applied to the states and put in no log): the cut's listener rebuilds the states
    from the committed log, so the message is receivable again at once."""
    group, topic = await _setup(served, queues=1, messages=[{"body": "kept"}])
    broker = served.broker
    consumption = broker.consumption
    appender = consumption.appender
    assert isinstance(appender, DLedgerPopAppender) and broker.dledger is not None
    [message] = await _receive(served, group, topic)
    acked = await _ack(served, group, topic, [message["receipt_handle"]])
    assert acked.status_code == 200, acked.text
    await _setup_more(served, topic)
    key = QueueKey(group, topic, 0)
    state = consumption.registry.state(key)
    assert state is not None
    reads = broker.store.get_messages(topic, 0, state.scan_offset, 1).messages
    event = state.plan_receive(now_ms=clock.now_ms, max_messages=1, invisible_ms=60_000,
                               candidates=[Candidate(item.queue_offset) for item in reads],
                               tag_filter=TagFilter.parse("*"), policy=RetryPolicy())
    with consumption.state_lock:
        consumption.registry.apply(PopRecord(key, (event,), clock.now_ms))
    assert await _receive(served, group, topic) == []  # held by what no log holds
    store = broker.store
    appender.ahead_end_offset = store.max_offset + 200  # as if it were appended there
    on_cut = broker.dledger.storage.log.on_cut
    assert on_cut is not None
    on_cut(store.max_offset + 200)  # a cut above it takes nothing
    assert await _receive(served, group, topic) == []
    on_cut(store.max_offset)
    [again] = await _receive(served, group, topic)
    assert (again["body"], again["delivery_attempt"]) == ("second", 1)
    assert (await _ack(served, group, topic, [again["receipt_handle"]])).status_code == 200
    [counts] = await _consumption(served, group)
    assert (counts["acked"], counts["in_flight"]) == (2, 0)


async def _setup_more(served: Served, topic: str) -> None:
    response = await served.client.post(f"/v1/topics/{topic}/messages",
                                        json={"body_encoding": "utf8", "body": "second"})
    assert response.status_code == 201, response.text
    wait_dispatched(served.broker.store)


async def test_a_leaders_delivery_ids_start_at_its_term(served: Served,
                                                        clock: FakeClock) -> None:
    """A leader hands out delivery ids from its term << 32 on: a handle from a receive a
    previous leader answered but its group lost names an id this leader never hands out, so
    it stays stale (the kill -9 test met such a handle acking a new delivery)."""
    group, topic = await _setup(served, queues=1, messages=[{"body": "x"}, {"body": "y"}])
    broker = served.broker
    assert broker.dledger is not None
    term = broker.dledger.leading_term()
    assert term is not None and term >= 1
    received = await _receive(served, group, topic, max_messages=2)
    codec = broker.consumption.codec
    ids = [codec.decode_for(item["receipt_handle"], group=group, topic=topic).delivery_id
           for item in received]
    assert all(delivery_id >> 32 == term for delivery_id in ids), ids
    handle = codec.decode_for(received[0]["receipt_handle"], group=group, topic=topic)
    lost = codec.encode(handle._replace(delivery_id=1))  # a previous term's id
    stale = await _ack(served, group, topic, [lost])
    assert stale.status_code == 409
    acked = await _ack(served, group, topic, [item["receipt_handle"] for item in received])
    assert acked.status_code == 200


async def test_a_deleted_groups_states_stay_gone_when_the_member_rebuilds(
        served: Served, clock: FakeClock) -> None:
    """The delete's committed entry drops the group's states on the member, and a rebuild
    from the committed log (after a cut) replays it too: the group's receive records before
    it start nothing again. Created again, the group starts fresh; the old handle is stale."""
    group, topic = await _setup(served, queues=1, messages=[{"body": "p"}, {"body": "q"}])
    [old] = await _receive(served, group, topic, max_messages=1)
    response = await served.client.delete(f"/v1/groups/{group}")
    assert response.status_code == 204, response.text
    wait_dispatched(served.broker.store)
    consumption = served.broker.consumption
    assert consumption.registry.topics_of(group) == []
    rebuild(consumption, served.broker.store)
    assert consumption.registry.topics_of(group) == []
    response = await served.client.post("/v1/groups", json={"name": group})
    assert response.status_code == 201, response.text
    fresh = await _receive(served, group, topic, max_messages=10)
    assert [(item["body"], item["delivery_attempt"]) for item in fresh] == [("p", 1), ("q", 1)]
    assert (await _ack(served, group, topic, [old["receipt_handle"]])).status_code == 409
    acked = await _ack(served, group, topic, [item["receipt_handle"] for item in fresh])
    assert acked.status_code == 200, acked.text

"""FIFO groups through the app: a FIFO group delivers each queue's messages one at a time in
offset order (keyless ones too), retries in place and moves on only once the one before is
acked or dead-lettered; keyed messages keep their own keys; the flag is set on create and
update, shown, validated, and a change applies from the queue's next receive; each receive's
record carries the mode, so a replica applying the log holds the master's states."""

from __future__ import annotations

from typing import Any

import pytest

from store.consumption.records import QueueKey, decode, is_pop_op
from store.consumption.registry import ConsumptionRegistry
from store.system_topics import METADATA_TOPIC, PROPERTY_OP
from tests.app.api import test_receive
from tests.app.api.test_receive import (
    _ack,
    _change,
    _consumption,
    _expire,
    _group,
    _receive,
    _setup,
)
from tests.support.app import Served, problem
from tests.support.store import wait_dispatched
from tests.support.timers import FakeClock

pytestmark = pytest.mark.anyio
# test_receive's fixtures: a broker of this module's own, and its fake clock.
served = test_receive.served
clock = test_receive.clock


def _bodies(messages: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(message["body"], message["delivery_attempt"]) for message in messages]


async def _acked(served: Served, group: str, topic: str, message: dict[str, Any]) -> None:
    response = await _ack(served, group, topic, [message["receipt_handle"]])
    assert response.status_code == 200, response.text
    wait_dispatched(served.broker.store)


async def test_a_fifo_group_delivers_a_queue_one_message_at_a_time_in_order(
        served: Served, clock: FakeClock) -> None:
    """m1 is not receivable while m0 is in flight; an expired m1 comes back before m2 (in
    place, not through the retry topic); m2 only once m1 is dead-lettered after its last
    attempt. A group not FIFO on the same topic gets all three at once."""
    group, topic = await _setup(served, queues=1, retry_times_max=1, fifo=True,
                                messages=[{"body": f"m{n}"} for n in range(3)])
    parallel = (await _group(served))["name"]
    everything = await _receive(served, parallel, topic)
    assert sorted(_bodies(everything)) == [("m0", 1), ("m1", 1), ("m2", 1)]
    response = await _ack(served, parallel, topic, [m["receipt_handle"] for m in everything])
    assert response.status_code == 200, response.text
    [first] = await _receive(served, group, topic, max_messages=10)
    assert _bodies([first]) == [("m0", 1)]
    assert await _receive(served, group, topic) == []
    await _acked(served, group, topic, first)
    [second] = await _receive(served, group, topic, max_messages=10)
    assert _bodies([second]) == [("m1", 1)]
    assert _expire(served, clock, 10_000) == 1  # retried in place: still ahead of m2
    [again] = await _receive(served, group, topic, max_messages=10)
    assert _bodies([again]) == [("m1", 2)]
    released = await _change(served, group, topic, again["receipt_handle"], 0)
    assert released.status_code == 200, released.text  # its last attempt: dead-lettered
    wait_dispatched(served.broker.store)
    [third] = await _receive(served, group, topic, max_messages=10)
    assert _bodies([third]) == [("m2", 1)]
    [counts] = await _consumption(served, group)
    assert (counts["acked"], counts["dead_lettered"], counts["in_flight"],
            counts["retrying"]) == (1, 1, 1, 0)
    retry_topic = f"%RETRY%{group}_{topic}"
    assert served.broker.store.queues.topics().get(retry_topic) is None  # nothing copied


async def test_keyed_messages_of_a_fifo_group_keep_their_own_keys(
        served: Served, clock: FakeClock) -> None:
    group, topic = await _setup(served, queues=1, fifo=True, messages=[
        {"body": "a"}, {"body": "k1", "properties": {"MESSAGE_GROUP": "k"}},
        {"body": "b"}, {"body": "k2", "properties": {"MESSAGE_GROUP": "k"}}])
    first = await _receive(served, group, topic, max_messages=10)
    assert _bodies(first) == [("a", 1), ("k1", 1)]
    await _acked(served, group, topic, first[1])
    assert _bodies(await _receive(served, group, topic, max_messages=10)) == [("k2", 1)]
    await _acked(served, group, topic, first[0])
    assert _bodies(await _receive(served, group, topic, max_messages=10)) == [("b", 1)]


async def test_a_change_of_the_flag_applies_from_the_queue_s_next_receive(
        served: Served, clock: FakeClock) -> None:
    """Turned on with m0 in flight, the queue gives nothing until m0 is acked, then one at a
    time; turned off, the rest come at once. Each receive's record says the mode it was
    decided in, and a registry fed the log's records (a replica's) holds the master's
    states, modes included."""
    group, topic = await _setup(served, queues=1,
                                messages=[{"body": f"m{n}"} for n in range(4)])
    [first] = await _receive(served, group, topic, max_messages=1)
    response = await served.client.patch(f"/v1/groups/{group}", json={"fifo": True})
    assert response.status_code == 200, response.text
    assert response.json()["fifo"] is True
    assert await _receive(served, group, topic, max_messages=10) == []
    await _acked(served, group, topic, first)
    [second] = await _receive(served, group, topic, max_messages=10)
    assert _bodies([second]) == [("m1", 1)]
    key = QueueKey(group, topic, 0)
    master = served.broker.consumption.registry
    assert _replica(served, key).images()[0] == _images_of(master, key)
    assert _images_of(master, key)[0].fifo is True
    response = await served.client.patch(f"/v1/groups/{group}", json={"fifo": False})
    assert response.status_code == 200, response.text
    assert _bodies(await _receive(served, group, topic, max_messages=10)) == [
        ("m2", 1), ("m3", 1)]
    # m0; m1 to m3 taken into the window, none delivered; m1; m2 and m3.
    assert [record.fifo for record in _receives(served, key)] == [False, True, True, False]
    assert _replica(served, key).images()[0] == _images_of(master, key)
    assert _images_of(master, key)[0].fifo is False


def _receives(served: Served, key: QueueKey) -> list[Any]:
    store = served.broker.store
    wait_dispatched(store)
    records = [decode(message.body)
               for message in store.get_messages(METADATA_TOPIC, 0, 0, 10_000).messages
               if is_pop_op(message.properties.get(PROPERTY_OP, ""))]
    return [record for record in records if record.key == key and record.op == "pop.received"]


def _replica(served: Served, key: QueueKey) -> ConsumptionRegistry:
    """A registry fed the queue's records of the log, in order, as a replica's dispatch."""
    store = served.broker.store
    wait_dispatched(store)
    replica = ConsumptionRegistry(window_max=served.broker.settings.pop_window_max)
    for message in store.get_messages(METADATA_TOPIC, 0, 0, 10_000).messages:
        if is_pop_op(message.properties.get(PROPERTY_OP, "")):
            record = decode(message.body)
            if record.key == key:
                replica.apply(record)
    return replica


def _images_of(registry: ConsumptionRegistry, key: QueueKey) -> Any:
    queues, _ = registry.images()
    return [image for image in queues if image.key == key]


async def test_the_flag_shows_on_describe_and_list_and_patch_keeps_it(
        served: Served, clock: FakeClock) -> None:
    created = await _group(served, fifo=True)
    name = created["name"]
    assert created["fifo"] is True
    assert (await served.client.get(f"/v1/groups/{name}")).json() == created
    listed = (await served.client.get("/v1/groups")).json()["groups"]
    assert [group["fifo"] for group in listed if group["name"] == name] == [True]
    patched = await served.client.patch(f"/v1/groups/{name}", json={"retry_times_max": 5})
    assert (patched.json()["retry_times_max"], patched.json()["fifo"]) == (5, True)
    assert (await _group(served))["fifo"] is False
    for bad in ("yes", 1, None):
        response = await served.client.post("/v1/groups", json={"name": "gx", "fifo": bad})
        assert response.status_code == 400, response.text
        assert problem(response)["error_code"] == "VALIDATION_FAILED"
    response = await served.client.patch(f"/v1/groups/{name}", json={"fifo": "no"})
    assert response.status_code == 400, response.text
    assert (await served.client.get(f"/v1/groups/{name}")).json()["fifo"] is True

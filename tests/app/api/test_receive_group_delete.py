"""A deleted group takes its consumption state with it: the delete's record, applied in log
order on the master, on a slave fed its log and in the replay at a restart, drops the group's
queue states, in-flight deliveries and counts, and a snapshot written after it holds none of
them. A group created again under the name starts as a fresh group does (at the queue's first
offset, nothing in flight), and the old group's handles are stale for it (409). Copies the
deleted group put into its retry topic are data: they stay, until the topic is deleted."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from store import GetMessageStatus
from store.consumption.names import retry_topic
from store.consumption.snapshot import snapshot_pops
from store.system_topics import METADATA_TOPIC, PROPERTY_OP
from tests.app.api.test_receive import (
    _ack,
    _change,
    _consumption,
    _expire,
    _receive,
    _settings,
    _setup,
)
from tests.app.api.test_receive import clock as clock  # noqa: F401 (a fixture)
from tests.app.api.test_topic_catch_up import _slave
from tests.support.app import Served, problem, serving
from tests.support.store import wait_dispatched
from tests.support.timers import FakeClock

pytestmark = pytest.mark.anyio

GROUPS_CYCLED = 20
HOLD_S = 10.0  # a held apply gives up past this (a test that never releases fails, not hangs)
POLLS_MAX = 2_000


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    async with serving(_settings(tmp_path_factory.mktemp("group-delete"))) as running:
        yield running


async def _delete(served: Served, group: str) -> None:
    response = await served.client.delete(f"/v1/groups/{group}")
    assert response.status_code == 204, response.text
    wait_dispatched(served.broker.store)


async def _create(served: Served, group: str) -> None:
    response = await served.client.post("/v1/groups", json={"name": group})
    assert response.status_code == 201, response.text


def _states_of(served: Served, group: str) -> list[Any]:
    """The group's queue images and counts; a queue's only once a record scanned it (the
    master's state of a queue a receive visited and found empty has no record: only the
    master holds it)."""
    queues, counts = served.broker.consumption.registry.images()
    return [image for image in queues if image.group == group and image.scan_offset] + \
        [image for image in counts if image.group == group]


async def test_a_group_created_again_starts_fresh_and_old_handles_are_stale(
        served: Served, clock: FakeClock) -> None:
    group, topic = await _setup(served, queues=1,
                                messages=[{"body": f"m{n}"} for n in range(3)])
    [old] = await _receive(served, group, topic, max_messages=1)  # m0 in flight
    [acked] = await _receive(served, group, topic, max_messages=1)
    assert (await _ack(served, group, topic, [acked["receipt_handle"]])).status_code == 200
    await _delete(served, group)
    assert served.broker.consumption.registry.topics_of(group) == []
    await _create(served, group)
    assert await _consumption(served, group) == []  # nothing received, acked or in flight
    fresh = await _receive(served, group, topic, max_messages=10)
    # From the queue's first offset, as a new group: m0 at once (not in flight any more),
    # m1 again (its ack was the deleted group's), each a first delivery.
    assert [(item["body"], item["delivery_attempt"]) for item in fresh] == \
        [("m0", 1), ("m1", 1), ("m2", 1)]
    stale = await _ack(served, group, topic, [old["receipt_handle"]])
    assert stale.status_code == 409, stale.text
    assert problem(stale)["error_code"] == "STALE_RECEIPT_HANDLE"
    assert (await _consumption(served, group))[0]["in_flight"] == 3  # nothing removed
    response = await _ack(served, group, topic, [item["receipt_handle"] for item in fresh])
    assert response.status_code == 200, response.text


async def test_deleting_groups_leaves_no_state_behind(served: Served, clock: FakeClock) -> None:
    """Groups created, received from and deleted one after another: the registry holds what
    it held before (the live groups' states), however many went through it."""
    _, topic = await _setup(served, queues=2, messages=[{"body": "x"}, {"body": "y"}])
    consumption = served.broker.consumption
    before = len(consumption.registry), len(consumption.registry.images()[1])
    for number in range(GROUPS_CYCLED):
        group = f"cycled-{number}"
        await _create(served, group)
        assert len(await _receive(served, group, topic, max_messages=1)) == 1
        assert len(consumption.registry) > before[0]
        await _delete(served, group)
    assert (len(consumption.registry), len(consumption.registry.images()[1])) == before
    assert not any(name.startswith("cycled-") for name, _ in consumption._turns)


def _snapshot_groups(served: Served) -> set[str]:
    """The groups of the pop images of the last snapshot in the metadata topic."""
    store = served.broker.store
    low, high = store.queue_offset_range(METADATA_TOPIC, 0) or (0, 0)
    groups: set[str] | None = None
    offset = low
    while offset < high:
        result = store.get_messages(METADATA_TOPIC, 0, offset, 256)
        assert result.status is GetMessageStatus.FOUND, result.status
        for message in result.messages:
            pops = snapshot_pops(message.properties.get(PROPERTY_OP, ""), message.body)
            if pops is not None:
                groups = set() if pops.part == 0 else groups
                assert groups is not None
                groups |= {image.group for image in pops.queues + pops.counts}
        offset = result.next_offset
    assert groups is not None, "no snapshot in the log"
    return groups


async def test_a_snapshot_after_the_delete_holds_none_of_the_group(
        served: Served, clock: FakeClock) -> None:
    group, topic = await _setup(served, queues=1, messages=[{"body": "kept in flight"}])
    kept, _ = await _setup(served, queues=1)
    assert len(await _receive(served, group, topic)) == 1
    await _receive(served, kept, topic)
    assert served.broker.metadata_snapshots.write()
    assert {group, kept} <= _snapshot_groups(served)
    await _delete(served, group)
    assert served.broker.metadata_snapshots.write()
    groups = _snapshot_groups(served)
    assert kept in groups and group not in groups


async def test_a_slave_fed_the_log_and_a_restart_end_without_the_group(
        tmp_path: Path, clock: FakeClock) -> None:
    """The master's log streamed to a slave: the slave applies the same records and ends with
    the master's states, none of the deleted group; the master restarted replays its log to
    the same."""
    settings = _settings(tmp_path / "master")
    async with serving(settings) as master:
        master.broker.consumption.clock_ms = clock
        group, topic = await _setup(master, queues=2,
                                    messages=[{"body": f"m{n}"} for n in range(4)])
        kept = f"{group}-kept"
        await _create(master, kept)
        for name in (group, kept):
            received = await _receive(master, name, topic, max_messages=3)
            assert (await _ack(master, name, topic, [received[0]["receipt_handle"]])) \
                .status_code == 200
        await _delete(master, group)
        await _create(master, group)  # created again: nothing received yet
        store = master.broker.store
        wait_dispatched(store)
        log_bytes = store.commit_log.read_bytes(0, store.max_offset)
        expected = _states_of(master, kept)
        assert expected and master.broker.consumption.registry.topics_of(group) == []
    async with _slave(tmp_path / "slave") as slave:
        assert slave.broker.store.append_raw(0, log_bytes).name == "OK"
        wait_dispatched(slave.broker.store)
        assert slave.broker.consumption.registry.topics_of(group) == []
        assert _states_of(slave, kept) == expected
    async with serving(settings) as restarted:
        assert restarted.broker.consumption.registry.topics_of(group) == []
        assert _states_of(restarted, kept) == expected


class HeldDelete:
    """Dispatch held (on its thread) at a group delete's record, before it applies it
    (GroupConsumption.drop_group, then the tables), until `released`: the record is in the
    log, the states and the tables still hold the group."""

    def __init__(self, drop: Callable[[str], int]) -> None:
        self._drop = drop
        self.entered = threading.Event()
        self.released = threading.Event()

    def __call__(self, group: str) -> int:
        self.entered.set()
        assert self.released.wait(HOLD_S), "the test never released the apply"
        return self._drop(group)


async def test_no_receive_or_expiry_while_the_delete_is_written(
        served: Served, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the delete's record is in the log, before dispatch applies it (the states and the
    tables still hold the group): a receive is refused 404 and the group's deliveries do not
    expire, so no record of the group follows its delete (a receive's would start a state
    for a group that is gone, an expiry's would put copies for it)."""
    group, topic = await _setup(served, queues=1, messages=[{"body": "a"}, {"body": "b"}])
    while _expire(served, clock, 0):  # the earlier tests' deliveries, due on this clock
        pass
    assert len(await _receive(served, group, topic, max_messages=1)) == 1
    consumption = served.broker.consumption
    held = HeldDelete(consumption.drop_group)
    monkeypatch.setattr(consumption, "drop_group", held)
    deleting = asyncio.create_task(served.client.delete(f"/v1/groups/{group}"))
    try:
        for _ in range(POLLS_MAX):
            if held.entered.is_set():
                break
            await asyncio.sleep(0.005)
        assert held.entered.is_set(), "the delete's record never reached dispatch"
        assert served.broker.metadata_store.find_group(name=group) is not None
        response = await served.client.post(
            f"/v1/groups/{group}/topics/{topic}/messages:receive",
            json={"invisible_ms": 10_000, "body_encoding": "utf8"})
        assert response.status_code == 404, response.text
        assert problem(response)["error_code"] == "GROUP_NOT_FOUND"
        clock.now_ms += 20_000
        assert served.broker.expire_deliveries() == 0  # "a" is past its invisible time
    finally:
        held.released.set()
    assert (await deleting).status_code == 204
    wait_dispatched(served.broker.store)
    assert consumption.registry.topics_of(group) == []


async def _copy_put(served: Served, clock: FakeClock, retry: str) -> None:
    """The clock past the first backoff (10 s), until the scheduler put the retry copy into
    `retry` (bounded: it puts due copies on its own thread)."""
    clock.now_ms += 10_000
    timers = served.broker.timers
    assert timers is not None
    for _ in range(POLLS_MAX):
        timers.wake()
        wait_dispatched(served.broker.store)
        bounds = served.broker.store.queue_offset_range(retry, 0)
        if bounds is not None and bounds[1] > 0:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"no retry copy in {retry}")


@pytest.mark.parametrize("retry_topic_deleted", [False, True])
async def test_retry_copies_stay_data_for_a_group_created_again(
        served: Served, clock: FakeClock, retry_topic_deleted: bool) -> None:
    """A copy the deleted group released into its retry topic stays there: a group created
    again under the name reads the retry topic from its first message, so it gets the copy as
    well as the original from the topic; with the retry topic deleted first, the original
    only."""
    group, topic = await _setup(served, queues=1, messages=[{"body": "r"}])
    [message] = await _receive(served, group, topic)
    released = await _change(served, group, topic, message["receipt_handle"], 0)
    assert released.status_code == 200, released.text
    retry = retry_topic(group, topic)
    await _copy_put(served, clock, retry)
    await _delete(served, group)
    if retry_topic_deleted:
        response = await served.client.delete(f"/v1/topics/{quote(retry, safe='')}")
        assert response.status_code == 204, response.text
        wait_dispatched(served.broker.store)
    await _create(served, group)
    received = await _receive(served, group, topic, max_messages=10)
    expected = [("r", 1)] if retry_topic_deleted else [("r", 1), ("r", 2)]
    assert sorted((item["body"], item["delivery_attempt"]) for item in received) == expected

"""Receives, acks and changes of invisibility of one event-loop turn decided together
(app/broker/pop_batches.py): they share records and appends, hand out disjoint messages and
distinct delivery ids, a stale handle is refused alone, and an append the store refuses loses
no decision and doubles none."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from app.broker.consumption_types import AckAsk, PopRefused, ReceiveAsk
from store import Message, PutMessageResult, PutMessageStatus
from store.consumption.tags import TagFilter
from store.system_topics import METADATA_TOPIC
from store.waits.completion import PutCompletion
from tests.support.app import Served, app_settings, serving
from tests.support.store import wait_dispatched

pytestmark = pytest.mark.anyio

_names = itertools.count()
EVERY_TAG = TagFilter(None)


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    settings = app_settings(tmp_path_factory.mktemp("pop-batches"),
                            pop_invisible_ms_min=1_000, pop_expiry_interval_ms=60_000,
                            pop_expiry_gap_ms=60_000)
    async with serving(settings) as running:
        yield running


async def _topic(served: Served, messages: int, queues: int = 1) -> tuple[str, str]:
    number = next(_names)
    group, topic = f"bg{number}", f"bt{number}"
    client = served.client
    created = await client.post("/v1/topics", json={
        "name": topic, "read_queue_count": queues, "write_queue_count": queues})
    assert created.status_code == 201, created.text
    created = await client.post("/v1/groups", json={"name": group})
    assert created.status_code == 201, created.text
    for start in range(0, messages, 10):
        put = await client.post(f"/v1/topics/{topic}/messages:batch", json={"messages": [
            {"body": f"m{index}", "body_encoding": "utf8"}
            for index in range(start, min(messages, start + 10))]})
        assert put.status_code == 201, put.text
    wait_dispatched(served.broker.store)
    # The group's retry and dead-letter topics, as a receive's route makes them first.
    served.broker.ensure_pop_topics(group, topic)
    return group, topic


def _pop_records(served: Served) -> int:
    wait_dispatched(served.broker.store)
    bounds = served.broker.store.queue_offset_range(METADATA_TOPIC, 0)
    return 0 if bounds is None else bounds[1]


def _ask(group: str, topic: str, max_messages: int, invisible_ms: int = 30_000) -> ReceiveAsk:
    return ReceiveAsk(group, topic, 1, max_messages, invisible_ms, EVERY_TAG)


async def _together(served: Served, asks: Sequence[ReceiveAsk | AckAsk]) -> list[Any]:
    """The asks made in one turn of the loop (they join one batch); answers or refusals."""
    batches = served.broker.pop_batches

    async def one(ask: ReceiveAsk | AckAsk) -> Any:
        try:
            if isinstance(ask, ReceiveAsk):
                delivered, outcome = await batches.receive(ask)
                status = await outcome.status()
                return [item.message.queue_offset for item in delivered], \
                    [item.handle for item in delivered], status
            results, outcome = await batches.ack(ask)
            return [result.code for result in results], await outcome.status()
        except PopRefused as refused:
            return refused

    return list(await asyncio.gather(*(one(ask) for ask in asks)))


async def test_receives_of_one_turn_share_one_record(served: Served) -> None:
    """Four receives of 8 and an ack made together: one decision, one record for the four
    receives (one queue) and one for the ack, disjoint messages, 8 each."""
    group, topic = await _topic(served, 40)
    first = await _together(served, [_ask(group, topic, 2)])
    offsets, handles, _ = first[0]
    before, batches = _pop_records(served), served.broker.pop_batches.batches
    answers = await _together(served, [*(_ask(group, topic, 8) for _ in range(4)),
                                       AckAsk(group, topic, handles)])
    assert served.broker.pop_batches.batches == batches + 1
    assert _pop_records(served) - before == 2
    received = [answer[0] for answer in answers[:4]]
    assert [len(taken) for taken in received] == [8, 8, 8, 8]
    every = sorted(offset for taken in received for offset in taken)
    assert every == list(range(2, 34))  # disjoint, none of the two in flight
    assert all(answer[2] is PutMessageStatus.PUT_OK for answer in answers[:4])
    assert answers[4] == (["OK", "OK"], PutMessageStatus.PUT_OK)


async def test_the_same_handle_in_two_acks_of_one_turn_is_acked_once(served: Served) -> None:
    """Two acks of one turn naming the same delivery: the first acks it, the second is
    stale, as when they come one after the other."""
    group, topic = await _topic(served, 4)
    _, handles, _ = (await _together(served, [_ask(group, topic, 1)]))[0]
    answers = await _together(served, [AckAsk(group, topic, handles),
                                       AckAsk(group, topic, handles)])
    assert answers == [(["OK"], PutMessageStatus.PUT_OK),
                       (["STALE_RECEIPT_HANDLE"], PutMessageStatus.PUT_OK)]


def _refusing(served: Served, monkeypatch: pytest.MonkeyPatch, refused: set[int],
              call: int = 1) -> list[int]:
    """The store refuses the records at these positions of its `call`th system append from
    now (as a full disk would); how many records each append was asked for."""
    store = served.broker.store
    real = store.put_system_messages
    calls: list[int] = []

    def put(messages: Sequence[Message], **options: bool
            ) -> list[tuple[PutMessageResult, PutCompletion]]:
        calls.append(len(messages))
        if len(calls) != call:
            return real(messages, **options)
        kept = [message for number, message in enumerate(messages) if number not in refused]
        stored = iter(real(kept, **options))
        refusal = PutMessageResult(PutMessageStatus.OS_PAGE_CACHE_BUSY, detail="held")
        return [(refusal, PutCompletion.done(refusal.status)) if number in refused
                else next(stored) for number in range(len(messages))]

    monkeypatch.setattr(store, "put_system_messages", put)
    return calls


async def test_a_refused_append_loses_and_doubles_no_decision(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch's one record refused: its four receives are refused and nothing is in
    flight; the next receives get every message once, at attempt 1."""
    group, topic = await _topic(served, 32)
    calls = _refusing(served, monkeypatch, {0})
    answers = await _together(served, [_ask(group, topic, 8) for _ in range(4)])
    assert calls == [1]
    assert all(isinstance(answer, PopRefused) and answer.code == "OS_PAGE_CACHE_BUSY"
               for answer in answers), answers
    assert served.broker.consumption.registry.in_flight(group) == 0
    again = await _together(served, [_ask(group, topic, 8) for _ in range(4)])
    assert sorted(offset for offsets, _, _ in again for offset in offsets) == list(range(32))
    delivered, _ = await served.broker.pop_batches.receive(_ask(group, topic, 8))
    assert delivered == []


async def test_a_refused_record_refuses_only_its_own_requests(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two gathers (invisible times differ) and an ack in one batch: the first receive's
    record and the ack's go in one append, the second's (the same queue, planned once its
    state has the first applied) in the next, refused: the first receive and the ack are
    answered, the second refused; its messages are receivable after, the acked one never
    again."""
    group, topic = await _topic(served, 12)
    _, handles, _ = (await _together(served, [_ask(group, topic, 2)]))[0]
    calls = _refusing(served, monkeypatch, {0}, call=2)
    answers = await _together(served, [_ask(group, topic, 4), _ask(group, topic, 4, 40_000),
                                       AckAsk(group, topic, handles[:1])])
    assert calls == [2, 1]
    assert answers[0][0] == [2, 3, 4, 5]
    assert isinstance(answers[1], PopRefused)
    assert answers[2] == (["OK"], PutMessageStatus.PUT_OK)
    rest, _, _ = (await _together(served, [_ask(group, topic, 10)]))[0]
    assert rest == list(range(6, 12))  # offset 1 (in flight) and 0 (acked) are not here
    ack = await _together(served, [AckAsk(group, topic, handles)])
    assert ack == [(["STALE_RECEIPT_HANDLE", "OK"], PutMessageStatus.PUT_OK)]


async def _changes(served: Served, asks: Sequence[ReceiveAsk | AckAsk]) -> list[Any]:
    """Like `_together`, with each change's new handles (None for a release or a refusal)."""
    batches = served.broker.pop_batches

    async def one(ask: ReceiveAsk | AckAsk) -> Any:
        if isinstance(ask, ReceiveAsk):
            delivered, outcome = await batches.receive(ask)
            await outcome.status()
            return [item.message.queue_offset for item in delivered], \
                [item.handle for item in delivered]
        results, outcome = await batches.ack(ask)
        return [(result.code, result.new_handle) for result in results], \
            await outcome.status()

    return list(await asyncio.gather(*(one(ask) for ask in asks)))


def _change(group: str, topic: str, handle: str, invisible_ms: int) -> AckAsk:
    return AckAsk(group, topic, [handle], invisible_ms)


async def test_changes_of_one_turn_share_one_record_and_a_stale_one_is_refused_alone(
        served: Served) -> None:
    """Two extensions, a release, the change of an acked handle and an ack of a handle
    changed in the same turn: one decision, one record for the queue; the stale two are
    409 alone; both new handles ack (each change took its own delivery id), the old ones are
    stale."""
    group, topic = await _topic(served, 4)
    _, handles, _ = (await _together(served, [_ask(group, topic, 4)]))[0]
    assert await _together(served, [AckAsk(group, topic, handles[3:])]) == [
        (["OK"], PutMessageStatus.PUT_OK)]
    before, batches = _pop_records(served), served.broker.pop_batches.batches
    answers = await _changes(served, [
        _change(group, topic, handles[0], 60_000), _change(group, topic, handles[1], 60_000),
        _change(group, topic, handles[2], 0), _change(group, topic, handles[3], 60_000),
        AckAsk(group, topic, handles[:1])])
    assert served.broker.pop_batches.batches == batches + 1
    assert _pop_records(served) - before == 1
    codes = [[code for code, _ in results] for results, _ in answers]
    assert codes == [["OK"], ["OK"], ["OK"], ["STALE_RECEIPT_HANDLE"], ["STALE_RECEIPT_HANDLE"]]
    new = [answers[number][0][0][1] for number in (0, 1)]
    assert None not in new and answers[2][0][0][1] is None  # a release answers no handle
    acked = await _together(served, [AckAsk(group, topic, [*new, *handles[:2]])])
    assert acked == [(["OK", "OK", "STALE_RECEIPT_HANDLE", "STALE_RECEIPT_HANDLE"],
                      PutMessageStatus.PUT_OK)]


async def test_a_change_and_a_receive_of_one_queue_in_one_turn_take_distinct_ids(
        served: Served) -> None:
    """A change and a receive of the same queue decided together: the receive's deliveries
    and the changed one each have their own delivery id, so every handle answered acks."""
    group, topic = await _topic(served, 4)
    _, handles, _ = (await _together(served, [_ask(group, topic, 2)]))[0]
    changed, received = await _changes(served, [_change(group, topic, handles[0], 60_000),
                                                _ask(group, topic, 2)])
    assert received[0] == [2, 3]
    [(code, new_handle)], _ = changed
    assert code == "OK" and new_handle is not None
    acked = await _together(served, [AckAsk(group, topic, [new_handle, *received[1]])])
    assert acked == [(["OK", "OK", "OK"], PutMessageStatus.PUT_OK)]

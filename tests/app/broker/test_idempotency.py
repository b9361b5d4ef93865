"""Idempotency-Key: one stored message per (topic, key) within the window, also after a
restart; the window stays bounded in time and in keys."""

from __future__ import annotations

import asyncio
import functools
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import app.broker.broker
from app.api.produce import put_batch
from app.broker.idempotency import IdempotencyWindow, RememberedPut, rebuild
from app.settings import Settings
from store import Message, MessageStore, PutMessageStatus
from store.clock import wall_ms
from tests.support.app import ServeFactory, app_settings, serving
from tests.support.store import small_config, wait_dispatched
from tests.support.store_clock import store_clock

pytestmark = pytest.mark.anyio

URL = "/v1/topics/Pay/messages"
DEFAULT_WINDOW_S = Settings.model_fields["idempotency_window_s"].default


def _put(offset: int) -> RememberedPut:
    return RememberedPut(PutMessageStatus.PUT_OK, f"ID{offset}", 0, offset, offset * 100, 100)


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


async def test_window_forgets_after_its_time() -> None:
    """A key is replayed within window_s and forgotten after it."""
    clock = FakeClock()
    window = IdempotencyWindow(10.0, 100, clock_ms=clock)
    window.remember("T", "k", _put(1), clock.now_ms)
    assert window.lookup("T", "k") == _put(1)
    assert window.lookup("Other", "k") is None
    clock.now_ms += 10_001
    assert window.lookup("T", "k") is None
    assert len(window) == 0


async def test_window_edge_is_inclusive() -> None:
    """With the default 300 s window, a key is replayed exactly window_s after it was stored
    and forgotten one millisecond later."""
    clock = FakeClock()
    window = IdempotencyWindow(DEFAULT_WINDOW_S, 100, clock_ms=clock)
    window.remember("T", "k", _put(1), clock.now_ms)
    clock.now_ms += int(DEFAULT_WINDOW_S * 1000)
    assert window.lookup("T", "k") == _put(1)
    clock.now_ms += 1
    assert window.lookup("T", "k") is None


async def test_replay_at_the_end_of_the_window_over_http(
        serve: ServeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a real broker with the default window: a retry at the last millisecond of the
    window answers the first result and stores nothing; one millisecond later the same key
    is a new message."""
    clock = FakeClock()
    monkeypatch.setattr(app.broker.broker, "IdempotencyWindow",
                        functools.partial(IdempotencyWindow, clock_ms=clock))
    async with serve() as served:
        assert served.broker.idempotency.window_ms == DEFAULT_WINDOW_S * 1000
        headers = {"idempotency-key": "late-retry"}
        first = await served.client.post(URL, json={"body": "x"}, headers=headers)
        assert first.status_code == 201 and not first.json()["replayed"]
        clock.now_ms += int(DEFAULT_WINDOW_S * 1000)
        late = await served.client.post(URL, json={"body": "x"}, headers=headers)
        assert late.json() == {**first.json(), "replayed": True}
        assert served.stored_count() == 1
        clock.now_ms += 1
        expired = await served.client.post(URL, json={"body": "x"}, headers=headers)
        assert expired.status_code == 201 and not expired.json()["replayed"]
        assert expired.json()["msg_id"] != first.json()["msg_id"]
        assert served.stored_count() == 2


async def test_window_keeps_at_most_keys_max() -> None:
    """Past keys_max the oldest keys go first."""
    clock = FakeClock()
    window = IdempotencyWindow(3600.0, 3, clock_ms=clock)
    for index in range(5):
        window.remember("T", f"k{index}", _put(index), clock.now_ms + index)
    assert len(window) == 3
    assert window.lookup("T", "k1") is None
    assert window.lookup("T", "k4") == _put(4)


async def test_pending_key_is_awaited_not_stored_twice() -> None:
    """While a key is being stored, a lookup returns its future; a failed put frees the key."""
    window = IdempotencyWindow(60.0, 10)
    window.begin("T", "k")
    pending = window.lookup("T", "k")
    assert isinstance(pending, asyncio.Future)
    window.finish("T", "k", _put(7))
    assert await pending == _put(7)
    window.begin("T", "j")
    failed = window.lookup("T", "j")
    assert isinstance(failed, asyncio.Future)
    window.finish("T", "j", None)
    assert await failed is None and window.lookup("T", "j") is None


async def test_same_key_twice_stores_once(serve: ServeFactory) -> None:
    """The second request with a key answers the first result, marked replayed, and stores
    nothing; the same key on another topic is another message."""
    async with serve() as served:
        headers = {"idempotency-key": "pay-1"}
        first = await served.client.post(URL, json={"body": "x"}, headers=headers)
        second = await served.client.post(URL, json={"body": "different"}, headers=headers)
        assert (first.status_code, second.status_code) == (201, 201)
        assert second.headers["idempotent-replayed"] == "true"
        assert {**first.json(), "replayed": True} == second.json()
        other = await served.client.post("/v1/topics/Refund/messages", json={"body": "x"},
                                         headers=headers)
        assert other.json()["msg_id"] != first.json()["msg_id"]
        assert served.stored_count() == 2
        wait_dispatched(served.broker.store)
        queue_id = first.json()["queue_id"]
        read = await served.client.get(f"/v1/topics/Pay/queues/{queue_id}/messages")
        assert read.json()["messages"][0]["idempotency_key"] == "pay-1"


async def test_concurrent_requests_with_one_key_store_once(serve: ServeFactory) -> None:
    """Ten racing requests with one key store one message and all answer its result."""
    async with serve() as served:
        responses = await asyncio.gather(*(
            served.client.post(URL, json={"body": f"b{index}"},
                               headers={"idempotency-key": "race"}) for index in range(10)))
        assert {response.json()["msg_id"] for response in responses} == {
            responses[0].json()["msg_id"]}
        assert sum(not response.json()["replayed"] for response in responses) == 1
        assert served.stored_count() == 1


async def test_refused_put_does_not_keep_the_key(serve: ServeFactory) -> None:
    """A key whose put was refused (nothing stored) can be used again."""
    async with serve() as served:
        headers = {"idempotency-key": "retry-me"}
        refused = await served.client.post(URL, json={"body": "x", "properties": {
            f"p{index}": "v" * 4000 for index in range(10)}}, headers=headers)
        assert refused.status_code == 413
        accepted = await served.client.post(URL, json={"body": "x"}, headers=headers)
        assert accepted.status_code == 201 and not accepted.json()["replayed"]


async def test_batch_keys(serve: ServeFactory) -> None:
    """Batch entries carry keys: a key twice in a batch stores once, and a retried batch
    stores nothing new."""
    async with serve() as served:
        batch = {"messages": [{"body": "a", "idempotency_key": "a"},
                              {"body": "b", "idempotency_key": "b"},
                              {"body": "a again", "idempotency_key": "a"},
                              {"body": "no key"}]}
        first = (await served.client.post(URL + ":batch", json=batch)).json()["results"]
        assert [r["replayed"] for r in first] == [False, False, True, False]
        assert first[2]["msg_id"] == first[0]["msg_id"]
        assert served.stored_count() == 3
        retry = (await served.client.post(URL + ":batch", json=batch)).json()["results"]
        assert [r["msg_id"] for r in retry[:3]] == [r["msg_id"] for r in first[:3]]
        assert served.stored_count() == 4  # only the entry without a key again


async def test_key_survives_a_restart(tmp_path: Path) -> None:
    """After a clean restart the window is rebuilt from the stored messages: the retry is
    answered with the first message's ids and stores nothing."""
    settings = app_settings(tmp_path / "broker")
    headers = {"idempotency-key": "before-restart"}
    async with serving(settings) as served:
        first = (await served.client.post(URL, json={"body": "x"}, headers=headers)).json()
        wait_dispatched(served.broker.store)
        max_offset = served.broker.store.max_offset
    async with serving(settings) as served:
        retry = await served.client.post(URL, json={"body": "x"}, headers=headers)
        assert retry.status_code == 201 and retry.json()["replayed"]
        for field in ("msg_id", "queue_id", "queue_offset", "commit_log_offset", "wrote_bytes"):
            assert retry.json()[field] == first[field]
        assert served.broker.store.max_offset == max_offset


def test_rebuild_takes_only_the_window(tmp_path: Path) -> None:
    """Rebuild restores keys of messages stored within window_s, at most keys_max of them."""
    store = MessageStore(small_config(tmp_path))
    store.start()
    try:
        for index in range(6):
            store.put_message(Message("T", b"x", {"IDEMPOTENCY_KEY": f"k{index}"},
                                      queue_id=index % 2))
        store.put_message(Message("T", b"no key", queue_id=0))
        wait_dispatched(store)
        newest_ms = max(m.store_timestamp_ms for q in (0, 1)
                        for m in store.get_messages("T", q, 0, 100).messages)
        clock = FakeClock()
        clock.now_ms = newest_ms + 1000
        assert rebuild(IdempotencyWindow(0.5, 100, clock_ms=clock), store) == 0
        window = IdempotencyWindow(60.0, 4, clock_ms=clock)
        assert rebuild(window, store) == 4
        restored = window.lookup("T", "k5")
        assert isinstance(restored, RememberedPut) and restored.queue_id == 1
        assert window.lookup("T", "k0") is None  # the oldest two did not fit keys_max
    finally:
        store.shutdown()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3000)), max_size=60),
       st.integers(1, 8))
def test_window_bounds_hold_for_any_sequence(steps: list[tuple[int, int]], keys_max: int) -> None:
    """Whatever the keys and clock steps, the window never holds more than keys_max keys and
    never answers a key remembered longer than window_s ago."""
    clock = FakeClock()
    window = IdempotencyWindow(1.0, keys_max, clock_ms=clock)
    remembered_at: dict[str, int] = {}
    for key_number, advance_ms in steps:
        clock.now_ms += advance_ms
        key = f"k{key_number}"
        found = window.lookup("T", key)
        if found is not None:
            assert clock.now_ms - remembered_at[key] <= 1000
        else:
            window.remember("T", key, _put(key_number), clock.now_ms)
            remembered_at[key] = clock.now_ms
        assert len(window) <= keys_max


# -- the window's own bounds and bookkeeping -------------------------------------------------


def test_default_clock_is_the_wall_clock() -> None:
    """Without a clock the window reads the wall clock (store.clock.wall_ms, whole
    milliseconds: tests/store/test_clock.py): a put stamped now is replayed, one stamped just
    over window_s ago is not."""
    window = IdempotencyWindow(10.0, 100)
    window.remember("T", "old", _put(1), wall_ms() - 10_000 - 60_000)
    window.remember("T", "new", _put(2), wall_ms())
    assert window.lookup("T", "new") == _put(2)
    assert window.lookup("T", "old") is None


def test_window_needs_a_positive_length_and_at_least_one_key() -> None:
    """A window of 0 s or of 0 keys is refused; 1 ms and 1 key is the smallest window."""
    with pytest.raises(AssertionError):
        IdempotencyWindow(0, 1)
    with pytest.raises(AssertionError):
        IdempotencyWindow(1.0, 0)
    smallest = IdempotencyWindow(0.001, 1)
    assert (smallest.window_ms, smallest.keys_max, len(smallest)) == (1, 1, 0)


async def test_replays_are_counted() -> None:
    """replay_count counts the lookups answered from the window, nothing else."""
    window = IdempotencyWindow(60.0, 10, clock_ms=FakeClock())
    assert window.replay_count == 0
    assert window.lookup("T", "k") is None
    window.remember("T", "k", _put(1), 1_000_000)
    window.lookup("T", "k")
    window.lookup("T", "k")
    assert window.replay_count == 2


async def test_eviction_keeps_a_key_at_the_edge_of_the_window() -> None:
    """Storing another key exactly window_s after the first evicts nothing: the first key is
    still replayed at its edge."""
    clock = FakeClock()
    window = IdempotencyWindow(10.0, 10, clock_ms=clock)
    window.remember("T", "first", _put(1), clock.now_ms)
    clock.now_ms += 10_000
    window.remember("T", "second", _put(2), clock.now_ms)
    assert len(window) == 2 and window.lookup("T", "first") == _put(1)
    clock.now_ms += 1
    window.remember("T", "third", _put(3), clock.now_ms)
    assert len(window) == 2 and window.lookup("T", "first") is None


async def test_a_remembered_key_again_becomes_the_newest() -> None:
    """Remembering a key again moves it to the back of the eviction order."""
    clock = FakeClock()
    window = IdempotencyWindow(3600.0, 2, clock_ms=clock)
    window.remember("T", "a", _put(1), clock.now_ms)
    window.remember("T", "b", _put(2), clock.now_ms)
    window.remember("T", "a", _put(3), clock.now_ms)
    window.remember("T", "c", _put(4), clock.now_ms)
    assert window.lookup("T", "b") is None
    assert window.lookup("T", "a") == _put(3) and window.lookup("T", "c") == _put(4)


async def test_finished_put_is_remembered_at_the_clocks_time() -> None:
    """A put finished with a result is remembered as stored now: replayed for window_s from
    then, not from when it began."""
    clock = FakeClock()
    window = IdempotencyWindow(10.0, 10, clock_ms=clock)
    window.begin("T", "k")
    clock.now_ms += 5_000
    window.finish("T", "k", _put(1))
    clock.now_ms += 10_000
    assert window.lookup("T", "k") == _put(1)
    clock.now_ms += 1
    assert window.lookup("T", "k") is None


# -- rebuild: the window's edge and the bound on what it reads ------------------------------


def _count_reads(store: MessageStore) -> list[int]:
    """From now on, the number of heads each `store.read_heads` call returns, in order."""
    reads: list[int] = []
    real_read_heads = store.read_heads

    def counting_read_heads(*args: Any, **kwargs: Any) -> Any:
        heads = real_read_heads(*args, **kwargs)
        reads.append(len(heads))
        return heads

    store.read_heads = counting_read_heads  # type: ignore[method-assign]
    return reads


def _stored_with_keys(store: MessageStore, count: int, queue_id: int = 0) -> list[int]:
    """Store `count` keyed messages on one queue; their store timestamps, in order."""
    for index in range(count):
        store.put_message(Message("T", b"x", {"IDEMPOTENCY_KEY": f"k{index}"},
                                  queue_id=queue_id))
    wait_dispatched(store)
    return [m.store_timestamp_ms for m in store.get_messages("T", queue_id, 0, 1000).messages]


def test_rebuild_includes_a_message_stored_exactly_window_s_ago(tmp_path: Path) -> None:
    """A message stored exactly window_s before now is restored; one millisecond later it is
    not (nor anything stored before it)."""
    store = MessageStore(small_config(tmp_path))
    store.start()
    try:
        stamps = _stored_with_keys(store, 3)
        clock = FakeClock()
        clock.now_ms = stamps[0] + 60_000
        window = IdempotencyWindow(60.0, 100, clock_ms=clock)
        assert rebuild(window, store) == 3
        restored = window.lookup("T", "k0")
        assert isinstance(restored, RememberedPut) and restored.queue_offset == 0
        assert restored.status is PutMessageStatus.PUT_OK
        clock.now_ms = stamps[0] + 60_001
        later = IdempotencyWindow(60.0, 100, clock_ms=clock)
        expected = sum(1 for stamp in stamps if stamp > stamps[0])
        assert rebuild(later, store) == expected
        assert later.lookup("T", "k0") is None
    finally:
        store.shutdown()


def test_rebuild_skips_messages_without_a_key(tmp_path: Path) -> None:
    """A message without an Idempotency-Key restores no key, and the keyed messages after it
    on its queue are still restored."""
    store = MessageStore(small_config(tmp_path))
    store.start()
    try:
        store.put_message(Message("T", b"x", {"IDEMPOTENCY_KEY": "before"}, queue_id=0))
        store.put_message(Message("T", b"no key", queue_id=0))
        store.put_message(Message("T", b"x", {"IDEMPOTENCY_KEY": "after"}, queue_id=0))
        wait_dispatched(store)
        clock = FakeClock()
        clock.now_ms = store.get_messages("T", 0, 0, 10).messages[-1].store_timestamp_ms
        window = IdempotencyWindow(60.0, 3, clock_ms=clock)
        assert rebuild(window, store) == 2
        assert isinstance(window.lookup("T", "before"), RememberedPut)
        assert isinstance(window.lookup("T", "after"), RememberedPut)
    finally:
        store.shutdown()


def test_rebuild_keeps_a_key_followed_by_more_than_keys_max_keyless_messages(
        tmp_path: Path) -> None:
    """A keyed message followed on its queue by more than keys_max keyless ones (more than one
    read chunk) is restored, as the live window, which never counts keyless puts, remembers it."""
    store = MessageStore(small_config(tmp_path))
    store.start()
    try:
        store.put_message(Message("T", b"x", {"IDEMPOTENCY_KEY": "kept"}, queue_id=0))
        for _ in range(600):
            store.put_message(Message("T", b"no key", queue_id=0))
        wait_dispatched(store)
        clock = FakeClock()
        clock.now_ms = store.get_messages("T", 0, 600, 1).messages[0].store_timestamp_ms
        window = IdempotencyWindow(60.0, 3, clock_ms=clock)
        assert rebuild(window, store) == 1
        assert isinstance(window.lookup("T", "kept"), RememberedPut)
    finally:
        store.shutdown()


def test_rebuild_reads_each_chunk_once_across_keyless_gaps(tmp_path: Path) -> None:
    """When a queue's newest keyed messages are spread over several read chunks (keyless ones
    between them), rebuild restores the keys_max newest distinct keys, none counted twice."""
    store = MessageStore(small_config(tmp_path))
    store.start()
    try:
        for index in range(10):
            store.put_message(Message("T", b"x", {"IDEMPOTENCY_KEY": f"k{index}"}, queue_id=0))
        for _ in range(2):
            store.put_message(Message("T", b"no key", queue_id=0))
        store.put_message(Message("T", b"x", {"IDEMPOTENCY_KEY": "k10"}, queue_id=0))
        wait_dispatched(store)
        clock = FakeClock()
        clock.now_ms = store.get_messages("T", 0, 12, 1).messages[0].store_timestamp_ms
        window = IdempotencyWindow(60.0, 3, clock_ms=clock)
        assert rebuild(window, store) == 3
        assert all(isinstance(window.lookup("T", key), RememberedPut)
                   for key in ("k10", "k9", "k8"))
    finally:
        store.shutdown()


def test_rebuild_reads_a_bounded_number_of_messages(tmp_path: Path) -> None:
    """When every message is keyed, rebuild reads at most keys_max messages per queue (plus its
    binary-search probes), and restores the newest keys_max keys."""
    store = MessageStore(small_config(tmp_path))
    store.start()
    try:
        stamps = _stored_with_keys(store, 200)
        reads = _count_reads(store)
        clock = FakeClock()
        clock.now_ms = stamps[-1] + 1000
        window = IdempotencyWindow(3600.0, 5, clock_ms=clock)
        assert rebuild(window, store) == 5
        assert 5 <= sum(reads) <= 5 + 10  # five messages and at most log2(200) + 1 probes of one
        assert window.lookup("T", "k199") is not None and window.lookup("T", "k194") is None
    finally:
        store.shutdown()


# -- no request holds a key while it waits for another's -----------------------------------


async def _yield_until(condition: Callable[[], bool], deadline_s: float = 5.0) -> None:
    """Let the event loop run other tasks until `condition` holds (no timer involved)."""
    give_up_at = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < give_up_at, "the condition never held"
        await asyncio.sleep(0)


def _keyed(topic: str, keys: list[str]) -> list[tuple[Message, str | None]]:
    return [(Message(topic, key.encode(), {"IDEMPOTENCY_KEY": key}, queue_id=0), key)
            for key in keys]


async def test_batches_waiting_on_each_others_keys_do_not_deadlock(serve: ServeFactory) -> None:
    """The interleaving of issue 12: single put C holds k2; batch A = [k1, k2, k3] waits for
    k2; batch B = [k3, k1] starts; when C ends, A and B both finish (within a deadline), and
    later puts with k1 or k3 replay instead of hanging."""
    async with serve() as served:
        broker = served.broker
        created = await served.client.post(URL, json={"body": "creates the topic"})
        assert created.status_code == 201
        window = broker.idempotency
        window.begin("Pay", "k2")  # C: a single put of k2 in flight (the seam: C's put step)
        batch_a = asyncio.create_task(put_batch(broker, "Pay", _keyed("Pay", ["k1", "k2", "k3"])))
        await _yield_until(lambda: batch_a_waits_on(window, "k2"))
        batch_b = asyncio.create_task(put_batch(broker, "Pay", _keyed("Pay", ["k3", "k1"])))
        await _yield_until(lambda: batch_b.done() or batch_b_waits(window))
        window.finish("Pay", "k2", None)  # C stored nothing: A must store k2 itself
        async with asyncio.timeout(5.0):
            (_, results_a), (_, results_b) = await asyncio.gather(batch_a, batch_b)
        assert [r["status"] for r in results_a + results_b] == ["PUT_OK"] * 5
        ids = {r["msg_id"] for r in results_a + results_b}
        assert len(ids) == 3 and served.stored_count() == 4  # k1, k2, k3 once, plus the first
        async with asyncio.timeout(5.0):
            for key in ("k1", "k3"):
                retry = await served.client.post(URL, json={"body": "x"},
                                                 headers={"idempotency-key": key})
                assert retry.json()["replayed"] and retry.json()["msg_id"] in ids


def batch_a_waits_on(window: IdempotencyWindow, key: str) -> bool:
    """Batch A reached its wait: k2 is still in flight and A has run up to awaiting it."""
    in_flight = window.lookup("Pay", key)
    return isinstance(in_flight, asyncio.Future) and _awaited(in_flight)


def batch_b_waits(window: IdempotencyWindow) -> bool:
    """Batch B is waiting on a key some other request holds."""
    return any(_awaited(future) for key, future in window._pending.items() if key[1] == "k1")


def _awaited(future: asyncio.Future[Any]) -> bool:
    # asyncio keeps a future's done-callbacks; a task awaiting it has added its wakeup.
    return bool(getattr(future, "_callbacks", None))


async def test_claim_takes_every_key_or_none() -> None:
    """claim begins no key while another request holds one of them (it answers that request's
    future); otherwise it answers the remembered keys and begins all the others at once."""
    window = IdempotencyWindow(60.0, 10, clock_ms=FakeClock())
    window.remember("T", "old", _put(1), 1_000_000)
    window.begin("T", "busy")
    held = window.claim("T", ["new", "busy", "old"])
    assert held is window.lookup("T", "busy")
    assert window.lookup("T", "new") is None and window.replay_count == 0
    window.finish("T", "busy", None)
    assert window.claim("T", ["new", "busy", "old"]) == {"old": _put(1)}
    assert isinstance(window.lookup("T", "new"), asyncio.Future)
    assert isinstance(window.lookup("T", "busy"), asyncio.Future)
    assert window.claim("Other", ["new"]) == {}


REBUILD_PEAK_BOUND_BYTES = 1024 * 1024


def _rebuild_peak_bytes(tmp_path: Path, body_size_bytes: int, count: int) -> tuple[int, int]:
    """Store `count` keyed messages of `body_size_bytes`; rebuild's restored keys and its peak
    Python allocation."""
    config = small_config(tmp_path, mapped_file_size_bytes=8 * 1024 * 1024,
                          message_size_max_bytes=body_size_bytes + 1024)
    store = MessageStore(config)
    store.start()
    try:
        body = b"b" * body_size_bytes
        for index in range(count):
            store.put_message(Message("T", body, {"IDEMPOTENCY_KEY": f"k{index}"},
                                      queue_id=index % 2))
        wait_dispatched(store)
        window = IdempotencyWindow(3600.0, count)
        tracemalloc.start()
        try:
            restored = rebuild(window, store)
            _, peak_bytes = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        return restored, peak_bytes
    finally:
        store.shutdown()


def test_rebuild_memory_does_not_depend_on_message_size(tmp_path: Path) -> None:
    """Rebuilding from 300 messages of 64 KiB (18.75 MiB of bodies) allocates under 1 MiB at
    its peak: it reads keys and properties, never bodies."""
    restored, peak_bytes = _rebuild_peak_bytes(tmp_path, 64 * 1024, 300)
    assert restored == 300
    assert peak_bytes < REBUILD_PEAK_BOUND_BYTES, f"peak {peak_bytes} bytes"


def test_rebuild_finds_keys_max_keys_across_keyless_messages_on_one_queue(
        tmp_path: Path) -> None:
    """On one queue whose newest keys_max messages hold only half that many keys, rebuild reads
    further back and restores keys_max keys (the count of keys found is what stops it)."""
    store = MessageStore(small_config(tmp_path))
    store.start()
    try:
        for key in ("k0", "k1", None, "k2", None, "k3"):
            properties = {"IDEMPOTENCY_KEY": key} if key else {}
            store.put_message(Message("T", b"x", properties, queue_id=0))
        wait_dispatched(store)
        clock = FakeClock()
        clock.now_ms = store.get_messages("T", 0, 5, 1).messages[0].store_timestamp_ms
        window = IdempotencyWindow(60.0, 4, clock_ms=clock)
        assert rebuild(window, store) == 4
        assert all(isinstance(window.lookup("T", key), RememberedPut)
                   for key in ("k0", "k1", "k2", "k3"))
    finally:
        store.shutdown()


def test_rebuild_does_not_read_messages_older_than_the_window(tmp_path: Path) -> None:
    """Messages stored before the window starts are not read (only the binary search probes
    touch them), however few keys the window holds."""
    start_ms = 1_790_000_000_000
    store = MessageStore(small_config(tmp_path))
    store.start()
    try:
        with store_clock(start_ms) as stored_at:
            for index in range(100):
                store.put_message(Message("T", b"x", {"IDEMPOTENCY_KEY": f"old{index}"},
                                          queue_id=0))
            stored_at.now_ms = start_ms + 3_600_000
            for index in range(2):
                store.put_message(Message("T", b"x", {"IDEMPOTENCY_KEY": f"new{index}"},
                                          queue_id=0))
        wait_dispatched(store)
        reads = _count_reads(store)
        clock = FakeClock()
        clock.now_ms = start_ms + 3_600_000 + 1000
        window = IdempotencyWindow(60.0, 5, clock_ms=clock)
        assert rebuild(window, store) == 2
        assert sum(reads) <= 2 + 10, f"{sum(reads)} heads read for 2 in the window"
    finally:
        store.shutdown()


async def test_an_indeterminate_entry_is_checked_before_it_is_replayed() -> None:
    """DLedger: a COMMIT_INDETERMINATE entry goes through the check at each lookup: replayed
    as the check answers it (PUT_OK once committed, from then on without a check), forgotten
    when the check finds another record at its offset (the key is then new); a PUT_OK entry
    is never checked."""
    clock = FakeClock()
    window = IdempotencyWindow(10.0, 100, clock_ms=clock)
    undecided = RememberedPut(PutMessageStatus.COMMIT_INDETERMINATE, "ID7", 0, 7, 700, 100)
    window.remember("T", "pending", undecided, clock.now_ms)
    window.remember("T", "gone", undecided, clock.now_ms)
    window.remember("T", "stored", _put(3), clock.now_ms)
    checked: list[str] = []
    answers = {"pending": undecided, "gone": None}

    def check(topic: str, key: str, put: RememberedPut) -> RememberedPut | None:
        assert topic == "T" and put == undecided
        checked.append(key)
        return answers[key]

    window.check_indeterminate = check
    assert window.lookup("T", "stored") == _put(3)
    assert window.lookup("T", "pending") == undecided
    assert window.lookup("T", "gone") is None
    assert checked == ["pending", "gone"] and len(window) == 2
    committed = RememberedPut(PutMessageStatus.PUT_OK, "ID7", 0, 7, 700, 100)
    answers["pending"] = committed
    assert window.lookup("T", "pending") == committed
    assert window.lookup("T", "pending") == committed
    assert checked == ["pending", "gone", "pending"]


async def test_a_new_leader_window_replaces_the_old_entries() -> None:
    """replace_entries: the remembered puts are the other window's, and no old one stays."""
    clock = FakeClock()
    window = IdempotencyWindow(10.0, 100, clock_ms=clock)
    window.remember("T", "old", _put(1), clock.now_ms)
    fresh = IdempotencyWindow(10.0, 100, clock_ms=clock)
    fresh.remember("T", "new", _put(2), clock.now_ms)
    window.replace_entries(fresh)
    assert window.lookup("T", "old") is None
    assert window.lookup("T", "new") == _put(2)

"""The idempotency window: the first result of each (topic, Idempotency-Key) for a while.

A produce with a key the window holds answers the remembered result and stores nothing. The key
also goes into the stored message (property IDEMPOTENCY_KEY), so that after a restart the window
is rebuilt from the messages stored within the last `window_s`. Bounded twice: entries older
than `window_s` are dropped, and at most `keys_max` entries are kept (oldest dropped first).

Used from the event loop only: a key being stored right now is a pending future that a
concurrent retry awaits, so two racing requests with one key still store one message. A request
never holds a key while it waits for another request's key: `claim` takes all of a request's
keys in one step or none of them, so no two requests can wait on each other (issue 12: two
batches that each held a key the other awaited hung until restart).

DLedger mode: an entry is only as good as the record it names. A new leader replaces the whole
window with the one its committed log gives (`replace_entries` after `rebuild`), so no entry
whose record a truncation removed survives a change of leader; and a COMMIT_INDETERMINATE entry
goes through `check_indeterminate` before it is replayed (the broker reads the record at its
offset: committed and its own, it is replayed as PUT_OK; still in this leader's log and its
own, replayed as indeterminate; anything else, forgotten, and the key is stored anew).
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from app.api.schemas.produce import PROPERTY_IDEMPOTENCY_KEY
from store import MessageStore, PutMessageStatus, RecordHead
from store.clock import ClockMs, wall_ms

log = logging.getLogger(__name__)

_READ_CHUNK_MESSAGES = 256

@dataclass(frozen=True, slots=True)
class RememberedPut:
    """What a replay answers: the first request's outcome."""

    status: PutMessageStatus
    msg_id: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    wrote_bytes: int
    deliver_at_ms: int | None = None  # a delayed message's due time


@dataclass(slots=True)
class _Entry:
    put: RememberedPut
    stored_at_ms: int


Key = tuple[str, str]  # (topic, idempotency key)
# (topic, key, the remembered indeterminate put) -> the put to replay, or None to forget it.
IndeterminateCheck = Callable[[str, str, RememberedPut], "RememberedPut | None"]


class IdempotencyWindow:
    def __init__(self, window_s: float, keys_max: int, clock_ms: ClockMs = wall_ms) -> None:
        assert window_s > 0 and keys_max >= 1
        self.window_ms = int(window_s * 1000)
        self.keys_max = keys_max
        self._clock_ms = clock_ms
        # Insertion order is time order: eviction pops from the front.
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._pending: dict[Key, asyncio.Future[RememberedPut | None]] = {}
        self.replay_count = 0
        self.check_indeterminate: IndeterminateCheck | None = None  # DLedger mode

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, topic: str, key: str) -> RememberedPut | asyncio.Future[
            RememberedPut | None] | None:
        """The remembered put, the future of a put in flight, or None (a new key)."""
        entry_key = (topic, key)
        entry = self._entries.get(entry_key)
        if entry is not None and entry.put.status is PutMessageStatus.COMMIT_INDETERMINATE \
                and self.check_indeterminate is not None:
            checked = self.check_indeterminate(topic, key, entry.put)
            if checked is None:
                log.info("idempotency: the indeterminate put of key %r (topic %s) at offset %d "
                         "is not in the log any more: forgotten", key, topic,
                         entry.put.commit_log_offset)
                del self._entries[entry_key]
                entry = None
            else:
                entry.put = checked
        if entry is not None:
            if entry.stored_at_ms >= self._clock_ms() - self.window_ms:
                self.replay_count += 1
                return entry.put
            del self._entries[entry_key]
        return self._pending.get(entry_key)

    def claim(self, topic: str, keys: Iterable[str]) -> dict[str, RememberedPut] | asyncio.Future[
            RememberedPut | None]:
        """Claim every key of one request in one step, or none of them.

        When another request is storing one of the keys, nothing is claimed and its future is
        returned: await it holding no key, then claim again. Otherwise the keys the window
        remembers are returned (to replay) and every other key is begun (call `finish` for
        each). Keys must be distinct.
        """
        keys = tuple(keys)
        pending = self._pending
        for key in keys:
            in_flight = pending.get((topic, key))
            if in_flight is not None:
                return in_flight
        remembered: dict[str, RememberedPut] = {}
        for key in keys:
            known = self.lookup(topic, key)
            if known is None:
                self.begin(topic, key)
            else:
                assert isinstance(known, RememberedPut)
                remembered[key] = known
        return remembered

    def begin(self, topic: str, key: str) -> None:
        """Mark a key as being stored (call after lookup returned None)."""
        entry_key = (topic, key)
        assert entry_key not in self._pending and entry_key not in self._entries
        self._pending[entry_key] = asyncio.get_running_loop().create_future()

    def finish(self, topic: str, key: str, put: RememberedPut | None) -> None:
        """End a put begun with `begin`: remember it when stored (None: not stored, forget)."""
        entry_key = (topic, key)
        future = self._pending.pop(entry_key)
        if put is not None:
            self.remember(topic, key, put, self._clock_ms())
        if not future.done():
            future.set_result(put)

    def remember(self, topic: str, key: str, put: RememberedPut, stored_at_ms: int) -> None:
        entry_key = (topic, key)
        self._entries.pop(entry_key, None)
        self._entries[entry_key] = _Entry(put, stored_at_ms)
        self._evict()

    def replace_entries(self, other: IdempotencyWindow) -> None:
        """Take `other`'s remembered puts in place of this window's (a new DLedger leader's
        window, rebuilt from its committed log); keys being stored now stay pending. One
        assignment: a request on the event loop sees the old entries or the new ones."""
        self._entries = other._entries

    def _evict(self) -> None:
        oldest_ms = self._clock_ms() - self.window_ms
        entries = self._entries
        while entries:
            first = next(iter(entries.values()))
            if len(entries) <= self.keys_max and first.stored_at_ms >= oldest_ms:
                break
            entries.popitem(last=False)


def rebuild(window: IdempotencyWindow, store: MessageStore) -> int:
    """Refill the window from messages stored within it (run at start, before serving).

    Per queue, a binary search on store timestamps finds where the window starts; from the
    queue's end back to there, heads are read without bodies (keys and properties are all it
    needs) until `keys_max` keyed messages are found: keyless messages in between are read and
    skipped, so the scan is bounded by the window's messages, and by keys_max when all are
    keyed. Memory is bounded by `keys_max` keys whatever the message size: the newest keys_max
    keyed messages over all queues are kept in a heap, the heads are read in chunks of at most
    _READ_CHUNK_MESSAGES. Returns how many keys were restored.
    """
    oldest_ms = window._clock_ms() - window.window_ms
    newest: list[tuple[int, int, str, str, RememberedPut]] = []  # a min-heap, keys_max at most
    for topic, queue_ids in store.queues.topics().items():
        for queue_id in queue_ids:
            for head in _keyed_heads_since(store, topic, queue_id, oldest_ms, window.keys_max):
                key = head.properties[PROPERTY_IDEMPOTENCY_KEY]
                put = RememberedPut(PutMessageStatus.PUT_OK, head.msg_id, head.queue_id,
                                    head.queue_offset, head.commit_log_offset, head.total_size)
                item = (head.store_timestamp_ms, head.commit_log_offset, topic, key, put)
                if len(newest) < window.keys_max:
                    heapq.heappush(newest, item)
                else:
                    heapq.heappushpop(newest, item)
    for stored_at_ms, _, topic, key, put in sorted(newest):
        window.remember(topic, key, put, stored_at_ms)
    if newest:
        log.info("idempotency: %d keys restored from the last %d s of messages", len(window),
                 window.window_ms // 1000)
    return len(window)


def checked_in_log(store: MessageStore, topic: str, key: str,
                   put: RememberedPut) -> RememberedPut | None:
    """DLedger: a remembered COMMIT_INDETERMINATE put, checked against the log before it is
    replayed (IdempotencyWindow.check_indeterminate): None when its offset holds no record or
    another message, PUT_OK once committed, else the put as it is (it may commit yet)."""
    found = store.record_at(put.commit_log_offset)
    if found is None:
        return None
    record, committed = found
    if record.topic != topic or record.properties.get(PROPERTY_IDEMPOTENCY_KEY) != key:
        return None  # the offset holds another message now
    if committed:
        return dataclasses.replace(put, status=PutMessageStatus.PUT_OK)
    return put  # still in this leader's log: it may commit yet


def _keyed_heads_since(store: MessageStore, topic: str, queue_id: int, oldest_ms: int,
                      keyed_max: int) -> Iterator[RecordHead]:
    """The heads of the queue's keyed messages stored at or after `oldest_ms`, newest first, at
    most `keyed_max`. Read backwards in chunks, so keyless messages after a keyed one never push
    it out (the live window does not count them either); the first chunk is only as large as
    the keys still wanted, then chunks double up to _READ_CHUNK_MESSAGES."""
    bounds = store.queue_offset_range(topic, queue_id)
    if bounds is None:
        return
    low, high = bounds
    first = _first_offset_at_or_after(store, topic, queue_id, low, high, oldest_ms)
    found = 0
    end = high
    chunk = min(_READ_CHUNK_MESSAGES, keyed_max)
    while end > first and found < keyed_max:
        start = max(first, end - chunk)
        for head in reversed(store.read_heads(topic, queue_id, start, end - start,
                                              PROPERTY_IDEMPOTENCY_KEY)):
            if PROPERTY_IDEMPOTENCY_KEY in head.properties \
                    and head.store_timestamp_ms >= oldest_ms:
                found += 1
                yield head
                if found == keyed_max:
                    return
        end = start
        chunk = min(_READ_CHUNK_MESSAGES, chunk * 2)


def _first_offset_at_or_after(store: MessageStore, topic: str, queue_id: int, low: int,
                              high: int, oldest_ms: int) -> int:
    """The first queue offset whose message was stored at or after `oldest_ms`."""
    while low < high:
        middle = (low + high) // 2
        heads = store.read_heads(topic, queue_id, middle, 1)
        if heads and heads[0].store_timestamp_ms >= oldest_ms:
            high = middle
        else:
            low = middle + 1
    return low

"""Group consumption on a broker: receive, ack and change of invisibility, decided by the pure
core (store/consumption/) and recorded in the log (docs/group-consumption.md).

Each decision is made under one lock (the registry's: the request's event loop, dispatch and the
expiry tick share it): the queue states are read, the core plans, the events are appended as pop
records of the metadata topic and applied to this broker's states at once, so the next decision
sees them; dispatch reaches the same records later and applies them as nothing here, and as the
events on every replica. Nothing waits under the lock: the guarantees of the appends (a slave's
ack on a SYNC_MASTER) are awaited after it, and the answer keeps the produce promise.

In DLedger mode the records and copies go through the group member (`appender`,
app/broker/dledger_consumption.py): a decision is applied here once its record is in the
leader's log, and the lock dispatch applies under (`state_lock`) is then another one, since
the member's host thread, which dispatches commits, must never wait for a decision waiting
on it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from app.broker.consumption_copies import Copies, CopyRefused, origin_of
from app.settings import Settings
from store import (
    GetMessageStatus,
    Message,
    MessageStore,
    PutMessageResult,
    PutMessageStatus,
    StoredMessage,
)
from store.clock import ClockMs, wall_ms
from store.consumption.events import Candidate, Changed, Disposition, Event
from store.consumption.handles import HandleCodec, HandleError, ReceiptHandle
from store.consumption.names import PROPERTY_ATTEMPTS, PROPERTY_ORDER_KEY, retry_topic
from store.consumption.policy import BackoffKind, RetryPolicy
from store.consumption.queue_state import AckStatus, ConsumptionError, QueueState
from store.consumption.records import PopRecord, QueueKey, decode, encode, is_pop_op
from store.consumption.registry import (
    RETRY_QUEUE_BIT,
    ConsumptionRegistry,
    RegistryFull,
    is_retry_queue,
)
from store.consumption.tags import TagFilter
from store.dispatch import SystemRecord
from store.metadata import MetadataStore
from store.metadata.log_records import OffsetSet
from store.system_topics import METADATA_TOPIC, PROPERTY_OP
from store.tag_reads import get_tagged_messages
from store.timers.scheduler import Lateness
from store.waits.completion import PutCompletion

log = logging.getLogger(__name__)
_T = TypeVar("_T")
# Puts messages in one append: each one's result (stored or refused) and its guarantees.
Appender = Callable[[Sequence[Message]], list[tuple[PutMessageResult, PutCompletion]]]

REPLAY_BATCH_MESSAGES = 256
# Every fifth receive visits the retry queues first (RocketMQ reads them 20% of the time), so a
# busy topic does not starve its retries.
RETRY_FIRST_EVERY = 5
# Events of one record at most (deliveries of a receive, expirations of a queue at a tick):
# a record stays far below message_size_max_bytes, and an expiry round holds the lock briefly.
RECORD_EVENTS_MAX = 64
EXPIRY_EVENTS_PER_ROUND_MAX = 1024
ACK_EVENTS_MAX = 256  # an ack event is a few bytes: more of them fit a record


@dataclass(eq=False)
class PopRefused(Exception):
    """A request the broker refuses; `code` is an API problem code (a PutMessageStatus name
    when the store refused a record), `setting` the bound that refused it, if any."""

    code: str
    detail: str
    setting: str | None = None


@dataclass(frozen=True, slots=True)
class Delivered:
    handle: str
    attempt: int
    message: StoredMessage
    origin: tuple[str, int, int, str]  # topic, queue id, queue offset, msg id of the original
    invisible_until_ms: int


@dataclass(frozen=True, slots=True)
class HandleResult:
    handle: str
    code: str  # "OK", "STALE_RECEIPT_HANDLE", "INVALID_RECEIPT_HANDLE"
    detail: str = ""
    new_handle: str | None = None
    invisible_until_ms: int | None = None


@dataclass(slots=True)
class Outcome:
    """What a decision wrote: the completions its answer awaits (none: nothing written)."""

    completions: list[PutCompletion]

    async def status(self) -> PutMessageStatus:
        """PUT_OK, or the first guarantee missing (a stored status: the answer is a 202)."""
        worst = PutMessageStatus.PUT_OK
        for completion in self.completions:
            status = await completion
            if status is not PutMessageStatus.PUT_OK and worst is PutMessageStatus.PUT_OK:
                worst = status
        return worst


class GroupConsumption:
    def __init__(self, settings: Settings, store: MessageStore,
                 metadata: Callable[[], MetadataStore], *,
                 clock_ms: ClockMs = wall_ms, appender: Appender | None = None,
                 copy_appender: Appender | None = None) -> None:
        """`appender` puts the pop records, `copy_appender` the retry and dead-letter copies
        (default: this broker's store; DLedger: the group member)."""
        self._settings = settings
        self._store = store
        self._metadata = metadata
        self.clock_ms = clock_ms
        self.lock = threading.RLock()  # decisions
        # Changes of the registry and readers outside decisions: the decision lock itself,
        # unless appends wait on the thread that dispatches (DLedger mode).
        self.state_lock = self.lock if appender is None else threading.RLock()
        self.appender = appender
        self._put_records = appender or store.put_system_messages
        self.registry = ConsumptionRegistry(window_max=settings.pop_window_max,
                                            states_max=settings.pop_queue_states_max)
        self.codec = HandleCodec(settings.pop_handle_key.encode())
        self.copies = Copies(store, self.retry_queue_count, copy_appender)
        self._turns: dict[tuple[str, str], itertools.count[int]] = {}
        self.refused_writes = 0
        # The lowest delivery id a decision hands out now (DLedger: from the leader's term).
        self.delivery_id_floor: Callable[[], int] = lambda: 0
        # When the master ended expired deliveries, after their invisible time.
        self.expiry_lateness = Lateness()

    # -- the log's records (dispatch thread, every replica) ------------------------------------

    def apply_record(self, record: SystemRecord) -> list[OffsetSet]:
        """Apply one pop record in log order; the group offset it moved, if any."""
        pop = decode(record.body)
        with self.state_lock:
            self.registry.apply(pop)
            committed = self.registry.committed_move(pop.key)
        if committed is None:
            return []
        key = pop.key
        return [OffsetSet(key.group, _stored_topic(key), key.queue_id & ~RETRY_QUEUE_BIT,
                          committed, False, pop.at_ms)]

    def replay(self, below_queue_offset: int) -> int:
        """At start: apply the pop records of the metadata topic below `below_queue_offset`
        (the metadata layer's position: those after it come through dispatch's feed)."""
        count, offset = 0, 0
        while offset < below_queue_offset:
            result = self._store.get_messages(METADATA_TOPIC, 0, offset, REPLAY_BATCH_MESSAGES)
            if result.status is GetMessageStatus.OFFSET_TOO_SMALL \
                    and result.next_offset > offset:
                offset = result.next_offset
                continue
            if not result.messages:
                break
            for message in result.messages:
                if message.queue_offset >= below_queue_offset:
                    return count
                if is_pop_op(message.properties.get(PROPERTY_OP, "")):
                    pop = decode(message.body)
                    with self.state_lock:
                        self.registry.apply(pop)
                        self.registry.committed_move(pop.key)
                    count += 1
            offset = result.next_offset
        return count

    def reset(self) -> None:
        with self.state_lock:
            self.registry.reset()

    # -- decisions (the master) ----------------------------------------------------------------

    def policy(self, group: str) -> RetryPolicy:
        config = self._metadata().find_group(name=group)
        retry_times_max = config.retry_times_max if config is not None else 16
        settings = self._settings
        return RetryPolicy(retry_times_max, BackoffKind(settings.pop_backoff),
                           min(settings.pop_backoff_initial_ms, 7_200_000))

    def retry_queue_count(self, group: str) -> int:
        config = self._metadata().find_group(name=group)
        return config.retry_queue_count if config is not None and config.retry_queue_count \
            else 1

    def receive(self, group: str, topic: str, read_queue_count: int, *, max_messages: int,
                invisible_ms: int, tags: TagFilter) -> tuple[list[Delivered], Outcome]:
        """Up to `max_messages` messages of the topic and its retry queues, each invisible to
        the group's other receives for `invisible_ms`."""
        policy = self.policy(group)
        retry_queues = self.retry_queue_count(group)
        delivered: list[Delivered] = []
        outcome = Outcome([])
        with self.lock:
            room = self._settings.pop_in_flight_per_group_max - self.registry.in_flight(group)
            if room <= 0:
                raise PopRefused("POP_IN_FLIGHT_MAX_REACHED", f"group {group!r} holds "
                                 f"{self._settings.pop_in_flight_per_group_max} messages in "
                                 "flight already", "pop_in_flight_per_group_max")
            wanted = min(max_messages, room)
            now_ms = self.clock_ms()
            for queue_id in self._queue_order(group, topic, read_queue_count, retry_queues):
                key = QueueKey(group, topic, queue_id)
                while len(delivered) < wanted and self._receive_chunk(
                        key, min(wanted - len(delivered), RECORD_EVENTS_MAX), now_ms,
                        invisible_ms, tags, policy, delivered, outcome):
                    pass
        return delivered, outcome

    def _receive_chunk(self, key: QueueKey, wanted: int, now_ms: int, invisible_ms: int,
                       tags: TagFilter, policy: RetryPolicy, delivered: list[Delivered],
                       outcome: Outcome) -> bool:
        """One receive decision on one queue (at most `wanted` deliveries: a record stays
        small); whether it did anything. The lock is held."""
        state = self.registry.state(key) or self._create(key)
        reads = self._candidates(key, state, wanted, tags)
        try:
            event = state.plan_receive(now_ms=now_ms, max_messages=wanted,
                                       invisible_ms=invisible_ms, candidates=reads.candidates,
                                       tag_filter=tags, policy=policy,
                                       delivery_id_floor=self.delivery_id_floor())
        except ConsumptionError as error:  # the queue changed under the read
            log.warning("receive of %s skipped: %s", key, error)
            return False
        if not event.scanned and not event.deliveries:
            return False
        group = key.group
        dead = [self.copies.dead_letter(group, message, scanned.attempts_before)
                for scanned in event.scanned if scanned.disposition is Disposition.DEAD
                and (message := reads.message(scanned.queue_offset)) is not None]
        outcome.completions.extend(_copied(self.copies.put, dead))
        outcome.completions.append(self._write(key, (event,), now_ms))
        for delivery in event.deliveries:
            message = reads.message(delivery.queue_offset)
            if message is None:
                continue  # gone (retention): its handle would name nothing readable
            handle = self.codec.encode(ReceiptHandle(
                group, key.topic, key.queue_id, delivery.queue_offset, delivery.attempt,
                delivery.delivery_id))
            delivered.append(Delivered(handle, delivery.attempt, message, origin_of(message),
                                       delivery.invisible_until_ms))
        return True

    def ack(self, group: str, topic: str,
            handles: Sequence[str]) -> tuple[list[HandleResult], Outcome]:
        """Ack each handle: OK, or STALE (409: not in flight under that delivery), or INVALID
        (400: not a handle of this group and topic). One record per queue."""
        results: list[HandleResult | None] = []
        by_key: dict[QueueKey, list[tuple[int, ReceiptHandle]]] = {}
        for number, text in enumerate(handles):
            try:
                handle = self.codec.decode_for(text, group=group, topic=topic)
            except HandleError as error:
                results.append(HandleResult(text, "INVALID_RECEIPT_HANDLE", str(error)))
                continue
            results.append(None)
            by_key.setdefault(QueueKey(group, topic, handle.queue_id), []).append(
                (number, handle))
        with self.lock:
            now_ms = self.clock_ms()
            records: list[PopRecord] = []
            for key, items in by_key.items():
                state = self.registry.state(key)
                events: list[Event] = []
                for number, handle in items:
                    decision = None if state is None else state.plan_ack(
                        queue_offset=handle.queue_offset, delivery_id=handle.delivery_id)
                    if decision is None or decision.status is AckStatus.STALE:
                        results[number] = _stale(handles[number], handle)
                    else:
                        assert decision.event is not None
                        events.append(decision.event)
                        results[number] = HandleResult(handles[number], "OK")
                records += [PopRecord(key, tuple(events[start:start + ACK_EVENTS_MAX]), now_ms)
                            for start in range(0, len(events), ACK_EVENTS_MAX)]
            outcome = self._write_all(records)
        return [result for result in results if result is not None], outcome

    def change(self, group: str, topic: str, text: str,
               invisible_ms: int) -> tuple[HandleResult, Outcome]:
        """A new invisible time for a message in flight (a new handle; the old one is stale),
        or 0: released now, receivable again after the group's backoff."""
        try:
            handle = self.codec.decode_for(text, group=group, topic=topic)
        except HandleError as error:
            return HandleResult(text, "INVALID_RECEIPT_HANDLE", str(error)), Outcome([])
        key = QueueKey(group, topic, handle.queue_id)
        policy = self.policy(group)
        outcome = Outcome([])
        with self.lock:
            state = self.registry.state(key)
            now_ms = self.clock_ms()
            decision = None if state is None else state.plan_change(
                queue_offset=handle.queue_offset, delivery_id=handle.delivery_id,
                invisible_ms=invisible_ms, now_ms=now_ms, policy=policy,
                delivery_id_floor=self.delivery_id_floor())
            if decision is None or decision.event is None:
                return _stale(text, handle), outcome
            event = decision.event
            copies = self.copies.for_ended(group, key, (event,), now_ms)
            outcome.completions.extend(_copied(self.copies.put, copies))
            outcome.completions.append(self._write(key, (event,), now_ms))
            if not isinstance(event, Changed):
                return HandleResult(text, "OK"), outcome
            delivery = event.delivery
            new_handle = self.codec.encode(ReceiptHandle(
                group, topic, handle.queue_id, handle.queue_offset, delivery.attempt,
                delivery.delivery_id))
        return HandleResult(text, "OK", new_handle=new_handle,
                            invisible_until_ms=delivery.invisible_until_ms), outcome

    def expire(self, is_master: Callable[[], bool]) -> int:
        """One expiry round: deliveries whose invisible time passed (at most
        EXPIRY_EVENTS_PER_ROUND_MAX) are retried now, or dead-lettered after their last
        attempt. On the master only; how many ended. The round's copies go in one append,
        then its records in another."""
        if not is_master():
            return 0
        with self.lock:
            now_ms = self.clock_ms()
            planned: list[tuple[PopRecord, list[Message]]] = []
            room = EXPIRY_EVENTS_PER_ROUND_MAX
            for group, topic in self.registry.group_topics():
                policy: RetryPolicy | None = None
                for key in self.registry.keys_of(group, topic):
                    state = self.registry.state(key)
                    due = None if state is None or not state.in_flight_count \
                        else state.next_expiry_ms()
                    if state is None or due is None or due > now_ms:
                        continue
                    policy = policy or self.policy(group)
                    events = state.plan_expiry(now_ms=now_ms, policy=policy)[:room]
                    room -= len(events)
                    for event in events:
                        entry = state.entry(event.queue_offset)
                        if entry is not None:
                            self.expiry_lateness.observe(now_ms - entry.until_ms)
                    for start in range(0, len(events), RECORD_EVENTS_MAX):
                        chunk = tuple(events[start:start + RECORD_EVENTS_MAX])
                        planned.append((PopRecord(key, chunk, now_ms),
                                        self.copies.for_ended(group, key, chunk, now_ms)))
                    if room <= 0:
                        break
                if room <= 0:
                    break
            if not planned:
                return 0
            try:
                self.copies.put([copy for _, copies in planned for copy in copies])
                results = self._put_records([_message_of(record) for record, _ in planned])
            except CopyRefused as error:
                log.warning("expiry not written (tried again next tick): %s", error.detail)
                return 0
            ended = 0
            with self.state_lock:
                for (record, _), (result, _) in zip(planned, results, strict=True):
                    if result.status.is_stored:
                        self.registry.apply(record)
                        ended += len(record.events)
            return ended

    # -- helpers ---------------------------------------------------------------------------------

    def _queue_order(self, group: str, topic: str, queue_count: int,
                     retry_queues: int) -> list[int]:
        turn = next(self._turns.setdefault((group, topic), itertools.count()))
        topic_queues = [(turn + number) % queue_count for number in range(queue_count)]
        retries = [RETRY_QUEUE_BIT | ((turn + number) % retry_queues)
                   for number in range(retry_queues)]
        return retries + topic_queues if turn % RETRY_FIRST_EVERY == 0 else \
            topic_queues + retries

    def _create(self, key: QueueKey) -> QueueState:
        topic, queue_id = _stored_topic(key), key.queue_id & ~RETRY_QUEUE_BIT
        committed = self._metadata().consumer_offset(group_name=key.group, topic=topic,
                                                     queue_id=queue_id)
        if committed is not None:
            start = committed.queue_offset
        else:
            bounds = self._store.queue_offset_range(topic, queue_id)
            start = bounds[0] if bounds is not None else 0
        try:
            with self.state_lock:
                return self.registry.create(key, start)
        except RegistryFull as error:
            raise PopRefused("POP_QUEUE_STATES_MAX_REACHED", str(error),
                             "pop_queue_states_max") from None

    def _candidates(self, key: QueueKey, state: QueueState, wanted: int,
                    tags: TagFilter) -> _Reads:
        """The messages a receive may hand out: the window's waiting ones are read as
        needed (`_Reads.message`); new ones from the scan offset, at most the window's room.
        With a tag filter, an entry whose tags code is none of the tags' is a candidate
        without a tag (filtered out) and its record is not read."""
        topic, queue_id = _stored_topic(key), key.queue_id & ~RETRY_QUEUE_BIT
        reads = _Reads(self._store, topic, queue_id)
        count = min(state.room, max(wanted, 32))
        if count <= 0:
            return reads
        result = self._store.get_messages(topic, queue_id, state.scan_offset, count) \
            if tags.tags is None else get_tagged_messages(
                self._store, topic, queue_id, state.scan_offset, count, tags.tags)
        # Both in queue-offset order; an unread (passed) entry has no message.
        read: list[tuple[int, StoredMessage | None]] = [
            (message.queue_offset, message) for message in result.messages]
        for offset, message in heapq.merge(read, ((offset, None) for offset in result.passed),
                                           key=lambda item: item[0]):
            if offset != state.scan_offset + len(reads.candidates):
                break
            if message is None:
                reads.candidates.append(Candidate(offset))
                continue
            reads.found[offset] = message
            attempts = message.properties.get(PROPERTY_ATTEMPTS)
            reads.candidates.append(Candidate(
                offset, message.properties.get("TAGS"),
                message.properties.get(PROPERTY_ORDER_KEY),
                int(attempts) if attempts and attempts.isdigit() else 0))
        return reads

    def _write_all(self, records: list[PopRecord]) -> Outcome:
        """Append records in one append and apply them here (the lock is held); a refusal
        raises, once the records stored before it are applied (DLedger: a run of appends is a
        prefix)."""
        if not records:
            return Outcome([])
        results = self._put_records([_message_of(record) for record in records])
        with self.state_lock:
            for record, (result, _) in zip(records, results, strict=True):
                if not result.status.is_stored:
                    self.refused_writes += 1
                    raise PopRefused(result.status.value, result.detail or
                                     "the broker did not store the consumption records")
                self.registry.apply(record)
        return Outcome([completion for _, completion in results])

    def _write(self, key: QueueKey, events: tuple[Event, ...], now_ms: int) -> PutCompletion:
        """Append one pop record and apply it here (the lock is held); a refusal raises."""
        return self._write_all([PopRecord(key, events, now_ms)]).completions[0]


class _Reads:
    """The messages of one queue a receive read (by queue offset), and its candidates."""

    def __init__(self, store: MessageStore, topic: str, queue_id: int) -> None:
        self._store, self._topic, self._queue_id = store, topic, queue_id
        self.candidates: list[Candidate] = []
        self.found: dict[int, StoredMessage] = {}

    def message(self, queue_offset: int) -> StoredMessage | None:
        message = self.found.get(queue_offset)
        if message is None:
            result = self._store.get_messages(self._topic, self._queue_id, queue_offset, 1)
            if result.messages and result.messages[0].queue_offset == queue_offset:
                message = result.messages[0]
        return message


def _message_of(record: PopRecord) -> Message:
    return Message(METADATA_TOPIC, encode(record), properties={PROPERTY_OP: record.op},
                   queue_id=0)


def _stored_topic(key: QueueKey) -> str:
    return retry_topic(key.group, key.topic) if is_retry_queue(key.queue_id) else key.topic


def _stale(text: str, handle: ReceiptHandle) -> HandleResult:
    return HandleResult(text, "STALE_RECEIPT_HANDLE",
                        f"the message at queue offset {handle.queue_offset} is not in flight "
                        f"under this handle's delivery (redelivered, changed or acked since)")


def _copied(put: Callable[..., _T], *args: object) -> _T:
    """A copy's put; a refusal (nothing written) refuses the decision before its record."""
    try:
        return put(*args)
    except CopyRefused as error:
        raise PopRefused(error.status, f"a retry or dead-letter copy was not stored: "
                         f"{error.detail}") from None

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
on it: a decision plans under both, appends under its own only, and does not apply its
record when the states were rebuilt meanwhile (`_apply_ahead`).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TypeVar

from app.broker.consumption_copies import Copies, CopyRefused, origin_of
from app.broker.consumption_types import (
    AckAnswer,
    AckAsk,
    Delivered,
    Outcome,
    PopRefused,
    ReceiveAnswer,
    ReceiveAsk,
)
from app.broker.pop_acks import Changes, decoded_handles, plan_acks
from app.broker.pop_candidates import Reads, candidates, stored_topic
from app.broker.pop_gathers import Gather
from app.settings import Settings
from ha import Replication
from store import (
    GetMessageStatus,
    Message,
    MessageStore,
    PutMessageResult,
)
from store.clock import ClockMs, wall_ms
from store.consumption.ahead import RecordsAhead
from store.consumption.events import Disposition, Received
from store.consumption.handles import HandleCodec
from store.consumption.policy import RetryPolicy, group_policy
from store.consumption.queue_state import ConsumptionError, QueueState
from store.consumption.records import PopRecord, QueueKey, decode, encode, is_pop_op
from store.consumption.registry import (
    RETRY_QUEUE_BIT,
    ConsumptionRegistry,
    RegistryFull,
    follow_record,
)
from store.dispatch import SystemRecord
from store.metadata import MetadataStore
from store.metadata.log_records import OP_GROUP_DELETE, GroupDelete, OffsetSet
from store.metadata.log_records import decode as decode_change
from store.system_topics import METADATA_TOPIC, PROPERTY_OP
from store.timers.scheduler import Lateness
from store.waits.completion import PutCompletion

log = logging.getLogger(__name__)
_T = TypeVar("_T")
# Puts messages in one append: each one's result (stored or refused) and its guarantees.
Appender = Callable[[Sequence[Message]], list[tuple[PutMessageResult, PutCompletion]]]

# A master's (a leader's) delivery ids start at its epoch (term) << this: a broker taking
# over after its predecessor answered a receive whose record it never got hands out none of
# that receive's ids, so the receive's handles stay stale (RocketMQ #9583).
DELIVERY_ID_ERA_SHIFT = 32
REPLAY_BATCH_MESSAGES = 256
# Every fifth receive visits the retry queues first (RocketMQ reads them 20% of the time), so a
# busy topic does not starve its retries.
RETRY_FIRST_EVERY = 5
# Events of one record at most (deliveries of a receive, expirations of a queue at a tick):
# a record stays far below message_size_max_bytes.
RECORD_EVENTS_MAX = 64
# Receives merged into one decision want this many messages at most: small receives share
# records; big ones fill their own (merged, each would wait for all of their records).
GATHER_WANTED_MAX = 4 * RECORD_EVENTS_MAX


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
        self.registry = ConsumptionRegistry(window_max=settings.pop_window_max,
                                            states_max=settings.pop_queue_states_max)
        self.codec = HandleCodec(settings.pop_handle_key.encode())
        self.copies = Copies(store, self.retry_queue_count, copy_appender)
        self._turns: dict[tuple[str, str], itertools.count[int]] = {}
        self.refused_writes = 0
        # Bumped by `reset` (the states forgotten, then rebuilt); records of decisions
        # planned before it are not applied ahead (`_apply_ahead`).
        self.states_generation = 0
        self.stale_applies_skipped = 0
        # The lowest delivery id a decision hands out now (DLedger: from the leader's term).
        self.delivery_id_floor: Callable[[], int] = lambda: 0
        # When the master ended expired deliveries, after their invisible time.
        self.expiry_lateness = Lateness()
        # This master's records applied ahead, until dispatch reaches them (`apply_record`).
        self.ahead = RecordsAhead()
        # Groups whose delete is being written (one at a time: group changes are written
        # under the metadata change lock): no decision receives for them (`closing`).
        self._closing: set[str] = set()

    # -- the log's records (dispatch thread, every replica) ------------------------------------

    def apply_record(self, record: SystemRecord) -> list[OffsetSet]:
        """Apply one pop record in log order; the group offset it moved, if any."""
        pop = self._taken_ahead(record) or decode(record.body)
        with self.state_lock:
            self.registry.apply(pop)
            committed = self.registry.committed_move(pop.key)
        if committed is None:
            return []
        key = pop.key
        return [OffsetSet(key.group, stored_topic(key), key.queue_id & ~RETRY_QUEUE_BIT,
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
                op = message.properties.get(PROPERTY_OP, "")
                with self.state_lock:  # a snapshot's states load where records below are gone
                    follow_record(self.registry, message.queue_offset, op, message.body)
                if op == OP_GROUP_DELETE:
                    self.drop_group(deleted_group(message.body))
                if is_pop_op(op):
                    pop = decode(message.body)
                    with self.state_lock:
                        self.registry.apply(pop)
                        self.registry.committed_move(pop.key)
                    count += 1
            offset = result.next_offset
        return count

    def drop_group(self, group: str) -> int:
        """A group's delete, applied in log order (dispatch, or the replay at start, on every
        replica), before the tables apply it (a snapshot drafted between the two would hold
        a deleted group's states: its check refuses a snapshot whose tables lag): the
        group's queue states, counts and turns go. How many queue states went."""
        with self.state_lock:
            for pair in [pair for pair in self._turns if pair[0] == group]:
                del self._turns[pair]
            return self.registry.drop_group(group)

    def reset(self) -> None:
        """Forget every state (the log's records are applied again): a decision planned
        from the states before does not apply its record here (`_apply_ahead`)."""
        with self.state_lock:
            self.registry.reset()
            self.ahead.clear()
            self.states_generation += 1

    # -- decisions (the master) ----------------------------------------------------------------

    @contextlib.contextmanager
    def closing(self, group: str) -> Iterator[None]:
        """While the group's delete is written and applied here: its receives are refused and
        its deliveries do not expire, so no record that would start a state for it follows
        its delete in the log. Marked under the decision lock: a decision under way has
        appended its records before the delete's. (A delete stored but not applied within
        the answer's wait is unmarked too: until dispatch applies it, the tables still show
        the group.)"""
        with self.lock:
            self._closing.add(group)
        try:
            yield
        finally:
            with self.lock:
                self._closing.discard(group)

    def is_closing(self, group: str) -> bool:
        return group in self._closing

    def policy(self, group: str) -> RetryPolicy:
        config = self._metadata().find_group(name=group)
        return group_policy(None if config is None else config.retry_times_max,
                            None if config is None else config.backoff,
                            self._settings.pop_default_backoff)

    def retry_queue_count(self, group: str) -> int:
        """The queues of the group's retry topics: its setting, within the broker's cap on
        a topic's queues (a group stored before the cap was checked on groups)."""
        config = self._metadata().find_group(name=group)
        count = config.retry_queue_count if config is not None else 0
        return min(count or 1, self._settings.queues_per_topic_max)

    def decide(self, receives: Sequence[ReceiveAsk], acks: Sequence[AckAsk]
               ) -> tuple[list[ReceiveAnswer], list[AckAnswer]]:
        """Receives and acks decided together, their records in as few appends as their
        queues allow: receives of one group and topic with the same invisible time and tags
        are one decision per queue (one record for all of them: their deliveries are handed
        out in order, each receive up to its `max_messages`), every ack of a queue one record,
        and each round's records one append (a queue is planned once a round, since its state
        changes only when a record is applied). A record the store refuses is applied
        nowhere: the receives or acks it was for are refused, nothing else."""
        handles = [decoded_handles(self.codec, ask) for ask in acks]
        receive_answers: list[ReceiveAnswer] = []
        lock = self.lock
        lock.acquire()
        try:
            now_ms = self.clock_ms()
            with self.state_lock:  # each round plans from the states as one generation holds
                generation = self.states_generation
                gathers = self._gathers(receives, receive_answers)
                ack_answers, ack_records = plan_acks(
                    self.registry, acks, handles, now_ms,
                    Changes(self.policy, self.delivery_id_floor(), self.codec))
                changes = any(ask.invisible_ms is not None for ask in acks)
                planned = [] if changes else self._plan_round(gathers, now_ms)
            if changes:
                # A change's new delivery id was planned from the states before this batch's
                # receives take theirs: its records go first, alone, after the copies of the
                # messages released.
                self._write_round([], self._copied_ends(ack_records, now_ms), generation)
                ack_records = []
                with self.state_lock:
                    generation = self.states_generation
                    planned = self._plan_round(gathers, now_ms)
            # Enough rounds for the largest gather from one queue, and a window of tag-filtered
            # messages: a receive is not answered short (and left to wait) while messages are
            # there.
            wanted = max((gather.wanted for gather in gathers), default=0)
            rounds = (wanted + self._settings.pop_window_max) // RECORD_EVENTS_MAX + 2
            for number in range(rounds):
                if number and not any(gather.refused is None and gather.order
                                      and len(gather.delivered) < gather.wanted
                                      for gather in gathers):
                    break  # every receive has what it wanted: no round to plan
                if number:
                    # Between two rounds the lock is let go, and the GIL with it (sleep(0)),
                    # so the expiry tick waiting for the lock gets it: held across a big
                    # batch's rounds, it left expired messages invisible for seconds. Each
                    # round plans from the states as they are (the acks, planned with the
                    # first, were written in it).
                    lock.release()
                    time.sleep(0)
                    lock.acquire()
                    with self.state_lock:
                        generation = self.states_generation
                        planned = self._plan_round(gathers, now_ms)
                records = [record for record, _ in planned] + \
                    [record for record, _ in ack_records]
                if not records:
                    break
                self._write_round(planned, ack_records, generation)
                ack_records = []
        finally:
            lock.release()
        for gather in gathers:
            gather.answer(receive_answers)
        return receive_answers, ack_answers

    def _gathers(self, receives: Sequence[ReceiveAsk],
                 answers: list[ReceiveAnswer]) -> list[Gather]:
        """The receives merged by (group, topic, queue count, invisible time, tags), up to
        GATHER_WANTED_MAX messages a gather, each wanting what the group's in-flight bound
        leaves it (none left: 429). The lock is held."""
        gathers: dict[tuple[object, ...], Gather] = {}  # the open one of each kind
        merged: list[Gather] = []
        rooms: dict[str, int] = {}
        bound = self._settings.pop_in_flight_per_group_max
        for number, ask in enumerate(receives):
            answers.append(PopRefused("POP_IN_FLIGHT_MAX_REACHED", ""))  # replaced below
            group = ask.group
            if group not in rooms and (group in self._closing
                                       or self._metadata().find_group(name=group) is None):
                # Deleted since the request looked, or being deleted (`closing`).
                answers[number] = PopRefused("GROUP_NOT_FOUND",
                                             f"group {group!r} does not exist")
                continue
            room = rooms.get(group)
            if room is None:
                room = bound - self.registry.in_flight(group)
            if room <= 0:
                answers[number] = PopRefused(
                    "POP_IN_FLIGHT_MAX_REACHED", f"group {group!r} holds {bound} messages in "
                    "flight already", "pop_in_flight_per_group_max")
                continue
            wanted = min(ask.max_messages, room)
            rooms[group] = room - wanted
            merge = (group, ask.topic, ask.queue_count, ask.invisible_ms, ask.tags)
            gather = gathers.get(merge)
            if gather is None or gather.wanted + wanted > GATHER_WANTED_MAX:
                gather = Gather(ask, self.policy(group), self._queue_order(
                    group, ask.topic, ask.queue_count, self.retry_queue_count(group)))
                self._follow_fifo(group, ask.topic)
                merged.append(gather)
                gathers[merge] = gather
            gather.wants.append((number, wanted))
        return merged

    def _plan_round(self, gathers: list[Gather],
                    now_ms: int) -> list[tuple[PopRecord, tuple[Gather, Reads]]]:
        """One receive decision per queue at most (each at most RECORD_EVENTS_MAX
        deliveries), for the gathers still wanting messages; queues that give nothing leave
        the gather's order. The lock is held."""
        planned: list[tuple[PopRecord, tuple[Gather, Reads]]] = []
        touched: set[QueueKey] = set()
        for gather in gathers:
            left = gather.wanted - len(gather.delivered)
            if gather.refused is not None:
                continue
            for queue_id in list(gather.order):
                if left <= 0:
                    break
                key = QueueKey(gather.group, gather.topic, queue_id)
                if key in touched:
                    continue
                try:
                    state = self.registry.state(key) or self._create(key)
                except PopRefused as error:
                    gather.refused = error
                    break
                reads = candidates(self._store, key, state, min(left, RECORD_EVENTS_MAX),
                                   gather.tags)
                try:
                    event = state.plan_receive(
                        now_ms=now_ms, max_messages=min(left, RECORD_EVENTS_MAX),
                        invisible_ms=gather.invisible_ms, candidates=reads.candidates,
                        tag_filter=gather.tags, policy=gather.policy,
                        delivery_id_floor=self.delivery_id_floor())
                except ConsumptionError as error:  # the queue changed under the read
                    log.warning("receive of %s skipped: %s", key, error)
                    event = None
                if event is None or not event.scanned and not event.deliveries:
                    gather.order.remove(queue_id)
                    continue
                reads.prefetch([delivery.queue_offset for delivery in event.deliveries])
                touched.add(key)
                left -= len(event.deliveries)
                planned.append((PopRecord(key, (event,), now_ms), (gather, reads)))
        return planned

    def _write_round(self, planned: list[tuple[PopRecord, tuple[Gather, Reads]]],
                     ack_records: list[tuple[PopRecord, list[Outcome]]],
                     generation: int) -> None:
        """A round's dead-letter copies, then its records in one append; each stored record
        applied here (`_apply_ahead`: planned from the states of `generation`) and its
        deliveries handed to its gather. The lock is held, the state lock not (the append
        may wait for the thread that dispatches)."""
        for gather in {id(gather): gather for _, (gather, _) in planned}.values():
            dead = [self.copies.dead_letter(gather.group, message, scanned.attempts_before)
                    for record, (owner, reads) in planned if owner is gather
                    for event in record.events if isinstance(event, Received)
                    for scanned in event.scanned if scanned.disposition is Disposition.DEAD
                    and (message := reads.message(scanned.queue_offset)) is not None]
            try:
                gather.completions.extend(_copied(self.copies.put, dead))
            except PopRefused as error:
                gather.refused = error
        planned = [(self._moded(record), owner) for record, owner in planned
                   if owner[0].refused is None]
        records = [record for record, _ in planned] + [record for record, _ in ack_records]
        if not records:
            return
        written = [message_of(record) for record in records]
        results = self._put_records(written)
        owners: list[tuple[Gather, Reads] | list[Outcome]] = \
            [owner for _, owner in planned] + [outcomes for _, outcomes in ack_records]
        for record, body, owner, (result, completion) in zip(
                records, [message.body for message in written], owners, results, strict=True):
            if not result.status.is_stored:
                self.refused_writes += 1
                refusal = PopRefused(result.status.value, result.detail or
                                     "the broker did not store the consumption record")
                if isinstance(owner, list):
                    for outcome in owner:
                        outcome.refused = refusal
                else:
                    owner[0].refused = refusal
                continue
            self._apply_ahead(record, generation, body, result)
            if isinstance(owner, list):
                self._wake_receivers(record)
                for outcome in owner:
                    outcome.completions.append(completion)
            else:
                gather, reads = owner
                gather.completions.append(completion)
                self._deliver(record, gather, reads)

    def _deliver(self, record: PopRecord, gather: Gather, reads: Reads) -> None:
        group, topic, queue_id = record.key.group, record.key.topic, record.key.queue_id
        encode, delivered = self.codec.encode_fields, gather.delivered
        for event in record.events:
            assert isinstance(event, Received)
            for delivery in event.deliveries:
                message = reads.message(delivery.queue_offset)
                if message is None:
                    continue  # gone (retention): its handle would name nothing readable
                handle = encode(group, topic, queue_id, delivery.queue_offset,
                                delivery.attempt, delivery.delivery_id)
                delivered.append(Delivered(handle, delivery.attempt, message,
                                           origin_of(message), delivery.invisible_until_ms))

    def _copied_ends(self, records: list[tuple[PopRecord, list[Outcome]]], now_ms: int
                     ) -> list[tuple[PopRecord, list[Outcome]]]:
        """The records whose retry and dead-letter copies (of the messages their changes
        released) are stored, in one put before them; a record whose copies were refused
        refuses its asks and is left out. The lock is held."""
        needs = [(record, outcomes, self.copies.for_ended(record.key.group, record.key,
                                                          record.events, now_ms))
                 for record, outcomes in records]
        copies = [copy for _, _, copies in needs for copy in copies]
        if not copies:
            return records
        refused: PopRefused | None = None
        try:
            completions = _copied(self.copies.put, copies)
        except PopRefused as refusal:
            completions, refused = [], refusal
        kept = []
        for record, outcomes, copies in needs:
            for outcome in outcomes if copies else ():
                outcome.completions.extend(completions)
                outcome.refused = outcome.refused or refused
            if not copies or refused is None:
                kept.append((record, outcomes))
        return kept

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
        topic, queue_id = stored_topic(key), key.queue_id & ~RETRY_QUEUE_BIT
        committed = self._metadata().consumer_offset(group_name=key.group, topic=topic,
                                                     queue_id=queue_id)
        if committed is not None:
            start = committed.queue_offset
        else:
            bounds = self._store.queue_offset_range(topic, queue_id)
            start = bounds[0] if bounds is not None else 0
        try:
            with self.state_lock:  # its ids above a deleted group's (drop_group)
                return self.registry.create(
                    key, start, fifo=self._fifo(key),
                    next_delivery_id=self.registry.dropped_delivery_id_next)
        except RegistryFull as error:
            raise PopRefused("POP_QUEUE_STATES_MAX_REACHED", str(error),
                             "pop_queue_states_max") from None

    def _fifo(self, key: QueueKey) -> bool:
        """Whether the group's `fifo` orders this queue: a topic's queue of a FIFO group (its
        retry queues hold copies of messages released while it was not FIFO: delivered as
        before)."""
        if key.queue_id & RETRY_QUEUE_BIT:
            return False
        config = self._metadata().find_group(name=key.group)
        return config is not None and config.fifo

    def _follow_fifo(self, group: str, topic: str) -> None:
        """The group's `fifo` as it is now, on its topic's queue states, before a receive
        plans from them (a change of the flag applies from each queue's next receive; its
        record carries the mode to the replicas: `_moded`). The state lock is held."""
        fifo: bool | None = None
        for key in self.registry.keys_of(group, topic):
            state = self.registry.state(key)
            if state is None or key.queue_id & RETRY_QUEUE_BIT:
                continue
            if fifo is None:
                fifo = self._fifo(key)
            state.fifo = fifo

    def _moded(self, record: PopRecord) -> PopRecord:
        """A receive's record with the mode its queue was planned in (every replica's state
        takes it from the record)."""
        state = self.registry.state(record.key)
        fifo = state.fifo if state is not None else self._fifo(record.key)
        return replace(record, fifo=True) if fifo else record

    def _put_records(self, messages: Sequence[Message]
                     ) -> list[tuple[PutMessageResult, PutCompletion]]:
        """Put pop records in one append: through the group member (DLedger) or the store."""
        if self.appender is not None:
            return self.appender(messages)
        return self._store.put_system_messages(messages, applied_ahead=True)

    def _wake_receivers(self, record: PopRecord) -> None:
        """After an expiry's or an ack's record: when its queue holds waiting messages (a
        retry in place, or the next of an order key, which an ack or a dead letter lets go),
        the receives waiting on that queue look again (no new entry arrives to wake them)."""
        state = self.registry.state(record.key)
        if state is None:
            return
        state.came_due(record.at_ms)  # retries in place it made ready: this poke tells them
        if state.has_waiting:
            self._poke(record.key)

    def _poke(self, key: QueueKey) -> None:
        self._store.arrivals.poke(stored_topic(key), key.queue_id & ~RETRY_QUEUE_BIT)

    def _apply_ahead(self, record: PopRecord, generation: int, body: bytes,
                     result: PutMessageResult) -> None:
        """Apply a decision's stored record (`body`, as `result` stored it) here at once,
        so the next decision sees it, and keep it for dispatch (`ahead`); unless the states
        were rebuilt since it was planned from them (`reset`: a cut or a lost record, while
        its append waited): it then applies as dispatch reaches it, if the group's log keeps
        it. Applied to the rebuilt states it could hold what no log holds, or not fit them (a
        decision answered 500)."""
        with self.state_lock:
            if generation != self.states_generation:
                self.stale_applies_skipped += 1
                log.warning("group consumption: a decision's record not applied ahead: the "
                            "states were rebuilt while it was appended")
                return
            self.registry.apply(record)
            self.ahead.keep(result.commit_log_offset, body, record)

    def _taken_ahead(self, record: SystemRecord) -> PopRecord | None:
        """The record this master applied ahead for these bytes at this offset (its decode
        skipped: store/consumption/ahead.py), or None."""
        if not len(self.ahead):  # (a slave keeps none)
            return None
        with self.state_lock:
            return self.ahead.take(record.commit_log_offset, record.body)


def deleted_group(body: bytes) -> str:
    """The name a group delete's record holds."""
    change = decode_change(OP_GROUP_DELETE, body)
    assert isinstance(change, GroupDelete)
    return change.name


def message_of(record: PopRecord) -> Message:
    return Message(METADATA_TOPIC, encode(record), properties={PROPERTY_OP: record.op},
                   queue_id=0)


def _copied(put: Callable[..., _T], *args: object) -> _T:
    """A copy's put; a refusal (nothing written) refuses the decision before its record."""
    try:
        return put(*args)
    except CopyRefused as error:
        raise PopRefused(error.status, f"a retry or dead-letter copy was not stored: "
                         f"{error.detail}") from None


def epoch_delivery_id_floor(replication: Replication | None) -> int:
    """Classic modes: the lowest delivery id this master hands out, from its HA epoch (a slave
    decides nothing: 0)."""
    service = replication.service if replication is not None else None
    if service is None or not service.epochs:
        return 0
    return service.epochs[-1].number << DELIVERY_ID_ERA_SHIFT

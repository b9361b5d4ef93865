"""A hypothesis state machine of group consumption against a model, on a fake clock.

Receives, acks (with current, stale, foreign and garbage handles), changes of invisibility,
releases, expiries and the delayed re-puts into the retry topic interleave freely over one
topic queue (FIFO or not, the mode turned on and off as a group's flag is, with order keys and
a tag filter) and the group's retry queue. After every step: what the core holds in flight is
what the model handed out and did not end, no order key has two messages in flight, the
committed offset is the lowest offset not done, and a registry fed every event as its pop
record (a replica's) holds the same states, in the mode of the last receive it applied.
At the end the queues are drained on the clock: every message is acked or dead-lettered
(or filtered out) exactly once, a dead letter after exactly retry_times_max + 1 attempts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from store.consumption import events as ev
from store.consumption.handles import HandleCodec, HandleError, ReceiptHandle
from store.consumption.policy import Backoff, RetryPolicy
from store.consumption.queue_state import FIFO_KEY, AckStatus, QueueState
from store.consumption.records import PopRecord, QueueKey
from store.consumption.registry import RETRY_QUEUE_BIT, ConsumptionRegistry
from store.consumption.snapshot import queue_image
from store.consumption.tags import TagFilter

GROUP = "G"
TOPICS = {"main": "T", "retry": "%RETRY%G"}
QUEUES = tuple(TOPICS)
KEYS = {"main": QueueKey(GROUP, "T", 0), "retry": QueueKey(GROUP, "T", RETRY_QUEUE_BIT)}
CODEC = HandleCodec(b"test-key")
DRAIN_ROUNDS_MAX = 5_000
BACKOFF_CAP_MS = 1_000


@dataclass(frozen=True)
class Message:
    message_id: int
    tag: str | None
    order_key: str | None
    attempts_before: int


class ConsumptionMachine(RuleBasedStateMachine):
    @initialize(retry_times_max=st.integers(0, 3), fifo=st.booleans(),
                window_max=st.integers(1, 6), expression=st.sampled_from(["*", "A || B", "A"]))
    def setup(self, retry_times_max: int, fifo: bool, window_max: int, expression: str) -> None:
        self.policy = RetryPolicy(retry_times_max=retry_times_max,
                                  backoff=Backoff.exponential(100, max_ms=BACKOFF_CAP_MS))
        self.fifo = fifo
        self.tag_filter = TagFilter.parse(expression)
        self.states = {"main": QueueState(fifo=fifo, window_max=window_max),
                       "retry": QueueState(window_max=window_max)}
        self.replica = ConsumptionRegistry(window_max=window_max)
        self.received_mode = {"main": fifo, "retry": False}  # of the last receive applied
        self.messages: dict[str, list[Message]] = {queue: [] for queue in QUEUES}
        self.done: dict[str, set[int]] = {queue: set() for queue in QUEUES}
        self.current: dict[str, dict[int, int]] = {queue: {} for queue in QUEUES}
        # The key each offset in flight was handed out under (the mode may change since).
        self.handed_key: dict[str, dict[int, str | None]] = {queue: {} for queue in QUEUES}
        self.delayed: list[tuple[int, Message]] = []
        self.ready_at_ms: dict[str, dict[int, int]] = {queue: {} for queue in QUEUES}
        self.handles: list[str] = []
        self.fate: dict[int, str] = {}
        self.acks: Counter[int] = Counter()
        self.produced = 0
        self.now_ms = 0

    # -- the model's steps ---------------------------------------------------------------------
    def _apply(self, queue: str, event: ev.Event) -> bool:
        """Apply an event to the master's state, and its record to the replica (a receive's
        record carries the mode it was decided in, as the broker's do)."""
        applied = self.states[queue].apply(event)
        fifo = isinstance(event, ev.Received) and self.states[queue].fifo
        if applied and isinstance(event, ev.Received):
            self.received_mode[queue] = fifo
        self.replica.apply(PopRecord(KEYS[queue], (event,), self.now_ms, fifo))
        return applied

    def _key(self, queue: str, message: Message) -> str | None:
        if message.order_key is None and self.fifo and queue == "main":
            return FIFO_KEY
        return message.order_key

    def _hand_out(self, queue: str, delivery: ev.Delivery) -> None:
        self.current[queue][delivery.queue_offset] = delivery.delivery_id
        self.handles.append(CODEC.encode(ReceiptHandle(
            GROUP, TOPICS[queue], 0, delivery.queue_offset, delivery.attempt,
            delivery.delivery_id)))

    def _receive(self, queue: str, max_messages: int, invisible_ms: int) -> list[ev.Delivery]:
        state = self.states[queue]
        candidates = [ev.Candidate(offset, message.tag, message.order_key, message.attempts_before)
                      for offset, message in enumerate(self.messages[queue])
                      if offset >= state.scan_offset]
        event = state.plan_receive(now_ms=self.now_ms, max_messages=max_messages,
                                   invisible_ms=invisible_ms, candidates=candidates,
                                   tag_filter=self.tag_filter, policy=self.policy)
        assert len(event.deliveries) <= max_messages
        for scanned in event.scanned:
            message = self.messages[queue][scanned.queue_offset]
            assert scanned.disposition is not ev.Disposition.DEAD  # retries stop at the bound
            if scanned.disposition is ev.Disposition.FILTERED:
                assert not self.tag_filter.matches(message.tag)
                self._end(queue, scanned.queue_offset, "filtered")
        offsets = [delivery.queue_offset for delivery in event.deliveries]
        assert len(set(offsets)) == len(offsets)
        for delivery in event.deliveries:
            offset = delivery.queue_offset
            message = self.messages[queue][offset]
            assert offset not in self.current[queue], "handed out while in flight"
            assert offset not in self.done[queue], "handed out after it was done"
            assert self.ready_at_ms[queue].pop(offset, 0) <= self.now_ms, "retried before due"
            assert self.tag_filter.matches(message.tag)
            key = self._key(queue, message)
            self.handed_key[queue][offset] = key
            if key is not None:  # FIFO within a key: every earlier one of the key is done
                assert all(earlier in self.done[queue] for earlier in range(offset)
                           if self._key(queue, self.messages[queue][earlier]) == key)
        self._apply(queue, event)
        for delivery in event.deliveries:
            self._hand_out(queue, delivery)
        return list(event.deliveries)

    def _end(self, queue: str, offset: int, fate: str) -> None:
        self.done[queue].add(offset)
        message_id = self.messages[queue][offset].message_id
        assert message_id not in self.fate, f"message {message_id} ended twice"
        self.fate[message_id] = fate

    def _ended(self, queue: str, event: ev.Retried | ev.DeadLettered, *,
               expired: bool = False) -> None:
        offset = event.queue_offset
        assert self.current[queue].pop(offset) == event.delivery_id
        message = self.messages[queue][offset]
        assert self._apply(queue, event)
        if isinstance(event, ev.DeadLettered):
            assert event.attempt == self.policy.attempts_max
            self._end(queue, offset, "dead")
        elif event.in_place:  # keyed, or an expiry while the window has room
            assert self._key(queue, message) is not None or expired
            self.ready_at_ms[queue][offset] = event.due_ms
        else:
            assert self._key(queue, message) is None
            self.done[queue].add(offset)  # this offset is done; the message lives on, delayed
            self.delayed.append((event.due_ms, Message(message.message_id, message.tag, None,
                                                       event.attempt)))

    def _tick(self, advance_ms: int) -> None:
        self.now_ms += advance_ms
        for queue in QUEUES:
            state = self.states[queue]
            room_was_half = state.room * 2 >= state.window_max
            for event in state.plan_expiry(now_ms=self.now_ms, policy=self.policy):
                if isinstance(event, ev.Retried):
                    assert event.due_ms == self.now_ms
                    message = self.messages[queue][event.queue_offset]
                    assert event.in_place == (room_was_half
                                              or self._key(queue, message) is not None)
                self._ended(queue, event, expired=True)
        due = [(due_ms, message) for due_ms, message in self.delayed if due_ms <= self.now_ms]
        self.delayed = [entry for entry in self.delayed if entry[0] > self.now_ms]
        self.messages["retry"].extend(message for _, message in sorted(
            due, key=lambda entry: (entry[0], entry[1].message_id)))

    def _present(self, text: str) -> tuple[str, ReceiptHandle, bool]:
        """Decode as the ack route would, and say whether the model holds it in flight."""
        for queue, topic in TOPICS.items():
            try:
                handle = CODEC.decode_for(text, group=GROUP, topic=topic)
            except HandleError:
                continue
            current = self.current[queue].get(handle.queue_offset) == handle.delivery_id
            return queue, handle, current
        raise AssertionError("a handle the machine made was refused")

    # -- rules ---------------------------------------------------------------------------------
    @rule(tag=st.sampled_from([None, "A", "B", "C"]), order_key=st.sampled_from([None, "x", "y"]))
    def produce(self, tag: str | None, order_key: str | None) -> None:
        self.messages["main"].append(Message(self.produced, tag, order_key, 0))
        self.produced += 1

    @rule(queue=st.sampled_from(QUEUES), max_messages=st.integers(1, 4),
          invisible_ms=st.sampled_from([10, 200, 2_000]))
    def receive(self, queue: str, max_messages: int, invisible_ms: int) -> None:
        self._receive(queue, max_messages, invisible_ms)

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        queue, handle, current = self._present(data.draw(st.sampled_from(self.handles)))
        decision = self.states[queue].plan_ack(queue_offset=handle.queue_offset,
                                               delivery_id=handle.delivery_id)
        assert (decision.status is AckStatus.OK) == current, "a stale handle acked, or not"
        if isinstance(decision.event, ev.Acked):
            assert self._apply(queue, decision.event)
            del self.current[queue][handle.queue_offset]
            self.acks[self.messages[queue][handle.queue_offset].message_id] += 1
            self._end(queue, handle.queue_offset, "acked")

    @precondition(lambda self: self.handles)
    @rule(data=st.data(), invisible_ms=st.sampled_from([0, 50, 2_000]))
    def change(self, data: st.DataObject, invisible_ms: int) -> None:
        queue, handle, current = self._present(data.draw(st.sampled_from(self.handles)))
        decision = self.states[queue].plan_change(
            queue_offset=handle.queue_offset, delivery_id=handle.delivery_id,
            invisible_ms=invisible_ms, now_ms=self.now_ms, policy=self.policy)
        assert (decision.status is AckStatus.OK) == current
        event = decision.event
        if isinstance(event, ev.Changed):
            assert invisible_ms > 0 and event.old_delivery_id == handle.delivery_id
            assert self._apply(queue, event)
            self._hand_out(queue, event.delivery)
        elif isinstance(event, ev.Retried | ev.DeadLettered):
            assert invisible_ms == 0
            if isinstance(event, ev.Retried):
                assert event.due_ms == self.now_ms + self.policy.backoff_ms(handle.attempt)
            self._ended(queue, event)

    @rule(text=st.one_of(st.text(max_size=60), st.just(CODEC.encode(
        ReceiptHandle("other", "T", 0, 0, 1, 1)))))
    def ack_garbage_or_foreign(self, text: str) -> None:
        for topic in TOPICS.values():
            with pytest.raises(HandleError):
                CODEC.decode_for(text, group=GROUP, topic=topic)

    @rule(advance_ms=st.sampled_from([1, 60, 250, 1_500]))
    def tick(self, advance_ms: int) -> None:
        self._tick(advance_ms)

    @rule(fifo=st.booleans())
    def set_fifo(self, fifo: bool) -> None:
        """The group's flag changed: the master's topic queue takes it before its next
        decision (the retry queue is never FIFO)."""
        self.fifo = fifo
        self.states["main"].fifo = fifo

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def in_flight_is_what_the_model_handed_out(self) -> None:
        for queue, state in self.states.items():
            held = {offset: entry.delivery_id for offset, entry in state.in_flight().items()}
            assert held == self.current[queue]
            assert state.in_flight_count == len(held)  # the count the in-flight bound reads
            keys = [self.handed_key[queue][offset] for offset in held]
            keyed = [key for key in keys if key is not None]
            assert len(keyed) == len(set(keyed)), "two messages of one key in flight"

    @invariant()
    def a_replica_fed_the_records_holds_the_master_s_states(self) -> None:
        for queue, state in self.states.items():
            replica = self.replica.state(KEYS[queue])
            if replica is None:
                assert state.scan_offset == 0  # no receive took an offset yet
                continue
            assert queue_image(KEYS[queue], replica) == replace(
                queue_image(KEYS[queue], state), fifo=self.received_mode[queue])

    @invariant()
    def committed_is_the_lowest_offset_not_done(self) -> None:
        for queue, state in self.states.items():
            lowest = next(offset for offset in range(len(self.messages[queue]) + 1)
                          if offset not in self.done[queue])
            assert state.committed_offset == min(lowest, state.scan_offset)
            assert state.scan_offset - state.committed_offset <= state.window_max

    def teardown(self) -> None:
        if not hasattr(self, "states"):
            return
        for _ in range(DRAIN_ROUNDS_MAX):
            if len(self.fate) == self.produced and not self.delayed:
                break
            self._tick(10 * BACKOFF_CAP_MS)  # past every invisible time and backoff
            for queue in QUEUES:
                for delivery in self._receive(queue, 1_024, 100):
                    message = self.messages[queue][delivery.queue_offset]
                    if message.message_id % 2 == 0:  # odd ones fail until dead-lettered
                        event = self.states[queue].plan_ack(
                            queue_offset=delivery.queue_offset,
                            delivery_id=delivery.delivery_id).event
                        assert isinstance(event, ev.Acked) and self._apply(queue, event)
                        del self.current[queue][delivery.queue_offset]
                        self.acks[message.message_id] += 1
                        self._end(queue, delivery.queue_offset, "acked")
        assert len(self.fate) == self.produced and not self.delayed, "a message never ended"
        assert all(count == 1 for count in self.acks.values())
        for queue, state in self.states.items():
            assert state.committed_offset == len(self.messages[queue]) == state.scan_offset
            assert state.in_flight() == {}


def _run(max_examples: int) -> None:
    run_state_machine_as_test(ConsumptionMachine, settings=settings(
        max_examples=max_examples, stateful_step_count=40, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))


def test_consumption_against_the_model() -> None:
    _run(150)


@pytest.mark.slow
@pytest.mark.wide
def test_consumption_against_the_model_at_length() -> None:
    _run(800)

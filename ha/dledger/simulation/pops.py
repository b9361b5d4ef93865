"""Group consumption in the DLedger simulation: pop records through the group, with the
product's pure core (store/consumption/: QueueState's decisions, the registry that dispatch
feeds, the records).

As the broker does (app/broker/dledger_consumption.py): a member that leads term t decides
once its commit reached the end its log had when it was first seen leading t and it applied
everything up to there; it appends each decision's record and applies it to its states at
once (ahead of the commit); every member applies the committed records in log order (its
dispatch), which is nothing for a record it applied ahead. A truncation of the member's log
below a record it applied ahead rebuilds its states from the committed records; a crash
rebuilds them at restart; a reset to the leader's base rebuilds them from the committed
records up to the base.

One queue of `MESSAGE_COUNT` messages, each with its own order key (its retries stay in the
queue, as the product's keyed retries do), a group that allows two retries. The leader's
consumers receive, ack most of what they hold, and drop some (a consumer crash: the delivery
expires and is retried, or dead-lettered after its last attempt).

Checks (`PopTruth`, on the committed log, as it grows): every event of a committed record
applies to the committed state (a record decided on states the log does not hold fails to
apply, or applies as nothing); no message is acked twice; an acked or dead-lettered message is
never delivered again. At the end every message is acked or dead-lettered, and every member's
states are the committed log's.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import ClassVar

from ha.dledger.core.member import Role
from ha.dledger.core.node import DLedgerNode
from ha.dledger.simulation.invariants import InvariantViolation
from store.consumption.events import (
    Acked,
    Candidate,
    DeadLettered,
    Event,
    Received,
)
from store.consumption.policy import Backoff, RetryPolicy
from store.consumption.queue_state import AckStatus, ConsumptionError, QueueState
from store.consumption.records import PopRecord, QueueKey, decode, encode
from store.consumption.registry import ConsumptionRegistry
from store.consumption.tags import TagFilter

POP_PREFIX = b"\x00pop:"
MESSAGE_COUNT = 80
KEY = QueueKey("g", "t", 0)
# Ticks stand for milliseconds: two retries, backoff from 2 ticks doubling to 16.
POLICY = RetryPolicy(retry_times_max=2, backoff=Backoff.exponential(2, max_ms=16))
EVERYTHING = TagFilter(None)
# Appends one record through the member; the index it took, or None (refused).
Append = Callable[[bytes], int | None]


def is_pop(payload: bytes) -> bool:
    return payload.startswith(POP_PREFIX)


def _payload(events: tuple[Event, ...], now: int) -> bytes:
    return POP_PREFIX + encode(PopRecord(KEY, events, now))


@lru_cache(maxsize=4096)
def _record(payload: bytes) -> PopRecord:
    """Decoded once for every member (a record is immutable)."""
    return decode(payload[len(POP_PREFIX):])


def _candidates(state: QueueState) -> list[Candidate]:
    end = min(MESSAGE_COUNT, state.scan_offset + max(state.room, 0))
    return [Candidate(offset, None, f"k{offset}") for offset in range(state.scan_offset, end)]


def fingerprint(registry: ConsumptionRegistry) -> tuple[object, ...]:
    state = registry.state(KEY)
    if state is None:
        return ()
    return (state.committed_offset, state.scan_offset, state.next_delivery_id,
            tuple(sorted((offset, entry.state.value, entry.attempt, entry.delivery_id,
                          entry.until_ms) for offset in range(state.committed_offset,
                                                              state.scan_offset)
                         if (entry := state.entry(offset)) is not None)))


@dataclass
class PopTruth:
    """The committed log's pop records, applied once each in index order, checked."""

    registry: ConsumptionRegistry = field(default_factory=ConsumptionRegistry)
    applied_index: int = 0
    acked: set[int] = field(default_factory=set)
    dead: set[int] = field(default_factory=set)

    def advance(self, committed: dict[int, tuple[int, bytes]]) -> None:
        while self.applied_index + 1 in committed:
            self.applied_index += 1
            payload = committed[self.applied_index][1]
            if is_pop(payload):
                self._apply(self.applied_index, _record(payload))

    def _apply(self, index: int, record: PopRecord) -> None:
        state = self.registry.state(KEY)
        for event in record.events:
            if isinstance(event, Received):
                again = [d.queue_offset for d in event.deliveries
                         if d.queue_offset in self.acked | self.dead]
                if again:
                    raise InvariantViolation(f"pops: committed entry {index} delivers "
                                             f"{again}, acked or dead-lettered before")
            elif isinstance(event, Acked) and event.queue_offset in self.acked:
                raise InvariantViolation(f"pops: entry {index} acks offset "
                                         f"{event.queue_offset} a second time")
            try:
                if state is None:
                    self.registry.apply(PopRecord(KEY, (event,), record.at_ms))
                    state = self.registry.state(KEY)
                    fresh = state is not None
                else:
                    fresh = state.apply(event)
            except ConsumptionError as error:
                raise InvariantViolation(f"pops: committed entry {index} does not fit the "
                                         f"committed state: {error}") from error
            if not fresh:
                raise InvariantViolation(f"pops: committed entry {index} applies as nothing "
                                         f"({event}): decided on states the log does not hold")
            if isinstance(event, Acked):
                self.acked.add(event.queue_offset)
            elif isinstance(event, DeadLettered):
                self.dead.add(event.queue_offset)

    def check_done(self) -> None:
        missing = sorted(set(range(MESSAGE_COUNT)) - self.acked - self.dead)
        assert not missing, f"liveness: pops never acked nor dead-lettered {missing}"


@dataclass
class MemberPops:
    registry: ConsumptionRegistry = field(default_factory=ConsumptionRegistry)
    applied_index: int = 0
    ahead: dict[int, bytes] = field(default_factory=dict)  # index -> record applied ahead
    term: int | None = None
    takeover_end: int = 0
    # Broken variants a test turns on (the checks must see the difference): keep what a cut
    # took; decide before the take-over point is committed and applied.
    rebuild_on_cut: ClassVar[bool] = True
    decide_at_once: ClassVar[bool] = False
    cut_rebuilds: int = 0  # rebuilds because a cut took a record applied ahead

    def apply_committed(self, node_id: str, node: DLedgerNode, commit_index: int,
                        committed: dict[int, tuple[int, bytes]]) -> None:
        """The member's dispatch: its committed pop records, in log order."""
        base_index = node.log.base_index
        if self.applied_index < base_index:  # reset past what it applied: rebuilt to the base
            self._rebuild(committed, base_index)
        for index in range(self.applied_index + 1, commit_index + 1):
            payload = committed[index][1]
            if not is_pop(payload):
                continue
            ahead = self.ahead.pop(index, None)
            if ahead is not None and ahead != payload:
                raise InvariantViolation(f"pops: {node_id} applied entry {index} ahead of the "
                                         "commit, the group committed another one there")
            try:
                self.registry.apply(_record(payload))
            except ConsumptionError as error:
                raise InvariantViolation(f"pops: {node_id} cannot apply committed entry "
                                         f"{index}: {error}") from error
        self.applied_index = max(self.applied_index, commit_index)

    def cut(self, index: int, committed: dict[int, tuple[int, bytes]]) -> None:
        """The member's log lost its entries from `index` on (a next leader's log)."""
        if self.rebuild_on_cut and any(held >= index for held in self.ahead):
            self.cut_rebuilds += 1
            self._rebuild(committed, self.applied_index)

    def _rebuild(self, committed: dict[int, tuple[int, bytes]], through_index: int) -> None:
        self.registry = ConsumptionRegistry()
        self.ahead.clear()
        for index in range(1, through_index + 1):
            payload = committed[index][1]
            if is_pop(payload):
                self.registry.apply(_record(payload))
        self.applied_index = through_index

    def crashed(self) -> None:
        self.registry = ConsumptionRegistry()
        self.applied_index = 0
        self.ahead.clear()
        self.term = None

    def lead(self, node: DLedgerNode, now: int, rng: random.Random, held: list[tuple[int, int]],
             append: Append, drop_share: float) -> None:
        """The leader's round, once caught up in its term: expiry, a receive, some acks.
        `held`: the deliveries its consumers hold (offset, delivery id), shared by terms."""
        if node.role is not Role.LEADER:
            self.term = None
            return
        if self.term != node.term:
            self.term, self.takeover_end = node.term, node.log.last_index
        if not self.decide_at_once and (node.commit_index < self.takeover_end
                                        or self.applied_index < self.takeover_end):
            return
        if rng.random() < 0.5:
            return  # the consumers' pace: about every other tick
        state = self.registry.state(KEY) or self.registry.create(KEY, 0)
        expired = tuple(state.plan_expiry(now_ms=now, policy=POLICY))
        if expired and not self._decided(expired, now, append):
            return
        if rng.random() < 0.6:
            received = state.plan_receive(
                now_ms=now, max_messages=rng.randint(1, 3), invisible_ms=rng.randint(3, 20),
                candidates=_candidates(state), tag_filter=EVERYTHING, policy=POLICY,
                delivery_id_floor=node.term << 32)
            if (received.scanned or received.deliveries) \
                    and self._decided((received,), now, append):
                held += [(d.queue_offset, d.delivery_id) for d in received.deliveries]
        for _ in range(min(len(held), 2)):
            offset, delivery_id = held.pop(rng.randrange(len(held)))
            if rng.random() < drop_share:
                continue  # the consumer crashed holding it: it expires
            decision = state.plan_ack(queue_offset=offset, delivery_id=delivery_id)
            if decision.status is AckStatus.OK and decision.event is not None \
                    and not self._decided((decision.event,), now, append):
                return

    def _decided(self, events: tuple[Event, ...], now: int, append: Append) -> bool:
        payload = _payload(events, now)
        index = append(payload)
        if index is None:
            return False
        self.registry.apply(_record(payload))
        self.ahead[index] = payload
        return True


"""Group consumption's expiry round, on the master (app/broker/consumption.py): deliveries whose
invisible time passed are retried, or dead-lettered after their last attempt, decided by the
queue states (store/consumption/) and written as pop records, like every decision.

The round holds the decision lock briefly: at most EXPIRY_EVENTS_PER_ROUND_MAX events, in
records of RECORD_EVENTS_MAX events; the broker's tick runs a bounded number of rounds, the
lock let go between two (receives go on)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from app.broker.consumption import RECORD_EVENTS_MAX, GroupConsumption, message_of
from app.broker.consumption_copies import CopyRefused
from store import Message
from store.consumption.policy import RetryPolicy
from store.consumption.records import PopRecord

log = logging.getLogger(__name__)

EXPIRY_EVENTS_PER_ROUND_MAX = 1024
# Expiry rounds of one tick at most (each ends up to EXPIRY_EVENTS_PER_ROUND_MAX deliveries).
EXPIRY_ROUNDS_MAX = 64


class ExpiryRound(NamedTuple):
    ended: int  # deliveries retried or dead-lettered
    due_in_ms: int | None  # until the next known deadline or ready time (None: none known)


def expire_rounds(consumption: GroupConsumption, is_master: Callable[[], bool]
                  ) -> ExpiryRound:
    """One tick: rounds until one ends fewer than it may (at most EXPIRY_ROUNDS_MAX; the
    decision lock is free between two: receives go on). The deliveries ended in all, and
    when the next tick has work (at once when the rounds ran out)."""
    ended = 0
    for _ in range(EXPIRY_ROUNDS_MAX):
        one = expire(consumption, is_master)
        ended += one.ended
        if one.ended < EXPIRY_EVENTS_PER_ROUND_MAX:
            return ExpiryRound(ended, one.due_in_ms)
    return ExpiryRound(ended, 0)


def expire(consumption: GroupConsumption, is_master: Callable[[], bool]) -> ExpiryRound:
    """One expiry round: deliveries whose invisible time passed (at most
    EXPIRY_EVENTS_PER_ROUND_MAX) are retried now, or dead-lettered after their last
    attempt. On the master only. The round's copies go in one append, then its records in
    another. It answers how many ended, and when the next round has work: the earliest
    deadline or ready time it saw ahead, or at once after a round that ended some."""
    if not is_master():
        return ExpiryRound(0, None)
    with consumption.lock:
        with consumption.state_lock:
            generation = consumption.states_generation
            planned, due_in_ms = _plan_expiry(consumption)
        if not planned:
            return ExpiryRound(0, due_in_ms)
        try:
            consumption.copies.put([copy for _, copies in planned for copy in copies])
            messages = [message_of(record) for record, _ in planned]
            results = consumption._put_records(messages)
        except CopyRefused as error:
            log.warning("expiry not written (tried again next tick): %s", error.detail)
            return ExpiryRound(0, None)
        ended = 0
        for (record, _), message, (result, _) in zip(planned, messages, results,
                                                     strict=True):
            if result.status.is_stored:
                consumption._apply_ahead(record, generation, message.body, result)
                ended += len(record.events)
                consumption._wake_receivers(record)
        return ExpiryRound(ended, due_in_ms)


def _plan_expiry(consumption: GroupConsumption
                 ) -> tuple[list[tuple[PopRecord, list[Message]]], int | None]:
    """An expiry round's records (at most EXPIRY_EVENTS_PER_ROUND_MAX events), with the
    copies each needs, and the ms until the next round has work (0: at once; None: nothing
    known). Both locks are held."""
    now_ms = consumption.clock_ms()
    planned: list[tuple[PopRecord, list[Message]]] = []
    room = EXPIRY_EVENTS_PER_ROUND_MAX
    registry = consumption.registry
    next_ms: int | None = None
    for group, topic in registry.group_topics():
        if consumption.is_closing(group):
            continue  # its delete is being written: its states go with it
        policy: RetryPolicy | None = None
        for key in registry.keys_of(group, topic):
            state = registry.state(key)
            if state is None:
                continue
            if state.came_due(now_ms):  # a backoff in place ended
                consumption._poke(key)
            ready = state.next_ready_ms()
            due = state.next_expiry_ms() if state.in_flight_count else None
            ahead = now_ms if due is not None and due <= now_ms else due  # more may be due
            next_ms = min((item_ms for item_ms in (next_ms, ready, ahead) if item_ms is not None),
                          default=None)
            if due is None or due > now_ms:
                continue
            policy = policy or consumption.policy(group)
            events = state.plan_expiry(now_ms=now_ms, policy=policy)[:room]
            room -= len(events)
            for event in events:
                entry = state.entry(event.queue_offset)
                if entry is not None:
                    consumption.expiry_lateness.observe(now_ms - entry.until_ms)
            for start in range(0, len(events), RECORD_EVENTS_MAX):
                chunk = tuple(events[start:start + RECORD_EVENTS_MAX])
                planned.append((PopRecord(key, chunk, now_ms),
                                consumption.copies.for_ended(group, key, chunk, now_ms)))
            if room <= 0:
                break
        if room <= 0:
            break
    return planned, None if next_ms is None else max(0, next_ms - now_ms)

"""What the clients of a group-consumption e2e test were answered, and the at-least-once
rules checked on it (tests/e2e/test_dledger_group_consume.py).

Deliveries are told apart by what was stored, not by body: a message is its origin (queue
id, queue offset: a retry copy names its original's), and each stored copy delivered (the
original or a retry copy) by its commit-log offset, which every member of the group shares.
Two things that are no double delivery then stay apart:
- a body stored twice: a producer's resend after an answer it never got (the leader stored
  it, then died) or a 202 (it may still commit) is another message;
- two retry copies of one delivery: a leader puts the copy before the record that ends the
  delivery, so a kill between the two leaves the delivery in flight for the next leader,
  which ends it again and puts a second copy (documented: a duplicate for a receive whose
  ack was never answered).
What is checked: a delivery answered 200 (its record committed) keeps the message from
coming back before its invisible time (with the same stored copy and attempt, or a later
attempt); an ack answered 200 keeps that copy and later attempts from being delivered
again; every produced body was acked, or its ack's answer was lost (the broker's own counts
then say whether anything is left).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

# A redelivery may be answered this much before the invisible time the first answer named
# (clocks of one host; the expiry tick runs on its own).
INVISIBLE_SLACK_MS = 50

Origin = tuple[int, int]  # (queue id, queue offset) of the original message


@dataclass(frozen=True)
class Delivery:
    answered_ms: float  # when the client had the answer (this host's clock, as the brokers')
    status: int  # the receive's answer: 200 (committed) or 202 (may be lost)
    attempt: int
    invisible_until_ms: int
    copy: int  # commit-log offset of the stored message delivered


@dataclass
class Journal:
    lock: threading.Lock = field(default_factory=threading.Lock)
    produced: set[str] = field(default_factory=set)  # bodies answered 201
    deliveries: dict[Origin, list[Delivery]] = field(default_factory=lambda: defaultdict(list))
    bodies: dict[Origin, str] = field(default_factory=dict)
    # Acks answered 200, by origin: when, and of which delivery.
    acks: dict[Origin, list[tuple[float, Delivery]]] = field(
        default_factory=lambda: defaultdict(list))
    acked_bodies: set[str] = field(default_factory=set)
    unanswered_acks: set[str] = field(default_factory=set)  # no 200/207 came back

    def delivered(self, message: dict[str, Any], status: int, answered_ms: float) -> Delivery:
        """Note one message of a receive's answer (the caller holds the lock)."""
        origin = (message["queue_id"], message["queue_offset"])
        delivery = Delivery(answered_ms, status, message["delivery_attempt"],
                            message["invisible_until_ms"], message["commit_log_offset"])
        self.deliveries[origin].append(delivery)
        self.bodies[origin] = message["body"]
        return delivery

    def acked(self, message: dict[str, Any], delivery: Delivery, acked_ms: float) -> None:
        origin = (message["queue_id"], message["queue_offset"])
        self.acks[origin].append((acked_ms, delivery))
        self.acked_bodies.add(message["body"])

    def unacked_bodies(self) -> set[str]:
        """Produced bodies neither acked nor with an ack whose answer was lost."""
        return self.produced - self.acked_bodies - self.unanswered_acks


def check(journal: Journal) -> None:
    """The rules of the module docstring; AssertionError naming the first broken one."""
    missing = sorted(journal.unacked_bodies())
    assert not missing, f"{len(missing)} produced messages never acked: {missing[:10]}"
    for origin, deliveries in journal.deliveries.items():
        body = journal.bodies[origin]
        for acked_ms, of in journal.acks.get(origin, []):
            again = [item for item in deliveries if item.answered_ms > acked_ms
                     and (item.copy == of.copy or item.attempt > of.attempt)]
            assert not again, \
                f"{body} {origin} delivered again after its ack was answered 200: {deliveries}"
        for first in deliveries:
            if first.status != 200:
                continue  # its record may be lost: the message may come back at any time
            early = [item for item in deliveries if item is not first
                     and item.answered_ms < first.invisible_until_ms - INVISIBLE_SLACK_MS
                     and (item.attempt > first.attempt
                          or (item.copy == first.copy and item.attempt == first.attempt
                              and item.answered_ms >= first.answered_ms))]
            assert not early, \
                f"{body} {origin} came back before its invisible time: {deliveries}"

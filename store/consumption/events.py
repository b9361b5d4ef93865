"""The events of group consumption: what a decision produced, and what the log will carry.

Each event carries its whole outcome (offsets, delivery ids, attempts, times), never a "now",
so applying it is a pure function of the queue state and the event, and every replica that
applies the same events in the same order holds the same in-flight state. (Named tuples: a
decision makes one or two per message, and every replica decodes them from the log.)
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class Candidate(NamedTuple):
    """A message of the queue as the reader found it, offered to a receive."""

    queue_offset: int
    tag: str | None = None
    order_key: str | None = None  # the message group key: FIFO within it
    attempts_before: int = 0  # deliveries it already had (a message of the retry topic)


class Disposition(enum.Enum):
    KEPT = "kept"  # enters the window: delivered now or later
    FILTERED = "filtered"  # its tag does not match: consumed for this group
    DEAD = "dead"  # it already had every attempt the policy allows: straight to the DLQ


class Scanned(NamedTuple):
    queue_offset: int
    disposition: Disposition
    order_key: str | None
    attempts_before: int


class Delivery(NamedTuple):
    queue_offset: int
    attempt: int  # 1-based
    delivery_id: int
    invisible_until_ms: int


class Received(NamedTuple):
    """Candidates taken into the window (from the scan offset on) and deliveries handed out."""

    scanned: tuple[Scanned, ...]
    deliveries: tuple[Delivery, ...]


class Acked(NamedTuple):
    queue_offset: int
    delivery_id: int


class Changed(NamedTuple):
    """A new invisible time: the old delivery id is stale, the new one holds the message."""

    old_delivery_id: int
    delivery: Delivery


class Retried(NamedTuple):
    """A delivery that ended without an ack: the message is receivable again at `due_ms`.

    In place (a message with an order key, or any message of a FIFO queue), it waits in its own
    queue and blocks its key; otherwise it leaves the queue, and the caller puts it, delayed to
    `due_ms`, into the group's retry topic with `attempt` as the deliveries it already had.
    """

    queue_offset: int
    delivery_id: int
    attempt: int
    due_ms: int
    in_place: bool


class DeadLettered(NamedTuple):
    """A delivery whose failure used the last attempt: the caller puts it into %DLQ%{group}."""

    queue_offset: int
    delivery_id: int
    attempt: int


Event = Received | Acked | Changed | Retried | DeadLettered

"""Group consumption's events as records of the metadata topic: what each carries, and its bytes.

One record holds the events of one decision on one (group, topic, queue), in order: a receive's
`Received`, the `Acked` of every handle of an ack that names this queue, a `Changed`, or what an
expiry tick decided (`Retried`, `DeadLettered`). The operation travels as the record's
`TWINLOG_OP` property (`pop.received`, `pop.acked`, `pop.changed`, `pop.retried`, `pop.dead`:
the first event's kind), so the metadata layer tells these records from its own without
decoding them (`is_pop_op`).

The body is JSON with a version. Events carry their whole outcome (docs/group-consumption.md),
so applying a record is a pure function of the queue state and the record, on every replica.
A receive's record of a FIFO queue (its group's `fifo`) says so (`"f": true`, left out
otherwise: the bytes of builds before it): the queue's state takes the mode of the last
receive applied, on every replica alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from store.consumption.events import (
    Acked,
    Changed,
    DeadLettered,
    Delivery,
    Disposition,
    Event,
    Received,
    Retried,
    Scanned,
)

RECORD_VERSION = 1
POP_OP_PREFIX = "pop."
OP_RECEIVED = "pop.received"
OP_ACKED = "pop.acked"
OP_CHANGED = "pop.changed"
OP_RETRIED = "pop.retried"
OP_DEAD = "pop.dead"
_DISPOSITIONS = {disposition.value: disposition for disposition in Disposition}


class PopRecordError(ValueError):
    """A pop record this build cannot read: an unknown version or kind, a bad body."""


class QueueKey(NamedTuple):
    """One queue a group consumes by receive: the topic's own queue or, with `RETRY_QUEUE_BIT`
    set in `queue_id`, a queue of the group's retry topic for that topic. (A named tuple:
    every decision and every acked handle looks its queue up by it.)"""

    group: str
    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class PopRecord:
    key: QueueKey
    events: tuple[Event, ...]
    at_ms: int  # when the master decided (the group offset it moves carries it)
    # A receive's record: whether its queue was FIFO when the master decided it.
    fifo: bool = False

    @property
    def op(self) -> str:
        return op_of(self.events[0])


def is_pop_op(op: str) -> bool:
    return op.startswith(POP_OP_PREFIX)


def op_of(event: Event) -> str:
    if isinstance(event, Received):
        return OP_RECEIVED
    if isinstance(event, Acked):
        return OP_ACKED
    if isinstance(event, Changed):
        return OP_CHANGED
    if isinstance(event, Retried):
        return OP_RETRIED
    return OP_DEAD


def _delivery(delivery: Delivery) -> list[int]:
    return [delivery.queue_offset, delivery.attempt, delivery.delivery_id,
            delivery.invisible_until_ms]


def _event_fields(event: Event) -> list[Any]:
    if isinstance(event, Received):
        return ["r", [[item.queue_offset, item.disposition.value, item.order_key,
                       item.attempts_before] for item in event.scanned],
                [_delivery(delivery) for delivery in event.deliveries]]
    if isinstance(event, Acked):
        return ["a", event.queue_offset, event.delivery_id]
    if isinstance(event, Changed):
        return ["c", event.old_delivery_id, _delivery(event.delivery)]
    if isinstance(event, Retried):
        return ["t", event.queue_offset, event.delivery_id, event.attempt, event.due_ms,
                event.in_place]
    return ["d", event.queue_offset, event.delivery_id, event.attempt]


def encode(record: PopRecord) -> bytes:
    if not record.events:
        raise ValueError("a pop record holds at least one event")
    fields = {"v": RECORD_VERSION, "g": record.key.group, "t": record.key.topic,
              "q": record.key.queue_id, "at": record.at_ms,
              "e": [_event_fields(event) for event in record.events]}
    if record.fifo:
        fields["f"] = True
    return orjson.dumps(fields)


def decode(body: bytes) -> PopRecord:
    try:
        fields: Any = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise PopRecordError(f"a pop record body does not decode: {error}") from error
    if not isinstance(fields, dict) or fields.get("v") != RECORD_VERSION:
        raise PopRecordError(f"a pop record of another version: {str(fields)[:80]}")
    try:
        key = QueueKey(_text(fields["g"]), _text(fields["t"]), _whole(fields["q"]))
        events = tuple(_event(item) for item in fields["e"])
        at_ms = _whole(fields["at"])
        fifo = fields.get("f", False)
        if not isinstance(fifo, bool):
            raise TypeError(f"{fifo!r} is not a boolean")
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise PopRecordError(f"a pop record with bad fields: {error!r}") from error
    if not events:
        raise PopRecordError("a pop record without events")
    return PopRecord(key, events, at_ms, fifo)


def _event(item: list[Any]) -> Event:
    kind = item[0]
    if kind == "r":
        scanned = tuple(Scanned(_whole(offset), _DISPOSITIONS[disposition],
                                None if key is None else _text(key), _whole(before))
                        for offset, disposition, key, before in item[1])
        return Received(scanned, tuple(_delivery_of(fields) for fields in item[2]))
    if kind == "a":
        return Acked(_whole(item[1]), _whole(item[2]))
    if kind == "c":
        return Changed(_whole(item[1]), _delivery_of(item[2]))
    if kind == "t":
        if not isinstance(item[5], bool):
            raise TypeError("in_place is a boolean")
        return Retried(_whole(item[1]), _whole(item[2]), _whole(item[3]), _whole(item[4]),
                       item[5])
    if kind == "d":
        return DeadLettered(_whole(item[1]), _whole(item[2]), _whole(item[3]))
    raise ValueError(f"unknown pop event kind {kind!r}")


def _delivery_of(fields: list[Any]) -> Delivery:
    offset, attempt, delivery_id, until_ms = fields
    return Delivery(_whole(offset), _whole(attempt), _whole(delivery_id), _whole(until_ms))


def _whole(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(f"{value!r} is not a whole number")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value

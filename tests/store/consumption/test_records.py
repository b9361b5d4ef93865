"""Pop records: every event survives its bytes, garbage is refused, and a registry fed the same
records twice (a replay) holds the same states and counts as one fed once."""

from __future__ import annotations

import pytest

from store.consumption.events import (
    Acked,
    Candidate,
    Changed,
    DeadLettered,
    Delivery,
    Disposition,
    Received,
    Retried,
    Scanned,
)
from store.consumption.policy import RetryPolicy
from store.consumption.queue_state import EntryState, QueueState
from store.consumption.records import (
    OP_ACKED,
    OP_RECEIVED,
    PopRecord,
    PopRecordError,
    QueueKey,
    decode,
    encode,
)
from store.consumption.registry import RETRY_QUEUE_BIT, ConsumptionRegistry
from store.consumption.tags import TagFilter

KEY = QueueKey("g", "t", 3 | RETRY_QUEUE_BIT)


def test_every_event_kind_round_trips() -> None:
    events = (
        Received((Scanned(7, Disposition.KEPT, "k", 0), Scanned(8, Disposition.FILTERED, None, 2),
                  Scanned(9, Disposition.DEAD, None, 17)), (Delivery(7, 1, 4, 1_000),)),
        Acked(7, 4), Changed(4, Delivery(7, 1, 5, 2_000)), Retried(7, 5, 1, 3_000, False),
        DeadLettered(7, 6, 17))
    for event in events:
        record = PopRecord(KEY, (event,), 123)
        assert decode(encode(record)) == record
    both = PopRecord(KEY, events[1:], 5)
    assert decode(encode(both)) == both
    assert PopRecord(KEY, events[:1], 0).op == OP_RECEIVED
    assert PopRecord(KEY, events[1:2], 0).op == OP_ACKED


def test_a_fifo_receive_says_so_and_others_keep_the_bytes_of_older_builds() -> None:
    received = Received((Scanned(7, Disposition.KEPT, None, 0),), (Delivery(7, 1, 4, 1_000),))
    plain = PopRecord(KEY, (received,), 5)
    assert encode(plain) == (b'{"v":1,"g":"g","t":"t","q":2147483651,"at":5,'
                             b'"e":[["r",[[7,"kept",null,0]],[[7,1,4,1000]]]]}')
    fifo = PopRecord(KEY, (received,), 5, fifo=True)
    assert encode(fifo) == encode(plain)[:-1] + b',"f":true}'
    assert decode(encode(fifo)) == fifo
    with pytest.raises(PopRecordError):
        decode(encode(plain)[:-1] + b',"f":1}')


def test_a_replica_s_state_takes_the_mode_of_the_receives_it_applies() -> None:
    """Created by a FIFO receive's record, a state is FIFO; a later receive decided not FIFO
    (the group's flag turned off) makes it not FIFO; a replay of the first changes nothing."""
    master = QueueState(0)
    policy = RetryPolicy()
    first = master.plan_receive(now_ms=0, max_messages=1, invisible_ms=100,
                                candidates=[Candidate(0)], tag_filter=TagFilter(None),
                                policy=policy)
    master.apply(first)
    second = master.plan_receive(now_ms=0, max_messages=1, invisible_ms=100,
                                 candidates=[Candidate(1)], tag_filter=TagFilter(None),
                                 policy=policy)
    registry = ConsumptionRegistry()
    registry.apply(PopRecord(KEY, (first,), 0, fifo=True))
    state = registry.state(KEY)
    assert state is not None and state.fifo
    registry.apply(PopRecord(KEY, (second,), 0))
    assert not state.fifo
    registry.apply(PopRecord(KEY, (first,), 0, fifo=True))  # a replay: applied already
    assert not state.fifo
    assert registry.images()[0][0].fifo is False


@pytest.mark.parametrize("body", [b"", b"[]", b'{"v": 2}', b'{"v": 1, "g": "g"}',
                                  b'{"v":1,"g":"g","t":"t","q":-1,"at":0,"e":[["a",1,1]]}',
                                  b'{"v":1,"g":"g","t":"t","q":0,"at":0,"e":[["z",1]]}',
                                  b'{"v":1,"g":"g","t":"t","q":0,"at":0,"e":[]}',
                                  b'{"v":1,"g":"g","t":"t","q":0,"at":0,"e":[["a",true,1]]}'])
def test_garbage_is_refused(body: bytes) -> None:
    with pytest.raises(PopRecordError):
        decode(body)


def _records() -> list[PopRecord]:
    """A master's decisions on one queue: receive 3, ack one, change one, expire one."""
    master = QueueState(10)
    policy = RetryPolicy(retry_times_max=1)
    records = []

    def decide(event: object) -> None:
        assert master.apply(event)  # type: ignore[arg-type]
        records.append(PopRecord(KEY, (event,), 0))  # type: ignore[arg-type]

    decide(master.plan_receive(now_ms=0, max_messages=3, invisible_ms=100,
                               candidates=[Candidate(offset) for offset in (10, 11, 12)],
                               tag_filter=TagFilter(None), policy=policy))
    decide(master.plan_ack(queue_offset=10, delivery_id=1).event)
    decide(master.plan_change(queue_offset=11, delivery_id=2, invisible_ms=500, now_ms=50,
                              policy=policy).event)
    for event in master.plan_expiry(now_ms=200, policy=policy):
        decide(event)
    return records


def test_a_replayed_registry_holds_the_same_state_and_counts_once() -> None:
    records = _records()
    once, twice = ConsumptionRegistry(), ConsumptionRegistry()
    for record in records:
        once.apply(record)
    for record in records + records:
        twice.apply(record)
    for registry in (once, twice):
        state = registry.state(KEY)
        assert state is not None
        assert state.committed_offset == 11
        assert {offset: entry.state for offset, entry in state.in_flight().items()} == \
            {11: EntryState.IN_FLIGHT}
        assert state.in_flight_count == 1
        counts = registry.counts("g", "t")
        assert (counts.acked, counts.retried) == (1, 1)
        assert registry.committed_move(KEY) == 11
        assert registry.committed_move(KEY) is None


def test_a_replica_ignores_records_of_a_queue_it_never_saw_start() -> None:
    registry = ConsumptionRegistry()
    registry.apply(PopRecord(KEY, (Acked(3, 1),), 0))  # its receive is gone (retention)
    assert registry.state(KEY) is None
    assert len(registry) == 0

"""The decisions of one queue's in-flight state, case by case (the state machine does the rest)."""

from __future__ import annotations

import pytest

from store.consumption.events import (
    Acked,
    Candidate,
    Changed,
    DeadLettered,
    Disposition,
    Received,
    Retried,
)
from store.consumption.policy import RetryPolicy
from store.consumption.queue_state import AckStatus, ConsumptionError, EntryState, QueueState
from store.consumption.tags import TagFilter

EVERY = TagFilter.parse("*")
POLICY = RetryPolicy(retry_times_max=2)


def _candidates(state: QueueState, count: int, **fields: object) -> list[Candidate]:
    return [Candidate(state.scan_offset + n, **fields) for n in range(count)]  # type: ignore[arg-type]


def _receive(state: QueueState, candidates: list[Candidate], *, now_ms: int = 0,
             max_messages: int = 32, invisible_ms: int = 1_000,
             tag_filter: TagFilter = EVERY, policy: RetryPolicy = POLICY) -> Received:
    event = state.plan_receive(now_ms=now_ms, max_messages=max_messages,
                               invisible_ms=invisible_ms, candidates=candidates,
                               tag_filter=tag_filter, policy=policy)
    assert state.apply(event)
    return event


def test_a_receive_hands_out_new_offsets_once_with_fresh_delivery_ids() -> None:
    state = QueueState(committed_offset=10)
    first = _receive(state, _candidates(state, 5), max_messages=3, now_ms=100)
    assert [(d.queue_offset, d.attempt, d.delivery_id, d.invisible_until_ms)
            for d in first.deliveries] == [(10, 1, 1, 1_100), (11, 1, 2, 1_100), (12, 1, 3, 1_100)]
    assert state.scan_offset == 13  # only what was needed entered the window
    second = _receive(state, _candidates(state, 5), max_messages=32)
    assert [d.queue_offset for d in second.deliveries] == [13, 14, 15, 16, 17]
    assert state.committed_offset == 10


def test_the_committed_offset_stops_at_the_lowest_unacked_offset() -> None:
    state = QueueState()
    event = _receive(state, _candidates(state, 3))
    for delivery in event.deliveries[1:]:
        decision = state.plan_ack(queue_offset=delivery.queue_offset,
                                  delivery_id=delivery.delivery_id)
        assert decision.status is AckStatus.OK and decision.event is not None
        state.apply(decision.event)
    assert state.committed_offset == 0
    head = event.deliveries[0]
    ack = state.plan_ack(queue_offset=0, delivery_id=head.delivery_id).event
    assert ack is not None and state.apply(ack)
    assert state.committed_offset == 3 and state.counts()[EntryState.DONE] == 0


def test_a_second_ack_and_an_ack_of_an_older_delivery_are_stale() -> None:
    state = QueueState()
    (first,) = _receive(state, _candidates(state, 1)).deliveries
    (retry,) = state.plan_expiry(now_ms=first.invisible_until_ms, policy=POLICY)
    assert isinstance(retry, Retried) and retry.in_place  # the window has room
    state.apply(retry)
    assert state.plan_ack(queue_offset=0, delivery_id=first.delivery_id).status is AckStatus.STALE


def test_an_expiry_retries_in_place_while_half_the_window_is_free_then_out() -> None:
    state = QueueState(window_max=4)
    first, second = _receive(state, _candidates(state, 2), now_ms=0).deliveries
    (retry,) = state.plan_expiry(now_ms=1_000, policy=POLICY)[:1]
    assert retry == Retried(0, first.delivery_id, 1, 1_000, True)  # 2 of 4 offsets free
    state.apply(retry)
    # Receivable again at once from its own offset, with its next attempt.
    (again,) = _receive(state, [], now_ms=1_000, max_messages=1).deliveries
    assert (again.queue_offset, again.attempt) == (0, 2)
    assert [event.queue_offset for event in state.plan_expiry(now_ms=1_000, policy=POLICY)] \
        == [1]  # the other delivery; offset 0 is in flight again until 2,000
    _receive(state, _candidates(state, 1), now_ms=1_000)  # 3 of 4 offsets taken: 1 free
    ended = state.plan_expiry(now_ms=2_000, policy=POLICY)
    assert [(event.queue_offset, event.in_place) for event in ended] == \
        [(0, False), (1, False), (2, False)]  # out to the retry topic: the window moves on
    for event in ended:
        state.apply(event)
    assert state.committed_offset == 3 and state.in_flight_count == 0


def test_an_expiry_heap_of_acked_deliveries_stays_bounded() -> None:
    state = QueueState(window_max=8)
    for _ in range(500):  # each delivery acked before its deadline: a stale heap item
        (delivery,) = _receive(state, _candidates(state, 1)).deliveries
        ack = state.plan_ack(queue_offset=delivery.queue_offset,
                             delivery_id=delivery.delivery_id).event
        assert ack is not None and state.apply(ack)
        assert len(state._deadlines) <= 2 * state.in_flight_count + 65
    assert state.next_expiry_ms() is None and state.plan_expiry(now_ms=10**9, policy=POLICY) == []


def test_a_change_makes_the_old_handle_stale_and_the_new_one_acks() -> None:
    state = QueueState()
    (delivery,) = _receive(state, _candidates(state, 1), now_ms=0).deliveries
    change = state.plan_change(queue_offset=0, delivery_id=delivery.delivery_id,
                               invisible_ms=5_000, now_ms=500, policy=POLICY)
    assert change.status is AckStatus.OK and isinstance(change.event, Changed)
    state.apply(change.event)
    assert state.plan_expiry(now_ms=1_000, policy=POLICY) == []  # extended to 5,500
    assert state.plan_ack(queue_offset=0, delivery_id=delivery.delivery_id).status \
        is AckStatus.STALE  # RocketMQ #9583: the old handle must not ack
    new_id = change.event.delivery.delivery_id
    assert state.plan_ack(queue_offset=0, delivery_id=new_id).status is AckStatus.OK


def test_a_release_retries_after_the_backoff_and_the_last_attempt_dead_letters() -> None:
    state = QueueState()
    (delivery,) = _receive(state, _candidates(state, 1, order_key="k")).deliveries
    release = state.plan_change(queue_offset=0, delivery_id=delivery.delivery_id,
                                invisible_ms=0, now_ms=100, policy=POLICY).event
    assert release == Retried(0, delivery.delivery_id, 1, 100 + POLICY.backoff_ms(1), True)
    state.apply(release)
    assert _receive(state, [], now_ms=100 + POLICY.backoff_ms(1) - 1).deliveries == ()
    for attempt in (2, 3):
        (again,) = _receive(state, [], now_ms=10**9 * attempt).deliveries
        assert again.attempt == attempt
        (ended,) = state.plan_expiry(now_ms=again.invisible_until_ms, policy=POLICY)
        state.apply(ended)
    assert ended == DeadLettered(0, again.delivery_id, 3)
    assert state.committed_offset == 1


def test_an_order_key_holds_its_next_message_until_the_previous_is_done() -> None:
    state = QueueState()
    keys = ["a", None, "a", "b", None]
    event = _receive(state, [Candidate(n, order_key=key) for n, key in enumerate(keys)])
    assert [d.queue_offset for d in event.deliveries] == [0, 1, 3, 4]
    assert _receive(state, []).deliveries == ()
    ack = state.plan_ack(queue_offset=0, delivery_id=event.deliveries[0].delivery_id).event
    assert ack is not None and state.apply(ack)
    assert [d.queue_offset for d in _receive(state, []).deliveries] == [2]


def test_a_fifo_queue_has_one_message_in_flight() -> None:
    state = QueueState(fifo=True)
    event = _receive(state, _candidates(state, 3))
    assert [d.queue_offset for d in event.deliveries] == [0]
    assert state.scan_offset == 3 and state.counts()[EntryState.WAITING] == 2
    (retry,) = state.plan_expiry(now_ms=10_000, policy=POLICY)
    assert isinstance(retry, Retried) and retry.in_place  # it keeps its place at the head
    state.apply(retry)
    (again,) = _receive(state, [], now_ms=10_000).deliveries
    assert (again.queue_offset, again.attempt) == (0, 2)


def test_filtered_messages_count_as_consumed() -> None:
    state = QueueState()
    tags = ["TagA", "TagC", None, "TagB"]
    event = _receive(state, [Candidate(n, tag=tag) for n, tag in enumerate(tags)],
                     tag_filter=TagFilter.parse("TagA || TagB"))
    assert [d.queue_offset for d in event.deliveries] == [0, 3]
    assert [s.disposition for s in event.scanned] == [
        Disposition.KEPT, Disposition.FILTERED, Disposition.FILTERED, Disposition.KEPT]
    for delivery in event.deliveries:
        ack = state.plan_ack(queue_offset=delivery.queue_offset,
                             delivery_id=delivery.delivery_id).event
        assert ack is not None and state.apply(ack)
    assert state.committed_offset == 4


def test_a_message_past_its_attempts_goes_straight_to_the_dead_letters() -> None:
    state = QueueState()
    event = _receive(state, [Candidate(0, attempts_before=3), Candidate(1, attempts_before=2)])
    assert [s.disposition for s in event.scanned] == [Disposition.DEAD, Disposition.KEPT]
    assert [(d.queue_offset, d.attempt) for d in event.deliveries] == [(1, 3)]


def test_the_window_bounds_what_a_receive_takes() -> None:
    state = QueueState(window_max=4)
    assert len(_receive(state, _candidates(state, 10)).deliveries) == 4
    assert state.room == 0 and _receive(state, _candidates(state, 10)).scanned == ()


def test_a_replayed_event_changes_nothing() -> None:
    state = QueueState()
    received = _receive(state, _candidates(state, 2))
    ack = Acked(0, received.deliveries[0].delivery_id)
    assert state.apply(ack)
    snapshot = (state.committed_offset, state.scan_offset, state.next_delivery_id,
                state.counts())
    assert not state.apply(received) and not state.apply(ack)
    assert snapshot == (state.committed_offset, state.scan_offset, state.next_delivery_id,
                        state.counts())


def test_candidates_must_start_at_the_scan_offset() -> None:
    state = QueueState(committed_offset=5)
    with pytest.raises(ConsumptionError, match="start at offset 5"):
        _receive(state, [Candidate(6)])
    with pytest.raises(ConsumptionError, match="positive"):
        _receive(state, [], max_messages=0)


def test_a_mode_change_counts_the_keys_in_flight_again() -> None:
    state = QueueState()
    first, second = _receive(state, _candidates(state, 3), max_messages=2).deliveries
    state.fifo = True  # two keyless in flight: the queue's one key is held until both land
    assert _receive(state, _candidates(state, 1)).deliveries == ()  # offset 2 waits
    ack = state.plan_ack(queue_offset=0, delivery_id=first.delivery_id).event
    assert ack is not None and state.apply(ack)
    assert _receive(state, []).deliveries == ()  # offset 1 still holds it
    state.fifo = False
    (third,) = _receive(state, []).deliveries
    assert third.queue_offset == 2
    state.fifo = True
    for delivery in (second, third):
        ack = state.plan_ack(queue_offset=delivery.queue_offset,
                             delivery_id=delivery.delivery_id).event
        assert ack is not None and state.apply(ack)
    assert state.committed_offset == 3 and state.in_flight_count == 0


def test_a_backoff_in_place_comes_due_once_and_its_times_stay_bounded() -> None:
    state = QueueState(window_max=8)
    (delivery,) = _receive(state, _candidates(state, 1, order_key="k")).deliveries
    release = state.plan_change(queue_offset=0, delivery_id=delivery.delivery_id,
                                invisible_ms=0, now_ms=0, policy=POLICY).event
    assert isinstance(release, Retried) and release.in_place
    state.apply(release)
    ready_ms = release.due_ms
    assert not state.came_due(ready_ms - 1)
    assert state.came_due(ready_ms) and not state.came_due(ready_ms)  # told once
    for attempt in range(300):  # a replica's retries, never asked: the times stay bounded
        (again,) = _receive(state, [], now_ms=10**9 * (attempt + 1), max_messages=1,
                            policy=RetryPolicy(retry_times_max=1_000)).deliveries
        retry = state.plan_change(queue_offset=0, delivery_id=again.delivery_id,
                                  invisible_ms=0, now_ms=10**9 * (attempt + 1),
                                  policy=RetryPolicy(retry_times_max=1_000)).event
        assert isinstance(retry, Retried) and state.apply(retry)
        assert len(state._ready_times) <= 2 * 1 + 65

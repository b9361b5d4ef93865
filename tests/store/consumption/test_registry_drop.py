"""A deleted group's states leave the registry (ConsumptionRegistry.drop_group): its queue
states, in-flight deliveries and counts go, other groups' stay as they were, a record of the
group applied after starts a fresh state, and the master's new states hand out delivery ids
above every id the dropped states handed out (so a deleted group's handle names no delivery
of a group created again under its name)."""

from __future__ import annotations

from store.consumption.events import Acked, Delivery, Disposition, Received, Scanned
from store.consumption.records import PopRecord, QueueKey
from store.consumption.registry import RETRY_QUEUE_BIT, ConsumptionRegistry


def _received(key: QueueKey, offsets: range, first_id: int, at_ms: int = 1) -> PopRecord:
    scanned = tuple(Scanned(offset, Disposition.KEPT, None, 0) for offset in offsets)
    deliveries = tuple(Delivery(offset, 1, first_id + number, 5_000)
                       for number, offset in enumerate(offsets))
    return PopRecord(key, (Received(scanned, deliveries),), at_ms)


def _filled() -> ConsumptionRegistry:
    """Group g: two topic queues and a retry queue with deliveries in flight, one acked;
    group h (and g-other, a name g prefixes) the same on one queue."""
    registry = ConsumptionRegistry()
    for key, offsets, first_id in ((QueueKey("g", "t", 0), range(0, 3), 7),
                                   (QueueKey("g", "t", 1), range(0, 2), 20),
                                   (QueueKey("g", "u", RETRY_QUEUE_BIT), range(4, 5), 40),
                                   (QueueKey("h", "t", 0), range(0, 2), 1),
                                   (QueueKey("g-other", "t", 0), range(0, 2), 1)):
        registry.apply(_received(key, offsets, first_id))
    registry.apply(PopRecord(QueueKey("g", "t", 0), (Acked(0, 7),), 2))
    registry.apply(PopRecord(QueueKey("h", "t", 0), (Acked(0, 1),), 2))
    return registry


def test_a_dropped_group_leaves_nothing_and_the_others_untouched() -> None:
    registry = _filled()
    queues, counts = registry.images()
    kept = ([image for image in queues if image.group != "g"],
            [image for image in counts if image.group != "g"])
    assert registry.in_flight("g") == 5
    assert registry.drop_group("g") == 3
    assert registry.images() == kept
    assert len(registry) == 2
    assert registry.topics_of("g") == [] and registry.in_flight("g") == 0
    assert registry.counts("g", "t").acked == 0
    assert registry.state(QueueKey("g", "t", 0)) is None
    assert registry.drop_group("g") == 0  # a second delete of the name: nothing more


def test_a_record_after_the_drop_starts_a_fresh_state() -> None:
    registry = _filled()
    registry.drop_group("g")
    key = QueueKey("g", "t", 0)
    registry.apply(PopRecord(key, (Acked(1, 8),), 3))  # an old delivery's ack: no state
    assert registry.state(key) is None
    registry.apply(_received(key, range(0, 1), 100, at_ms=4))  # the new group's receive
    state = registry.state(key)
    assert state is not None
    assert (state.committed_offset, state.scan_offset, state.in_flight_count) == (0, 1, 1)
    assert registry.counts("g", "t").acked == 0


def test_the_masters_new_states_hand_out_ids_above_the_dropped_ones() -> None:
    registry = _filled()
    assert registry.dropped_delivery_id_next == 1  # nothing dropped yet
    registry.drop_group("g")
    assert registry.dropped_delivery_id_next == 41  # past g's highest id, 40
    registry.drop_group("h")
    assert registry.dropped_delivery_id_next == 41  # h's ids were lower
    state = registry.create(QueueKey("g", "t", 0), 0,
                            next_delivery_id=registry.dropped_delivery_id_next)
    assert state.next_delivery_id == 41
    registry.reset()  # the states rebuilt from the log: the floor stays
    assert registry.dropped_delivery_id_next == 41

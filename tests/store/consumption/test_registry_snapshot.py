"""The registry's states in metadata snapshots (store/consumption/snapshot.py): written as a
snapshot's parts and read back whole, loaded only by a registry that lacks what the records
before the snapshot held, and taken from a master's export by a slave's bootstrap."""

from __future__ import annotations

import pytest

from store.consumption.events import Acked, Delivery, Disposition, Received, Scanned
from store.consumption.queue_state import EntryState
from store.consumption.records import PopRecord, QueueKey
from store.consumption.registry import ConsumptionRegistry, follow_record
from store.metadata.log_records import (
    MetadataRecordError,
    MetadataSnapshot,
    TopicPut,
    decode,
    encode,
    snapshot_parts,
)
from store.system_topics import OP_SNAPSHOT

KEY = QueueKey("g", "t", 0)


def _in_flight() -> ConsumptionRegistry:
    """m0 and m2 in flight, m1 acked, m3 (order key K, behind nothing) waiting."""
    registry = ConsumptionRegistry()
    scanned = tuple(Scanned(offset, Disposition.KEPT, "K" if offset == 3 else None, 0)
                    for offset in range(4))
    deliveries = tuple(Delivery(offset, 1, offset + 1, 5_000) for offset in range(3))
    registry.apply(PopRecord(KEY, (Received(scanned, deliveries),), 1))
    registry.apply(PopRecord(KEY, (Acked(1, 2),), 2))
    return registry


def _parts(registry: ConsumptionRegistry) -> list[MetadataSnapshot]:
    """The registry's images through a snapshot's bytes, in parts of about 64 bytes."""
    pop_queues, pop_counts = registry.images()
    parts = snapshot_parts([TopicPut("t", 1, 1, 6, 1, 1)], [], [], [], part_bytes_max=64,
                           pop_queues=pop_queues, pop_counts=pop_counts)
    decoded = [decode(OP_SNAPSHOT, encode(part)) for part in parts]
    assert all(isinstance(part, MetadataSnapshot) for part in decoded)
    return decoded  # type: ignore[return-value]


def _load(registry: ConsumptionRegistry, parts: list[MetadataSnapshot], queue_offset: int,
          ) -> list[bool]:
    return [registry.snapshot_part(queue_offset + index, part.part, part.parts,
                                   part.pop_queues, part.pop_counts)
            for index, part in enumerate(parts)]


def test_a_registry_past_a_gap_loads_the_states_a_snapshot_carries() -> None:
    master = _in_flight()
    parts = _parts(master)
    assert len(parts) > 2  # the states span parts: part 0 replaces, later ones add
    replica = ConsumptionRegistry()
    replica.noted(7)  # a record past a gap: the records below it were never applied here
    assert replica.lacking
    assert _load(replica, parts, 8) == [True] * len(parts)
    assert not replica.lacking
    assert replica.images() == master.images()
    state = replica.state(KEY)
    assert state is not None
    assert (state.committed_offset, state.scan_offset, state.next_delivery_id) == (0, 4, 4)
    assert sorted(state.in_flight()) == [0, 2]
    assert state.entry(1) is not None and state.entry(1).state is EntryState.DONE  # type: ignore[union-attr]
    assert state.entry(3).state is EntryState.WAITING  # type: ignore[union-attr]
    assert replica.counts("g", "t").acked == 1
    # An ack of the in-flight m0 applies on the loaded state; m1's, acked already, is nothing.
    replica.apply(PopRecord(KEY, (Acked(1, 2), Acked(0, 1)), 3))
    assert sorted(replica.state(KEY).in_flight()) == [2]  # type: ignore[union-attr]
    assert replica.counts("g", "t").acked == 2


def test_a_registry_that_applied_the_record_before_a_snapshot_passes_it() -> None:
    registry = _in_flight()
    before = registry.images()
    registry.noted(0)
    registry.noted(1)
    empty = _parts(ConsumptionRegistry())
    assert _load(registry, empty, 2) == [False] * len(empty)
    assert registry.images() == before


def test_the_replay_at_start_reads_a_snapshot_record_without_the_tables() -> None:
    master = _in_flight()
    replica = ConsumptionRegistry()
    follow_record(replica, 5, "offset.set", b"{}")  # the first record retention left
    for index, part in enumerate(_parts(master)):
        follow_record(replica, 6 + index, OP_SNAPSHOT, encode(part))
    assert replica.images() == master.images() and not replica.lacking


def test_a_bootstrap_loads_the_master_s_states_unless_the_registry_is_past_them() -> None:
    master = _in_flight()
    pop_queues, pop_counts = master.images()
    slave = ConsumptionRegistry()
    assert slave.bootstrap(pop_queues, pop_counts, 10)
    assert slave.images() == master.images() and not slave.lacking
    # Its next record of the queue writes the committed offset again (the tables' group
    # offset), though the states may have held that record already.
    slave.apply(PopRecord(KEY, (Acked(0, 1),), 4))
    assert slave.committed_move(KEY) == 2
    whole = ConsumptionRegistry()
    whole.noted(0)
    whole.noted(11)  # a gap: lacking, so a bootstrap loads
    assert whole.bootstrap(pop_queues, pop_counts, 10) and whole.lacking  # noted past it
    caught_up = ConsumptionRegistry()
    for offset in range(12):
        caught_up.noted(offset)
    assert not caught_up.bootstrap(pop_queues, pop_counts, 10)


def test_a_snapshot_with_a_bad_pop_image_is_refused() -> None:
    part = next(part for part in _parts(_in_flight()) if part.pop_queues)
    body = encode(part).replace(b'"in_flight"', b'"lost"')
    with pytest.raises(MetadataRecordError):
        decode(OP_SNAPSHOT, body)


def test_a_snapshot_without_group_consumption_has_the_bytes_of_older_builds() -> None:
    """Empty states are left out of a part's body (a build before them reads it), and a body
    without them decodes with none."""
    for part in snapshot_parts([TopicPut("t", 1, 1, 6, 1, 1)], [], [], []):
        body = encode(part)
        assert b"pop_" not in body
        assert decode(OP_SNAPSHOT, body) == part

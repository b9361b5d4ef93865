"""Group consumption's registry in metadata snapshots and in the bootstrap pull, on a broker
(store/consumption/snapshot.py, docs/group-consumption.md, Snapshots): the images a snapshot or
an export takes, the registry following every metadata record dispatch hands (and loading a
snapshot's states when it lacks them), and a slave's bootstrap from its master's export."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from app.broker.consumption import GroupConsumption
from store.consumption.snapshot import (
    PopCountsImage,
    PopImageError,
    PopQueueImage,
    decode_counts_image,
    decode_queue_image,
)
from store.dispatch import SystemRecord
from store.metadata.log_records import MetadataChange, MetadataSnapshot

log = logging.getLogger(__name__)

PopImages = tuple[list[PopQueueImage], list[PopCountsImage]]


def images(consumption: GroupConsumption) -> PopImages:
    """Every queue state and count, as the registry holds them now."""
    with consumption.state_lock:
        return consumption.registry.images()


def follow(consumption: GroupConsumption, record: SystemRecord,
           change: MetadataChange | None) -> None:
    """One metadata record dispatch hands (`change`: what the tables decoded of it, None for
    a pop record or one they passed): the registry notes its place, or takes a snapshot
    part (loaded when it lacks what the records before the snapshot held)."""
    with consumption.state_lock:
        registry = consumption.registry
        if isinstance(change, MetadataSnapshot):
            registry.snapshot_part(record.queue_offset, change.part, change.parts,
                                   change.pop_queues, change.pop_counts)
        else:
            registry.noted(record.queue_offset)


def follow_run(consumption: GroupConsumption, records: Sequence[SystemRecord]) -> None:
    """`follow` for a run of records none of which is a snapshot part, in one lock hold."""
    with consumption.state_lock:
        registry = consumption.registry
        for record in records:
            registry.noted(record.queue_offset)


def bootstrap(consumption: GroupConsumption, export: dict[str, Any]) -> bool:
    """Slave sync's bootstrap: the master's states, exported with its consumer offsets at
    their log position; True when loaded (ConsumptionRegistry.bootstrap)."""
    try:
        queues = [decode_queue_image(item) for item in export.get("pop_queues") or []]
        counts = [decode_counts_image(item) for item in export.get("pop_counts") or []]
        queue_offset = int(export["log_position"]["queue_offset"])
    except (PopImageError, KeyError, TypeError, ValueError) as error:
        log.warning("slave sync: the master's group consumption states are not readable "
                    "(%s); the next snapshot in the log brings them", error)
        return False
    with consumption.state_lock:
        return consumption.registry.bootstrap(queues, counts, queue_offset)

"""What the simulation's clients write to a master: messages to the topics that exist, and the
metadata records an admin and the consumers put in the log as the gateway plans them
(store/metadata/plans.py, MetadataStore.plan_offset): topics created, changed, deleted and
created again; groups created and deleted; consumer offsets committed and reset.

A plan reads the master's tables, as the real one does. A consumer reads a queue on the master
and commits, in the same step, a position it read (never past the queue's next offset there);
a commit that would not move forward is refused (OffsetMovesBackwards) or writes nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ha.classic.simulation.disk import (
    DELIVERED_QUEUE_ID,
    METADATA_TOPIC,
    TIMER_OP,
    TIMER_TOPIC,
    TOPICS,
    SimDisk,
    topic_code,
)
from ha.sim_timers import lane_of
from store.metadata.log_records import (
    GroupDelete,
    GroupPut,
    MetadataChange,
    OffsetSet,
    TopicDelete,
    TopicPut,
    TopicsPut,
    encode,
    op_of,
)
from store.metadata.offsets import OffsetKey

GROUPS = ("g1", "g2")
QUEUE_COUNT = 4
PERMISSIONS = (6, 7)  # read-write, and with inherit: the change a topic update makes


@dataclass(frozen=True, slots=True)
class Write:
    topic: int
    queue_id: int
    payload_size: int
    op: str = ""
    body: bytes = b""


def next_write(rng: random.Random, disk: SimDisk, now_ms: int, metadata_share: float) -> Write:
    """A message to a topic the master has (creating one first when it has none), or, with
    probability `metadata_share`, a metadata record."""
    topics = disk.metadata.topics
    if not topics:
        return _record(_topic_put(rng.choice(TOPICS), disk, now_ms))
    if rng.random() < metadata_share:
        change = _change(rng, disk, now_ms)
        if change is not None:
            return _record(change)
    topic = rng.choice(sorted(topics))
    return Write(topic_code(topic), rng.randrange(QUEUE_COUNT), rng.choice([20, 60, 200, 900]))


def timer_write(payload: bytes) -> Write:
    """A delayed message's record (ha/sim_timers.py): a lane entry in its lane's queue of the
    timer topic (a delay level k in queue k, timer lane k in queue 16 + k), a delivery in
    DELIVERED_QUEUE_ID."""
    lane = lane_of(payload)
    if lane is None:
        queue_id = DELIVERED_QUEUE_ID
    else:
        kind, _, index = lane.partition(":")
        queue_id = int(index) + (16 if kind == "T" else 0)
    return Write(TIMER_TOPIC, queue_id, 0, TIMER_OP, payload)


def _record(change: MetadataChange) -> Write:
    return Write(METADATA_TOPIC, 0, 0, op_of(change), encode(change))


def _change(rng: random.Random, disk: SimDisk, now_ms: int) -> MetadataChange | None:
    metadata = disk.metadata
    choice = rng.random()
    if choice < 0.4:
        return _commit(rng, disk, now_ms)
    if choice < 0.55:
        return _topic_put(rng.choice(TOPICS), disk, now_ms)
    if choice < 0.65:
        absent = [name for name in TOPICS if name not in metadata.topics]
        if absent:
            return TopicsPut(tuple(_topic_put(name, disk, now_ms) for name in absent))
        return None
    if choice < 0.8:
        name = rng.choice(sorted(metadata.topics))
        return TopicDelete(name, now_ms)
    group = rng.choice(GROUPS)
    if choice < 0.92 or group not in metadata.groups:
        current = metadata.groups.get(group)
        return GroupPut(group, consume_enabled=True,
                        broadcast_enabled=not current.broadcast_enabled if current else False,
                        retry_queue_count=1, retry_times_max=16,
                        created_at_ms=current.created_at_ms if current else now_ms,
                        updated_at_ms=now_ms)
    return GroupDelete(group, now_ms)


def _topic_put(name: str, disk: SimDisk, now_ms: int) -> TopicPut:
    """A create, or an update that flips the topic's permission."""
    current = disk.metadata.topics.get(name)
    if current is None:
        return TopicPut(name, QUEUE_COUNT, QUEUE_COUNT, PERMISSIONS[0], now_ms, now_ms)
    permission = PERMISSIONS[1 - PERMISSIONS.index(current.permission)]
    return TopicPut(name, QUEUE_COUNT, QUEUE_COUNT, permission, current.created_at_ms, now_ms)


def _commit(rng: random.Random, disk: SimDisk, now_ms: int) -> OffsetSet | None:
    """A consumer of an existing group reads a queue of an existing topic on the master and
    commits a position it read; sometimes an admin resets it within the queue."""
    metadata = disk.metadata
    if not metadata.groups or not metadata.topics:
        return None
    group = rng.choice(sorted(metadata.groups))
    topic = rng.choice(sorted(metadata.topics))
    queue_id = rng.randrange(QUEUE_COUNT)
    queue = disk.queues.get((topic_code(topic), queue_id))
    first, next_offset = (0, 0) if queue is None else (queue.first, queue.next_offset)
    current = metadata.offsets.get(OffsetKey(group, topic, queue_id))
    reset = rng.random() < 0.1
    if reset:
        offset = rng.randint(first, next_offset)
    else:
        low = first if current is None else current.queue_offset
        if low > next_offset:
            return None  # refused: a commit never moves an offset back
        offset = rng.randint(low, next_offset)
    if current is not None and current.queue_offset == offset:
        return None  # the group's offset already: nothing is written
    return OffsetSet(group, topic, queue_id, offset, reset, now_ms)

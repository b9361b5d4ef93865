"""Metadata records in the simulation: a node's tables as dispatch builds them from its log.

In DLedger mode a topic, group or offset change is a record of the replicated log
(store/metadata/log_records.py), planned by the leader against the tables it has applied and
applied by every member in log order once committed. Here some client appends carry such a
record: the client plans it against the target's applied tables (as a leader's route does),
and every node applies its committed entries to an in-memory model of the tables with the
same rules as store/metadata/apply.py and the offset table (a put writes the whole row, a
delete removes the row and its offsets, an offset moves forward unless reset).

The invariant (Invariants.metadata_applied): the tables applied from a committed prefix of the
log are one state whichever node applied it (checked at each metadata record: the entries
between change nothing, and they are the same on every node by state machine
safety); so the tables a leader had when it committed an
index are the ones every member has at that index, after crashes (the tables and their
position survive, as the SQL tables and `log_position` do) and resets (a member reset to its
leader's base takes the tables at that base, as the bootstrap pull does).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import orjson

from store.metadata.log_records import (
    GroupDelete,
    GroupPut,
    MetadataChange,
    MetadataSnapshot,
    OffsetSet,
    TopicDelete,
    TopicPut,
    TopicsPut,
    decode,
    encode,
)

RECORD_PREFIX = b"\x00metadata:"  # what tells a metadata payload from a plain one here
_TOPICS = ("A", "B", "C")
_GROUPS = ("g1", "g2")
_QUEUES = 2

# The tables, hashable: (topics, groups, offsets), each a sorted tuple of items.
Fingerprint = tuple[tuple[object, ...], tuple[object, ...], tuple[object, ...]]


@dataclass
class MetadataTables:
    """One node's applied tables and how far into its log they go (kept across a crash)."""

    applied_index: int = 0
    topics: dict[str, TopicPut] = field(default_factory=dict)
    groups: dict[str, GroupPut] = field(default_factory=dict)
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)
    _fingerprint: Fingerprint | None = None

    def apply(self, payload: bytes, decoded: dict[bytes, MetadataChange]) -> Fingerprint:
        """Apply a committed metadata record; the tables' fingerprint afterwards. `decoded`:
        the changes of the payloads decoded already (every node applies each)."""
        change = decoded.get(payload)
        if change is None:
            change = decoded[payload] = decode_payload(payload)
        self._apply(change)
        self._fingerprint = None
        return self.fingerprint()

    def _apply(self, change: MetadataChange) -> None:
        if isinstance(change, TopicPut):
            self.topics[change.name] = change
        elif isinstance(change, TopicsPut):
            for topic in change.topics:
                self.topics[topic.name] = topic
        elif isinstance(change, TopicDelete):
            self.topics.pop(change.name, None)
            self._drop_offsets(lambda key: key[1] == change.name)
        elif isinstance(change, GroupPut):
            self.groups[change.name] = change
        elif isinstance(change, GroupDelete):
            self.groups.pop(change.name, None)
            self._drop_offsets(lambda key: key[0] == change.name)
        elif isinstance(change, MetadataSnapshot):  # part 0 replaces the tables (classic's)
            if change.part == 0:
                self.topics, self.groups, self.offsets = {}, {}, {}
            self.topics.update((topic.name, topic) for topic in change.topics)
            self.groups.update((group.name, group) for group in change.groups)
            self.offsets.update(((o.group_name, o.topic, o.queue_id), o.queue_offset)
                                for o in change.offsets)
        else:
            key = (change.group_name, change.topic, change.queue_id)
            current = self.offsets.get(key)
            if current is None or change.reset or change.queue_offset > current:
                self.offsets[key] = change.queue_offset

    def _drop_offsets(self, which: object) -> None:
        assert callable(which)
        for key in [key for key in self.offsets if which(key)]:
            del self.offsets[key]

    def fingerprint(self) -> Fingerprint:
        if self._fingerprint is None:
            self._fingerprint = (tuple(sorted(self.topics.items())),
                                 tuple(sorted(self.groups.items())),
                                 tuple(sorted(self.offsets.items())))
        return self._fingerprint

    def restore(self, index: int, fingerprint: Fingerprint) -> None:
        """Take the tables at `index` (a reset to a leader's base: the bootstrap)."""
        topics, groups, offsets = fingerprint
        self.topics = dict(topics)  # type: ignore[arg-type]
        self.groups = dict(groups)  # type: ignore[arg-type]
        self.offsets = dict(offsets)  # type: ignore[arg-type]
        self.applied_index = index
        self._fingerprint = fingerprint


def encode_payload(change: MetadataChange) -> bytes:
    return RECORD_PREFIX + encode(change)


def decode_payload(payload: bytes) -> MetadataChange:
    body = payload[len(RECORD_PREFIX):]
    return decode(str(orjson.loads(body)["op"]), body)


def plan_change(rng: random.Random, tables: MetadataTables, request_id: int) -> MetadataChange:
    """A change as a leader's route plans it against its applied tables: a create or an
    update writes the whole row, a commit moves an offset forward, a reset anywhere. The
    request id stands in for the time, so every record is unique."""
    choice = rng.random()
    topic, group = rng.choice(_TOPICS), rng.choice(_GROUPS)
    if choice < 0.25:
        known = tables.topics.get(topic)
        queue_count = rng.randint(1, 4)
        return TopicPut(topic, queue_count, queue_count, 6,
                        known.created_at_ms if known else request_id, request_id)
    if choice < 0.35:
        return TopicDelete(topic, request_id)
    if choice < 0.5:
        known_group = tables.groups.get(group)
        return GroupPut(group, True, False, 1, 16,
                        known_group.created_at_ms if known_group else request_id, request_id)
    if choice < 0.55:
        return GroupDelete(group, request_id)
    queue_id = rng.randrange(_QUEUES)
    current = tables.offsets.get((group, topic, queue_id), 0)
    reset = rng.random() < 0.1
    queue_offset = rng.randint(0, current + 5) if reset else current + rng.randint(1, 5)
    return OffsetSet(group, topic, queue_id, queue_offset, reset, request_id)

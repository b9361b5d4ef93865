"""A broker's metadata tables in the classic-replication simulation: topics, groups and
consumer offsets, changed only by the metadata records of its log (store/system_topics.py).

The records are the real ones: `store.metadata.log_records` encodes and decodes them, and the
consumer offsets are the real in-memory `ConsumerOffsetTable` (its `apply` and `forget`). The
topic and group tables are dicts that take a record as store/metadata/apply.py does (a put
writes the whole row, a delete removes the row and its offsets), and `apply_record` is
`MetadataStore.apply_record`: a record below the applied position is in the tables already and
is skipped.

What survives a crash is what the real broker keeps: the topic and group rows are durable when
applied (each apply commits its SQLite transaction), and so, right after, are the offsets and
the applied position (a row's record persists them); otherwise offsets and the position are
durable at the last `persist` (the periodic `flush_consumer_offsets`). A restart loads those,
then catches up from the persisted position with the records its recovered log holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
)
from store.metadata.models import ConsumerOffset
from store.metadata.offset_table import ConsumerOffsetTable
from store.metadata.offsets import OffsetKey

# (group, topic, queue id) -> committed queue offset
Offsets = tuple[tuple[tuple[str, str, int], int], ...]


@dataclass(frozen=True)
class MetadataState:
    """The tables at one point, comparable: what a broker applied, or what a log says."""

    topics: tuple[TopicPut, ...]
    groups: tuple[GroupPut, ...]
    offsets: Offsets
    applied_queue_offset: int  # the next metadata record's queue offset

    def tables(self) -> tuple[tuple[TopicPut, ...], tuple[GroupPut, ...], Offsets]:
        return self.topics, self.groups, self.offsets


EMPTY_STATE = MetadataState((), (), (), 0)
_DECODED_MAX = 4096
_decoded: dict[tuple[str, bytes], MetadataChange] = {}


def decoded(op: str, body: bytes) -> MetadataChange:
    """The real decoder's answer, remembered: every broker decodes the same records, some
    again and again (a fold of what a log says)."""
    key = (op, body)
    change = _decoded.get(key)
    if change is None:
        if len(_decoded) >= _DECODED_MAX:
            _decoded.clear()
        change = _decoded[key] = decode(op, body)
    return change


@dataclass
class SimMetadata:
    topics: dict[str, TopicPut] = field(default_factory=dict)
    groups: dict[str, GroupPut] = field(default_factory=dict)
    offsets: ConsumerOffsetTable = field(default_factory=ConsumerOffsetTable)
    applied_queue_offset: int = 0
    applied_offset: int = -1  # the commit-log offset of the last record applied
    # The durable part of the offsets and the position (topics and groups are durable at once).
    persisted_offsets: tuple[ConsumerOffset, ...] = ()
    persisted_queue_offset: int = 0
    persisted_offset: int = -1
    changed: bool = False  # since the invariants last looked

    @classmethod
    def of(cls, state: MetadataState) -> SimMetadata:
        """Tables holding `state`, all of it durable (a bootstrap, a base below retention)."""
        metadata = cls(applied_queue_offset=state.applied_queue_offset)
        metadata.load(state)
        return metadata

    def load(self, state: MetadataState) -> None:
        """Take `state` whole (slave sync's bootstrap from a master's tables)."""
        self.topics = {topic.name: topic for topic in state.topics}
        self.groups = {group.name: group for group in state.groups}
        offsets = [ConsumerOffset(group_name=g, topic=t, queue_id=q, queue_offset=o,
                                  updated_at_ms=0) for (g, t, q), o in state.offsets]
        self.offsets = ConsumerOffsetTable(offsets)
        self.applied_queue_offset, self.applied_offset = state.applied_queue_offset, -1
        self.persist()

    def apply_record(self, queue_offset: int, op: str, body: bytes,
                     offset: int = -1) -> MetadataChange | None:
        """MetadataStore.apply_record: decode, skip what the tables hold, apply, move on
        (`offset`: the record's in the commit log)."""
        change = decoded(op, body)
        if queue_offset < self.applied_queue_offset:
            return None
        self.apply_change(change)
        self.applied_queue_offset = queue_offset + 1
        self.applied_offset = offset
        if not isinstance(change, OffsetSet):
            self.persist()  # a topic or group row is durable with its position
        return change

    def reset(self) -> None:
        """MetadataStore.reset_applied_state: the tables the records fill emptied, durably,
        and the position back to the log's start."""
        self.topics, self.groups = {}, {}
        self.offsets = ConsumerOffsetTable(())
        self.applied_queue_offset, self.applied_offset = 0, -1
        self.persist()

    def apply_change(self, change: MetadataChange) -> None:
        """MetadataStore.apply_change over dicts and the real offset table."""
        self.changed = True
        if isinstance(change, OffsetSet):
            self.offsets.apply(OffsetKey(change.group_name, change.topic, change.queue_id),
                               change.queue_offset, reset=change.reset, now_ms=change.at_ms)
        elif isinstance(change, TopicPut):
            self.topics[change.name] = change
        elif isinstance(change, TopicsPut):
            for topic in change.topics:
                self.topics[topic.name] = topic
        elif isinstance(change, TopicDelete):
            self.topics.pop(change.name, None)
            self.offsets.forget(topic=change.name)
        elif isinstance(change, GroupPut):
            self.groups[change.name] = change
        elif isinstance(change, GroupDelete):
            self.groups.pop(change.name, None)
            self.offsets.forget(group_name=change.name)
        elif isinstance(change, MetadataSnapshot):
            if change.part == 0:  # the tables become the snapshot's
                self.topics, self.groups = {}, {}
                self.offsets = ConsumerOffsetTable(())
            self.topics.update((topic.name, topic) for topic in change.topics)
            self.groups.update((group.name, group) for group in change.groups)
            for offset in change.offsets:
                self.offsets.apply(OffsetKey(offset.group_name, offset.topic, offset.queue_id),
                                   offset.queue_offset, reset=True, now_ms=offset.at_ms)
        else:
            raise AssertionError(f"unknown change {change!r}")

    def persist(self) -> None:
        """flush_consumer_offsets: the offsets and the applied position become durable."""
        self.persisted_offsets = tuple(self.offsets.select())
        self.persisted_queue_offset = self.applied_queue_offset
        self.persisted_offset = self.applied_offset

    def restart(self) -> None:
        """After a crash: the rows as applied, the offsets and position as last persisted."""
        self.offsets = ConsumerOffsetTable(self.persisted_offsets)
        self.applied_queue_offset = self.persisted_queue_offset
        self.applied_offset = self.persisted_offset
        self.changed = True

    def committed(self) -> Offsets:
        return tuple(((o.group_name, o.topic, o.queue_id), o.queue_offset)
                     for o in self.offsets.select())

    def state(self) -> MetadataState:
        return MetadataState(tuple(sorted(self.topics.values(), key=lambda t: t.name)),
                             tuple(sorted(self.groups.values(), key=lambda g: g.name)),
                             self.committed(), self.applied_queue_offset)

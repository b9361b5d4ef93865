"""Group consumption's state in a metadata snapshot (store/metadata/log_records.py) and in
the bootstrap pull: every queue state of the registry and every (group, topic)'s counts, as
the log's pop records left them where the snapshot stands.

Pop records are removed by retention like every record; a replica that starts past them (a
restart or a rebuild past retention, a slave bootstrapped at its master's min offset) loads
these images instead, so a message in flight stays in flight, an acked one stays acked, and
an order key stays held. A queue image lists only the entries of its window that are not
done (waiting or in flight): every other offset between its committed and scan offsets is
done. Its size is bounded by the registry's bounds (`pop_queue_states_max` states, a window
of `pop_window_max` offsets each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from store.consumption.queue_state import Entry, EntryState, QueueState
from store.consumption.records import QueueKey, _text, _whole
from store.system_topics import snapshot_fields, snapshot_part

_STATES = {state.value: state for state in EntryState if state is not EntryState.DONE}


class PopImageError(ValueError):
    """An image this build cannot read."""


@dataclass(frozen=True, slots=True)
class PopQueueImage:
    """One queue state. `entries`: [offset, state, order key, attempt, delivery id, until ms]
    of each entry not done, in offset order."""

    group: str
    topic: str
    queue_id: int
    committed_offset: int
    scan_offset: int
    next_delivery_id: int
    fifo: bool
    entries: tuple[tuple[int, str, str | None, int, int, int], ...]

    @property
    def key(self) -> QueueKey:
        return QueueKey(self.group, self.topic, self.queue_id)

    def state(self, window_max: int) -> QueueState:
        """The queue state it describes (ConsumptionError when it does not fit a window)."""
        entries = [(offset, Entry(_STATES[state], order_key, attempt, delivery_id, until_ms))
                   for offset, state, order_key, attempt, delivery_id, until_ms in self.entries]
        return QueueState.restored(self.committed_offset, self.scan_offset,
                                   self.next_delivery_id, entries, fifo=self.fifo,
                                   window_max=window_max)


@dataclass(frozen=True, slots=True)
class PopCountsImage:
    """What one group's consumption of one topic did (the registry's TopicCounts)."""

    group: str
    topic: str
    acked: int
    retried: int
    dead_lettered: int
    filtered: int


@dataclass(frozen=True, slots=True)
class SnapshotPops:
    part: int
    parts: int
    queues: list[PopQueueImage]
    counts: list[PopCountsImage]


def decode_counts_image(fields: Any) -> PopCountsImage:
    """Counts from their JSON object; PopImageError if they are not."""
    try:
        if not isinstance(fields, dict) or set(fields) != set(PopCountsImage.__slots__):
            raise TypeError(f"fields {fields!r}")
        return PopCountsImage(_text(fields["group"]), _text(fields["topic"]),
                              *(_whole(fields[name]) for name in
                                ("acked", "retried", "dead_lettered", "filtered")))
    except TypeError as error:
        raise PopImageError(f"pop counts with bad fields: {error}") from error


def snapshot_pops(op: str, body: bytes) -> SnapshotPops | None:
    """A snapshot record's part, parts and pop images (what store/metadata/log_records.py
    decodes whole, read here without the tables); None for any other record. PopImageError
    when its images are not ones this build reads."""
    part = snapshot_part(op, body)
    fields = snapshot_fields(op, body)
    if part is None or fields is None:
        return None
    queues, counts = fields.get("pop_queues", []), fields.get("pop_counts", [])
    if not isinstance(queues, list) or not isinstance(counts, list):
        raise PopImageError("a snapshot's pop images are not lists")
    return SnapshotPops(part[0], part[1], [decode_queue_image(item) for item in queues],
                        [decode_counts_image(item) for item in counts])


def queue_image(key: QueueKey, state: QueueState) -> PopQueueImage:
    return PopQueueImage(key.group, key.topic, key.queue_id, state.committed_offset,
                         state.scan_offset, state.next_delivery_id, state.fifo,
                         tuple((offset, entry.state.value, entry.order_key, entry.attempt,
                                entry.delivery_id, entry.until_ms)
                               for offset, entry in state.open_entries()))


def decode_queue_image(fields: Any) -> PopQueueImage:
    """An image from its JSON object (as orjson writes the dataclass); PopImageError if it
    is not one."""
    try:
        if not isinstance(fields, dict) or set(fields) != set(PopQueueImage.__slots__):
            raise TypeError(f"fields {sorted(fields) if isinstance(fields, dict) else fields}")
        entries = []
        for offset, state, order_key, attempt, delivery_id, until_ms in fields["entries"]:
            if state not in _STATES or not (order_key is None or isinstance(order_key, str)):
                raise ValueError(f"entry state {state!r}, order key {order_key!r}")
            entries.append((_whole(offset), state, order_key, _whole(attempt),
                            _whole(delivery_id), _whole(until_ms)))
        if not isinstance(fields["fifo"], bool):
            raise TypeError("fifo is not a boolean")
        return PopQueueImage(_text(fields["group"]), _text(fields["topic"]),
                             _whole(fields["queue_id"]), _whole(fields["committed_offset"]),
                             _whole(fields["scan_offset"]), _whole(fields["next_delivery_id"]),
                             fields["fifo"], tuple(entries))
    except (TypeError, ValueError, KeyError) as error:
        raise PopImageError(f"a pop queue image with bad fields: {error}") from error


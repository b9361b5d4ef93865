"""Consumer offsets in memory: the hot path of offset commits, persisted later in batches.

RocketMQ keeps its offset table in memory and writes it every 5 s; a broker crash loses at most
one interval of commits, which consumers tolerate by consuming a few messages again. The table
is pure (no database, no clock): the MetadataStore feeds it times and persists what it hands out.
An entry is two ints (the offset, its time): a ConsumerOffset is built only for who reads one,
since a commit (and every replica's apply of its record) changes an entry on the hot path.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable

from store.metadata.models import ConsumerOffset
from store.metadata.offsets import OffsetKey, check_moves_forward, offset_key

# An offset of the table: (queue offset, updated at ms).
Entry = tuple[int, int]


class CommitOutcome(enum.Enum):
    ADVANCED = "advanced"  # Stored; it goes to the database with the next batch.
    UNCHANGED = "unchanged"  # The same offset as before: nothing to persist.
    UNKNOWN_KEY = "unknown_key"  # The first commit for this queue: validate it, then allow_new.


class ConsumerOffsetTable:
    """Current offsets by key, and which of them the database does not have yet (dirty)."""

    def __init__(self, offsets: Iterable[ConsumerOffset] = ()) -> None:
        # Commits come from request threads while the persister thread takes batches.
        self._lock = threading.Lock()
        self._entries: dict[OffsetKey, Entry] = {
            offset_key(o): (o.queue_offset, o.updated_at_ms) for o in offsets}
        self._dirty: set[OffsetKey] = set()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def pending_count(self) -> int:
        """How many offsets changed since they were last persisted."""
        with self._lock:
            return len(self._dirty)

    def get(self, key: OffsetKey) -> ConsumerOffset | None:
        entry = self.entry(key)
        return None if entry is None else _offset(key, entry)

    def entry(self, key: OffsetKey) -> Entry | None:
        """`get` as (queue offset, updated at ms), for the commit's hot path."""
        with self._lock:
            return self._entries.get(key)

    def select(
        self, *, group_name: str | None = None, topic: str | None = None
    ) -> list[ConsumerOffset]:
        """Offsets of one group and/or topic (or all), ordered by key."""
        with self._lock:
            matching = [
                _offset(key, entry)
                for key, entry in self._entries.items()
                if (group_name is None or key.group_name == group_name)
                and (topic is None or key.topic == topic)
            ]
        return sorted(matching, key=offset_key)

    def entries(self) -> list[ConsumerOffset]:
        """Every offset, ordered by key."""
        with self._lock:
            entries = [_offset(key, entry) for key, entry in self._entries.items()]
        return sorted(entries, key=offset_key)

    def commit(
        self, key: OffsetKey, queue_offset: int, *, now_ms: int, allow_new: bool
    ) -> CommitOutcome:
        """Move an offset forward; raises OffsetMovesBackwards for a lower offset."""
        assert queue_offset >= 0, queue_offset
        with self._lock:
            current = self._entries.get(key)
            if current is None and not allow_new:
                return CommitOutcome.UNKNOWN_KEY
            current_offset = None if current is None else current[0]
            check_moves_forward(key, current_offset, queue_offset)
            if current_offset == queue_offset:
                return CommitOutcome.UNCHANGED
            self._entries[key] = (queue_offset, now_ms)
            self._dirty.add(key)
            return CommitOutcome.ADVANCED

    def apply(self, key: OffsetKey, queue_offset: int, *, reset: bool, now_ms: int) -> bool:
        """A metadata record's offset (store/metadata/log_records.py OffsetSet): set when it is
        a reset or moves forward, else nothing; True when the table changed."""
        with self._lock:
            current = self._entries.get(key)
            if current is not None and (current[0] == queue_offset
                                        or (not reset and current[0] > queue_offset)):
                return False
            self._entries[key] = (queue_offset, now_ms)
            self._dirty.add(key)
            return True

    def put_persisted(self, offsets: Iterable[ConsumerOffset]) -> None:
        """Take offsets the database already holds (a reset, a master's copy), in any direction."""
        with self._lock:
            for offset in offsets:
                key = offset_key(offset)
                self._entries[key] = (offset.queue_offset, offset.updated_at_ms)
                self._dirty.discard(key)

    def forget(self, *, group_name: str | None = None, topic: str | None = None) -> None:
        """Drop the offsets of a deleted group or topic (at least one of the two is given)."""
        assert group_name is not None or topic is not None
        with self._lock:
            for key in list(self._entries):
                if (group_name is None or key.group_name == group_name) and (
                    topic is None or key.topic == topic
                ):
                    del self._entries[key]
                    self._dirty.discard(key)

    def take_dirty(self) -> list[ConsumerOffset]:
        """Hand out the offsets to persist and mark them clean; restore_dirty if that fails."""
        with self._lock:
            batch = [_offset(key, self._entries[key]) for key in self._dirty]
            self._dirty.clear()
        return batch

    def restore_dirty(self, offsets: Iterable[ConsumerOffset]) -> None:
        """Mark a batch dirty again after persisting it failed (unless forgotten meanwhile)."""
        with self._lock:
            self._dirty.update(offset_key(o) for o in offsets if offset_key(o) in self._entries)


def _offset(key: OffsetKey, entry: Entry) -> ConsumerOffset:
    # Fields of a checked key and offset: built without validating them again. A new object
    # each time, so a caller changing what it got cannot change the table.
    return ConsumerOffset.model_construct(
        group_name=key.group_name,
        topic=key.topic,
        queue_id=key.queue_id,
        queue_offset=entry[0],
        updated_at_ms=entry[1],
    )

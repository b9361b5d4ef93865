"""Consumer offsets in memory: the hot path of offset commits, persisted later in batches.

RocketMQ keeps its offset table in memory and writes it every 5 s; a broker crash loses at most
one interval of commits, which consumers tolerate by consuming a few messages again. The table
is pure (no database, no clock): the MetadataStore feeds it times and persists what it hands out.
An entry is two ints (the offset, its time): a ConsumerOffset is built only for who reads one,
since a commit (and every replica's apply of its record) changes an entry on the hot path.

Entries ahead of the log's apply: the broker that appends a forward commit's record puts its
offset here at once (`apply_ahead`), so that its answer need not wait for dispatch to apply
the record. Readers see the greater of the two (a forward commit later in the log than every
applied record wins over them, unless one of them is greater: forward only). An ahead entry
is never persisted (the persister takes only applied entries: it never writes past the
applied position) and goes when dispatch applies its record (`passed`) or a cut of the log
removes it (`cut_ahead`).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable

from store.metadata.models import ConsumerOffset
from store.metadata.offsets import OffsetKey, check_moves_forward, offset_key

# An offset of the table: (queue offset, updated at ms).
Entry = tuple[int, int]
# One offset record of a run dispatch applies: its key, queue offset, reset, time (ms), its
# commit-log offset, and whether it applies (False: the tables hold it already, it passes).
OffsetStep = tuple[OffsetKey, int, bool, int, int, bool]


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
        # Forward commits whose records are appended but not applied yet: (queue offset,
        # updated at ms, the record's commit-log offset) by key.
        self._ahead: dict[OffsetKey, tuple[int, int, int]] = {}

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
            entry = self._entries.get(key)
            ahead = self._ahead.get(key) if self._ahead else None
        return entry if ahead is None else _greater(entry, ahead)

    def applied_entry(self, key: OffsetKey) -> Entry | None:
        """The entry as the applied records leave it (no commit ahead of them)."""
        with self._lock:
            return self._entries.get(key)

    def select(
        self, *, group_name: str | None = None, topic: str | None = None
    ) -> list[ConsumerOffset]:
        """Offsets of one group and/or topic (or all), ordered by key."""
        with self._lock:
            matching = [
                _offset(key, entry)
                for key, entry in self._seen().items()
                if (group_name is None or key.group_name == group_name)
                and (topic is None or key.topic == topic)
            ]
        return sorted(matching, key=offset_key)

    def _seen(self) -> dict[OffsetKey, Entry]:
        """What readers see: the applied entries, each with a greater commit ahead instead.
        The caller holds the lock."""
        if not self._ahead:
            return self._entries
        seen = dict(self._entries)
        for key, ahead in self._ahead.items():
            seen[key] = _greater(seen.get(key), ahead)
        return seen

    def entries(self) -> list[ConsumerOffset]:
        """Every offset as the applied records leave it (what a snapshot holds), by key."""
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
            return self._set(key, queue_offset, reset=reset, now_ms=now_ms)

    def apply_passed(self, key: OffsetKey, queue_offset: int, *, reset: bool, now_ms: int,
                     log_offset: int) -> bool:
        """`apply` then `passed` (the record at `log_offset` holds this offset), in one lock
        hold: dispatch's apply of an offset record."""
        with self._lock:
            self._drop_ahead(key, log_offset)
            return self._set(key, queue_offset, reset=reset, now_ms=now_ms)

    def apply_run(self, steps: Iterable[OffsetStep]) -> None:
        """Dispatch's run of offset records in one lock hold, in order: each `apply_passed`,
        or only `passed` for a record the tables hold already (its `applies` is False)."""
        with self._lock:
            for key, queue_offset, reset, now_ms, log_offset, applies in steps:
                self._drop_ahead(key, log_offset)
                if applies:
                    self._set(key, queue_offset, reset=reset, now_ms=now_ms)

    def _set(self, key: OffsetKey, queue_offset: int, *, reset: bool, now_ms: int) -> bool:
        """`apply`'s rule; the lock is held."""
        current = self._entries.get(key)
        if current is not None and (current[0] == queue_offset
                                    or (not reset and current[0] > queue_offset)):
            return False
        self._entries[key] = (queue_offset, now_ms)
        self._dirty.add(key)
        return True

    def _drop_ahead(self, key: OffsetKey, log_offset: int) -> None:
        """A commit shown ahead from `log_offset` or before goes; the lock is held."""
        if self._ahead:
            ahead = self._ahead.get(key)
            if ahead is not None and ahead[2] <= log_offset:
                del self._ahead[key]

    def apply_ahead(self, key: OffsetKey, queue_offset: int, *, now_ms: int,
                    log_offset: int) -> bool:
        """A forward commit whose record was just appended at `log_offset`, shown before its
        apply; nothing when what readers see is that offset or more already (its record
        applied, or a greater commit came first). True when taken."""
        with self._lock:
            current = self._entries.get(key)
            ahead = self._ahead.get(key)
            if (current is not None and current[0] >= queue_offset) or \
                    (ahead is not None and ahead[0] >= queue_offset):
                return False
            self._ahead[key] = (queue_offset, now_ms, log_offset)
            return True

    def passed(self, key: OffsetKey, log_offset: int) -> None:
        """The record at `log_offset` is applied: a commit ahead from it or before goes."""
        if self._ahead:
            with self._lock:
                self._drop_ahead(key, log_offset)

    def cut_ahead(self, log_offset: int) -> int:
        """The log was cut back to `log_offset`: the commits ahead whose records it removed
        go. Returns how many."""
        with self._lock:
            cut = [key for key, ahead in self._ahead.items() if ahead[2] >= log_offset]
            for key in cut:
                del self._ahead[key]
            return len(cut)

    @property
    def ahead_count(self) -> int:
        with self._lock:
            return len(self._ahead)

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
            for key in list(self._ahead):
                if (group_name is None or key.group_name == group_name) and (
                    topic is None or key.topic == topic
                ):
                    del self._ahead[key]

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


def _greater(entry: Entry | None, ahead: tuple[int, int, int]) -> Entry:
    if entry is not None and entry[0] >= ahead[0]:
        return entry
    return ahead[0], ahead[1]


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

"""The node's view of its log: entries after a base (the entry before the first retained one).

Indexes start at 1; (0, 0) is the base of a log that never lost a prefix. Entries at or
below the base were committed and removed by retention; only their last term is known.
"""

from __future__ import annotations

from ha.dledger.core.messages import Entry, payload_crc


class EntryLog:
    def __init__(self, base_index: int = 0, base_term: int = 0,
                 entries: tuple[Entry, ...] = ()) -> None:
        self.base_index = base_index
        self.base_term = base_term
        self._entries: list[Entry] = []
        for entry in entries:
            self.append(entry)

    @property
    def last_index(self) -> int:
        return self.base_index + len(self._entries)

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self.base_term

    def term_at(self, index: int) -> int | None:
        """The term at `index`, or None when it is past the end or removed by retention."""
        if index == self.base_index:
            return self.base_term
        if index < self.base_index or index > self.last_index:
            return None
        return self._entries[index - self.base_index - 1].term

    def crc_at(self, index: int) -> int | None:
        """The CRC-32 of the payload at `index` (None at or below the base, or past the end)."""
        if index <= self.base_index or index > self.last_index:
            return None
        return payload_crc(self._entries[index - self.base_index - 1].payload)

    def entry(self, index: int) -> Entry:
        assert self.base_index < index <= self.last_index, (index, self.base_index)
        return self._entries[index - self.base_index - 1]

    def slice(self, first_index: int, count_max: int) -> tuple[Entry, ...]:
        """Up to `count_max` entries from `first_index` (retained and in the log)."""
        assert first_index > self.base_index
        start = first_index - self.base_index - 1
        return tuple(self._entries[start:start + count_max])

    def entries(self) -> tuple[Entry, ...]:
        return tuple(self._entries)

    def append(self, entry: Entry) -> None:
        assert entry.index == self.last_index + 1, (entry.index, self.last_index)
        assert entry.term >= self.last_term, (entry.term, self.last_term)
        self._entries.append(entry)

    def append_many(self, entries: tuple[Entry, ...]) -> None:
        for entry in entries:
            self.append(entry)

    def truncate_from(self, index: int) -> None:
        assert self.base_index < index <= self.last_index
        del self._entries[index - self.base_index - 1:]

    def reset(self, base_index: int, base_term: int) -> None:
        self.base_index, self.base_term = base_index, base_term
        self._entries.clear()

    def compact_to(self, index: int) -> None:
        """Retention: forget entries up to `index` (the caller checks they are committed)."""
        assert self.base_index <= index <= self.last_index
        base_term = self.term_at(index)
        assert base_term is not None
        del self._entries[:index - self.base_index]
        self.base_index, self.base_term = index, base_term

    def matches(self, index: int, term: int) -> bool:
        return self.term_at(index) == term

    def conflict_hint(self, index: int, term: int) -> tuple[int, int]:
        """The largest index <= `index` whose term is <= `term`, and its term: the fast back-up
        search (etcd's findConflictByTerm); it stops at the base."""
        probe = min(index, self.last_index)
        while probe > self.base_index:
            probe_term = self.term_at(probe)
            assert probe_term is not None
            if probe_term <= term:
                return probe, probe_term
            probe -= 1
        return self.base_index, self.base_term

    def at_least_as_new(self, last_index: int, last_term: int) -> bool:
        """Raft's up-to-date check: is a log ending at (last_index, last_term) as new as ours?"""
        if last_term != self.last_term:
            return last_term > self.last_term
        return last_index >= self.last_index

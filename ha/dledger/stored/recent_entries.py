"""RecentEntries: the newest entries of a store-backed log kept in memory, for the pushes.

A leader pushes each entry soon after appending it; reading it back from the entry index and
the commit log cost the leader's host about a seventh of its time. This keeps the log's
newest entries, contiguous up to its last one and bounded by payload bytes, so a push of
recent entries reads none from disk; anything older (a lagging or new follower) is read from
disk as before. It mirrors every change of the log: an append past a gap, a truncation, a
reset and a compaction keep it a true suffix of the log.
"""

from __future__ import annotations

from collections import deque

from ha.dledger.core.messages import Entry


class RecentEntries:
    def __init__(self, bytes_max: int) -> None:
        assert bytes_max > 0
        self.bytes_max = bytes_max
        self._entries: deque[Entry] = deque()
        self._bytes = 0

    @property
    def first_index(self) -> int | None:
        return self._entries[0].index if self._entries else None

    def __len__(self) -> int:
        return len(self._entries)

    def append(self, entry: Entry) -> None:
        """The log's new last entry; the oldest go past `bytes_max` (the newest always stays)."""
        if self._entries and entry.index != self._entries[-1].index + 1:
            self.clear()  # not contiguous with what is kept: start again from this one
        self._entries.append(entry)
        self._bytes += len(entry.payload)
        while self._bytes > self.bytes_max and len(self._entries) > 1:
            self._bytes -= len(self._entries.popleft().payload)

    def truncate_from(self, index: int) -> None:
        while self._entries and self._entries[-1].index >= index:
            self._bytes -= len(self._entries.pop().payload)

    def drop_through(self, index: int) -> None:
        """Compaction: entries up to `index` are no longer the log's."""
        while self._entries and self._entries[0].index <= index:
            self._bytes -= len(self._entries.popleft().payload)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def _position(self, index: int) -> int | None:
        """Where entry `index` is in the deque, or None when it is not kept."""
        first = self.first_index
        if first is None or not first <= index < first + len(self._entries):
            return None
        return index - first

    def get(self, index: int) -> Entry | None:
        position = self._position(index)
        return None if position is None else self._entries[position]

    def slice(self, first_index: int, count_max: int, bytes_max: int) -> tuple[Entry, ...] | None:
        """Up to `count_max` entries from `first_index` within `bytes_max` payload bytes (at
        least one), or None when `first_index` is not kept (read it from disk)."""
        start = self._position(first_index)
        if start is None:
            return None
        entries: list[Entry] = []
        size_total = 0
        kept = self._entries
        # By position, not by iterating from the left: a deque reaches an item from its
        # nearer end, and pushes read near the newest end (an islice would walk them all).
        for position in range(start, min(len(kept), start + count_max)):
            entry = kept[position]
            if entries and size_total + len(entry.payload) > bytes_max:
                break
            entries.append(entry)
            size_total += len(entry.payload)
        return tuple(entries)

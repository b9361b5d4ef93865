"""The pop records a master applied ahead (app/broker/consumption.py `_apply_ahead`), kept
until dispatch reaches them, so that dispatch's apply takes the record instead of decoding
its body again (the master decodes every record it wrote otherwise, one object per event).

A record is kept with the commit-log offset it was stored at and its bytes, and given back
only for a record at that offset with the same bytes: decoding those bytes gives that record
(records.py: `decode(encode(record)) == record`), so a record taken here applies exactly as
the decoded one would, whatever happened to the log meanwhile (a cut that put other bytes at
that offset, a reset of the states: the apply itself is unchanged, only its decode skipped).
Bounded (`records_max`: the oldest kept is dropped first); records below an offset taken are
dropped (dispatch passes the log in order). Not thread-safe: the caller holds its lock.
"""

from __future__ import annotations

from store.consumption.records import PopRecord

AHEAD_RECORDS_MAX = 256


class RecordsAhead:
    def __init__(self, records_max: int = AHEAD_RECORDS_MAX) -> None:
        if records_max < 1:
            raise ValueError("records_max is at least 1")
        self.records_max = records_max
        self._kept: dict[int, tuple[bytes, PopRecord]] = {}  # in the order written
        self.taken = 0  # records given back (decodes skipped)

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, commit_log_offset: int, body: bytes, record: PopRecord) -> None:
        """`record`, whose bytes `body` are stored at `commit_log_offset` (< 0: unknown, as
        a DLedger append answers: nothing is kept)."""
        if commit_log_offset < 0:
            return
        kept = self._kept
        kept.pop(commit_log_offset, None)  # (a cut's offset written again: the newest)
        while len(kept) >= self.records_max:
            del kept[next(iter(kept))]
        kept[commit_log_offset] = (body, record)

    def take(self, commit_log_offset: int, body: bytes) -> PopRecord | None:
        """The record kept for these bytes at this offset, or None (decode them); the records
        kept before it are dropped."""
        kept = self._kept
        found = kept.pop(commit_log_offset, None)
        while kept and (first := next(iter(kept))) < commit_log_offset:
            del kept[first]
        if found is None or found[0] != body:
            return None
        self.taken += 1
        return found[1]

    def clear(self) -> None:
        self._kept.clear()

"""The timer state every replica derives from its log: lane progress, pending cancels,
counts. Dispatch hands it each record carrying a `TWINLOG_TIMER_*` property, in log order.

Applying is idempotent for any suffix of what was applied: progress only grows, a cancel is
set by its marker and removed by the drop that consumes it (the last of the two wins either
way), and a count moves only when a record's lane entry moves progress. So the state may be
saved at any dispatch position (`save`), and recovery redispatches from the lower of that
position and the checkpoint's: whatever it meets again changes nothing, whatever the save
missed is applied. A state that claims more than the log holds (a power cut took records it
had seen, or a slave cut its tail) is thrown away and rebuilt from the whole log.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path

import orjson

from store.checkpoint import write_file_atomically
from store.files.disk import REAL_DISK, Disk
from store.record import decode_properties
from store.timers.names import (
    DROP_CANCELLED,
    DROP_REASONS,
    PROPERTY_CANCEL,
    PROPERTY_DROP_REASON,
    PROPERTY_DUE_MS,
    PROPERTY_FROM,
    PROPERTY_ORIGIN_OFFSET,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SCHEDULE,
)

log = logging.getLogger(__name__)

_VERSION = 1
# Saved states kept in memory for a cut of the log (SavedStates): checkpoints come every few
# seconds, so these reach back over the recent tail a slave's cut removes.
SAVED_COPIES_MAX = 8


@dataclass(frozen=True, slots=True)
class TimerCounts:
    delivered_total: int
    rolled_total: int
    dropped_totals: dict[str, int]


def parse_from(value: str) -> tuple[str, int] | None:
    """"S:3:17" -> ("S:3", 17); None when malformed."""
    lane, _, offset = value.rpartition(":")
    if not lane or not offset.isdigit():
        return None
    return lane, int(offset)


class TimerState:
    def __init__(self) -> None:
        # Dispatch's thread writes; readers (the scheduler, views) copy under the lock.
        self._lock = threading.Lock()
        self._progress: dict[str, int] = {}  # lane key -> next queue offset to consume
        self._cancels: dict[int, int] = {}  # scheduled copy's offset -> its due ms
        self._delivered_total = 0
        self._rolled_total = 0
        self._dropped: Counter[str] = Counter()

    # -- applying (dispatch's thread) --------------------------------------------------------

    def apply_raw(self, raw_properties: bytes) -> None:
        self.apply(decode_properties(raw_properties))

    def apply(self, properties: dict[str, str]) -> None:
        with self._lock:
            cancel = properties.get(PROPERTY_CANCEL)
            if cancel is not None and cancel.isdigit():
                self._cancels[int(cancel)] = _int(properties.get(PROPERTY_DUE_MS))
            source = properties.get(PROPERTY_FROM)
            parsed = parse_from(source) if source is not None else None
            if parsed is None:
                return
            lane, queue_offset = parsed
            reason = properties.get(PROPERTY_DROP_REASON)
            if reason == DROP_CANCELLED:
                origin = properties.get(PROPERTY_ORIGIN_OFFSET)
                if origin is not None and origin.isdigit():
                    self._cancels.pop(int(origin), None)
            if queue_offset < self._progress.get(lane, 0):
                return  # met again (a redispatch): counted the first time
            self._progress[lane] = queue_offset + 1
            if reason is not None:
                self._dropped[reason if reason in DROP_REASONS else "other"] += 1
            elif PROPERTY_SCHEDULE in properties or PROPERTY_REAL_TOPIC in properties:
                self._rolled_total += 1  # a roll: a lane entry again
            else:
                self._delivered_total += 1

    def reset(self) -> None:
        with self._lock:
            self._progress.clear()
            self._cancels.clear()
            self._delivered_total = self._rolled_total = 0
            self._dropped.clear()

    # -- reading -----------------------------------------------------------------------------

    def progress(self) -> dict[str, int]:
        with self._lock:
            return dict(self._progress)

    def progress_of(self, lane_key: str) -> int:
        with self._lock:
            return self._progress.get(lane_key, 0)

    def is_cancelled(self, origin_offset: int) -> bool:
        return origin_offset in self._cancels  # one dict read: no lock needed

    @property
    def cancel_count(self) -> int:
        return len(self._cancels)

    def counts(self) -> TimerCounts:
        with self._lock:
            return TimerCounts(self._delivered_total, self._rolled_total, dict(self._dropped))

    # -- saving ------------------------------------------------------------------------------

    def encode(self, covered_offset: int) -> bytes:
        """The state as it is after dispatching everything below `covered_offset`."""
        with self._lock:
            return orjson.dumps({
                "version": _VERSION, "covered_offset": covered_offset,
                "progress": self._progress,
                "cancels": {str(offset): due for offset, due in self._cancels.items()},
                "delivered_total": self._delivered_total, "rolled_total": self._rolled_total,
                "dropped": dict(self._dropped)})

    def load(self, path: Path) -> int | None:
        """Load a saved state; the offset it covers, or None (no file, or an unreadable one:
        then the state is empty and the whole log must be dispatched through it)."""
        self.reset()
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        return self.load_encoded(raw, str(path))

    def load_encoded(self, raw: bytes, source: str = "a saved timer state") -> int | None:
        """`load` from what `encode` made: the offset it covers, or None (unreadable: the
        state is left empty)."""
        self.reset()
        try:
            document = orjson.loads(raw)
            if document.get("version") != _VERSION:
                raise ValueError(f"version {document.get('version')!r}")
            covered = int(document["covered_offset"])
            progress = {str(lane): int(offset) for lane, offset in document["progress"].items()}
            cancels = {int(offset): int(due) for offset, due in document["cancels"].items()}
            delivered, rolled = int(document["delivered_total"]), int(document["rolled_total"])
            dropped = Counter({str(k): int(v) for k, v in document["dropped"].items()})
        except (ValueError, KeyError, TypeError, AttributeError, orjson.JSONDecodeError) as error:
            log.warning("%s is unreadable (%s): the timer state is rebuilt from the log",
                        source, error)
            return None
        with self._lock:
            self._progress, self._cancels = progress, cancels
            self._delivered_total, self._rolled_total, self._dropped = delivered, rolled, dropped
        return covered


class SavedStates:
    """The timer state as the last `copies_max` saves encoded it, each with the dispatch
    offset it covers. A cut of the log derives the state again from the newest copy at or
    below the cut and redispatches from there, not from the log's first offset (a copy
    past the cut holds what the cut records did, and goes)."""

    def __init__(self, copies_max: int = SAVED_COPIES_MAX) -> None:
        self._copies: deque[tuple[int, bytes]] = deque(maxlen=copies_max)

    def add(self, covered_offset: int, encoded: bytes) -> None:
        while self._copies and self._copies[-1][0] >= covered_offset:
            self._copies.pop()  # the log went back since: offsets only grow in the deque
        self._copies.append((covered_offset, encoded))

    def cut(self, offset: int) -> None:
        """The log was cut back to `offset`: copies covering records past it go."""
        while self._copies and self._copies[-1][0] > offset:
            self._copies.pop()

    def newest_within(self, offset: int, min_offset: int) -> tuple[int, bytes] | None:
        """The newest copy covering at most `offset`, and at least `min_offset` (what the
        log still holds: redispatch starts there)."""
        for covered_offset, encoded in reversed(self._copies):
            if min_offset <= covered_offset <= offset:
                return covered_offset, encoded
        return None


def save_state(path: Path, encoded: bytes, disk: Disk = REAL_DISK) -> None:
    write_file_atomically(path, encoded, disk)


def _int(value: str | None) -> int:
    return int(value) if value is not None and value.lstrip("-").isdigit() else 0

"""Deleted topics: each with the commit-log offset it was deleted at.

A deleted topic's records stay in the commit log until retention removes them, so dispatch
(at run time, and redispatch at recovery from any scan start) would rebuild its consume
queues and key-index entries from them. A tombstone says: records of this topic below this
offset are dead. It is written durably (temp file, fsync, rename) before the topic's queues
are removed, and dropped once retention passes its offset, so the file stays small.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from store.checkpoint import write_file_atomically
from store.files.disk import REAL_DISK, Disk
from store.topic import is_valid_topic

log = logging.getLogger(__name__)

TOMBSTONES_MAX = 100_000
# Deletions kept per topic: a cut log (a slave cut back, a power cut) may lose the last ones.
HISTORY_PER_TOPIC_MAX = 16


class Tombstones:
    def __init__(self, path: Path, disk: Disk = REAL_DISK) -> None:
        self._path = path
        self._disk = disk
        # topic -> its deletions' offsets, ascending (the last says what is dead). Replaced
        # whole, never changed in place: dispatch reads it without a lock. The earlier ones
        # matter when a cut log loses the last (`cut`).
        self._offsets: dict[str, tuple[int, ...]] = {}

    def load(self) -> None:
        """Read the file; a damaged one is logged and ignored (a deleted topic's queues may
        then come back from its records: visible, never a wrong answer about live data)."""
        try:
            loaded = json.loads(self._path.read_bytes())
            offsets = {str(topic): _offsets_of(value) for topic, value in loaded.items()
                       if is_valid_topic(str(topic))}
        except FileNotFoundError:
            return
        except (ValueError, TypeError, AttributeError) as error:
            log.error("deleted topics file %s is damaged (%s); ignoring it", self._path, error)
            return
        self._offsets = {topic: value for topic, value in offsets.items() if value}

    def add(self, topic: str, deleted_at_offset: int, commit_log_min_offset: int) -> None:
        """Record the deletion durably (OSError when it could not be written); tombstones
        retention has passed are dropped on the way."""
        offsets = {name: value for name, value in self._offsets.items()
                   if value[-1] > commit_log_min_offset}
        history = offsets.get(topic, ())
        if not history or deleted_at_offset > history[-1]:
            history = (*history, deleted_at_offset)[-HISTORY_PER_TOPIC_MAX:]
        offsets[topic] = history
        if len(offsets) > TOMBSTONES_MAX:  # the oldest deletions go first
            for stale in sorted(offsets, key=lambda name: offsets[name][-1])[
                    :len(offsets) - TOMBSTONES_MAX]:
                del offsets[stale]
        self._write(offsets)

    def cut(self, end_offset: int) -> dict[str, int]:
        """The log lost everything from `end_offset` on, deletions included: forget those.
        Returns each topic whose last deletion went, with what is dead of it now (the
        deletion before, or 0): its records from there up to `end_offset` are live again."""
        revived = {topic: value for topic, value in self._offsets.items()
                   if value[-1] >= end_offset}
        if not revived:
            return {}
        offsets = dict(self._offsets)
        for topic, value in revived.items():
            kept = tuple(offset for offset in value if offset < end_offset)
            if kept:
                offsets[topic] = kept
            else:
                del offsets[topic]
        self._write(offsets)
        return {topic: self.dead_below(topic) for topic in revived}

    def _write(self, offsets: dict[str, tuple[int, ...]]) -> None:
        document = {topic: list(value) for topic, value in offsets.items()}
        write_file_atomically(self._path, json.dumps(document, sort_keys=True).encode(),
                              self._disk)
        self._offsets = offsets

    def dead_below(self, topic: str) -> int:
        """Records of `topic` below this offset are of a deleted incarnation (0: none)."""
        value = self._offsets.get(topic)
        return value[-1] if value else 0

    def __bool__(self) -> bool:
        return bool(self._offsets)


def revived_start(revived: dict[str, int], end_offset: int, commit_log_min_offset: int,
                  file_size_bytes: int) -> int:
    """Where dispatch must start again after a cut at `end_offset` that revived these topics
    (`Tombstones.cut`): the start of the commit-log file of their earliest remaining deletion
    (a file starts with a record; a deletion's offset need not be one), or the log's first
    offset; `end_offset` when none was revived."""
    if not revived:
        return end_offset
    earliest = min(revived.values())
    return min(end_offset, max(commit_log_min_offset, earliest - earliest % file_size_bytes))


def _offsets_of(value: object) -> tuple[int, ...]:
    """A topic's deletions as stored: a list (an int in files written before the history)."""
    if isinstance(value, list):
        return tuple(sorted(int(offset) for offset in value))
    if isinstance(value, int):
        return (value,)
    raise ValueError(f"not a deletion offset: {value!r}")

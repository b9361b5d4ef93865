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


class Tombstones:
    def __init__(self, path: Path, disk: Disk = REAL_DISK) -> None:
        self._path = path
        self._disk = disk
        # topic -> deleted-at offset. Replaced whole, never changed in place: dispatch reads
        # it without a lock.
        self._offsets: dict[str, int] = {}

    def load(self) -> None:
        """Read the file; a damaged one is logged and ignored (a deleted topic's queues may
        then come back from its records: visible, never a wrong answer about live data)."""
        try:
            loaded = json.loads(self._path.read_bytes())
            offsets = {str(topic): int(offset) for topic, offset in loaded.items()
                       if is_valid_topic(str(topic))}
        except FileNotFoundError:
            return
        except (ValueError, TypeError, AttributeError) as error:
            log.error("deleted topics file %s is damaged (%s); ignoring it", self._path, error)
            return
        self._offsets = offsets

    def add(self, topic: str, deleted_at_offset: int, commit_log_min_offset: int) -> None:
        """Record the deletion durably (OSError when it could not be written); tombstones
        retention has passed are dropped on the way."""
        offsets = {name: offset for name, offset in self._offsets.items()
                   if offset > commit_log_min_offset}
        offsets[topic] = max(deleted_at_offset, offsets.get(topic, 0))
        if len(offsets) > TOMBSTONES_MAX:  # the oldest deletions go first
            for stale in sorted(offsets, key=offsets.__getitem__)[:len(offsets) - TOMBSTONES_MAX]:
                del offsets[stale]
        write_file_atomically(self._path, json.dumps(offsets, sort_keys=True).encode(),
                              self._disk)
        self._offsets = offsets

    def dead_below(self, topic: str) -> int:
        """Records of `topic` below this offset are of a deleted incarnation (0: none)."""
        return self._offsets.get(topic, 0)

    def __bool__(self) -> bool:
        return bool(self._offsets)

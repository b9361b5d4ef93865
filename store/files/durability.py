"""A seam at the places where bytes or names become durable (the msync of a mapped file's
range, the atomic replace of a small file such as the checkpoint, the fsync of a directory)
and where a log file is created.
Listeners learn exactly what each made durable, so that tests can play a power cut that keeps
only that (tests/support/power.py), in this process or, through a journal, in a broker's.

With no listener registered the cost is one check of an empty tuple per msync.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol


class DurabilityListener(Protocol):
    def created(self, path: Path) -> None:
        """A new mapped file: nothing of it is durable yet."""

    def synced(self, path: Path, position: int, data: bytes) -> None:
        """Bytes [position, position + len(data)) of `path` reached the disk as `data`."""

    def names_synced(self, directory: Path) -> None:
        """The names in `directory` (files created, renamed, removed) are durable."""

    def replaced(self, path: Path, data: bytes) -> None:
        """`path` now durably holds exactly `data` (written, fsynced, renamed, dir fsynced)."""


# A tuple, swapped whole: the flush thread iterates it without a lock.
listeners: tuple[DurabilityListener, ...] = ()


def add_listener(listener: DurabilityListener) -> None:
    global listeners
    listeners = (*listeners, listener)


def remove_listener(listener: DurabilityListener) -> None:
    global listeners
    listeners = tuple(x for x in listeners if x is not listener)


def read_before_sync(paths: Iterable[Path]) -> dict[Path, bytes]:
    """The files' contents for the listeners, read before a whole-file sync (an fsync or a
    syncfs, not an msync of a known range): what was there before it is durable after it.
    Nothing is read when there are no listeners."""
    contents: dict[Path, bytes] = {}
    if listeners:
        for path in paths:
            try:
                contents[path] = path.read_bytes()
            except FileNotFoundError:  # removed since (retention): nothing of it to keep
                pass
    return contents


def whole_files_synced(contents: dict[Path, bytes]) -> None:
    for path, data in contents.items():
        for listener in listeners:
            listener.synced(path, 0, data)
